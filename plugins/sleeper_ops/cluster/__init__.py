"""The scaled-out shape on one machine (``sleeper cluster``): Airflow with the
CeleryExecutor and Redis, S3 and DynamoDB on moto (or PostgreSQL), a standing Spark
cluster; :mod:`~sleeper_ops.cluster.environment` is the one description of each Airflow
process's environment, shared with ``docker-compose.yaml``."""
