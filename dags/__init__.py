"""The Sleeper workflow definitions, one file per operation; installed as ``sleeper_ops.airflow.dag_files``."""
