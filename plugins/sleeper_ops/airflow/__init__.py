"""The Airflow adapter and provider face: hook, operators, DAG factory, plugin, standalone.

Every module here may import Airflow; nothing outside this package imports it."""
