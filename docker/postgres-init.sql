-- Runs once, when the PostgreSQL volume is first created: Airflow's metadata database
-- beside the state store's (POSTGRES_DB creates "sleeper").
CREATE DATABASE airflow OWNER sleeper;
