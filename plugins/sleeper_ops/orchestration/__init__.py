"""Sleeper's own Airflow deployment: the DAG factory behind ``dags/``, the plugin that
mounts the REST app and the status page, and the processes that run Airflow
(``sleeper airflow``, its CLI batches, warm imports). Built on the provider face
(:mod:`sleeper_ops.airflow`), which never imports it."""
