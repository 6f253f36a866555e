"""The Airflow provider face, laid out like the official providers: ``hooks/``,
``operators/``, ``sensors/``, ``triggers/``, ``links/``, ``assets/``, ``utils/``, the task
runner every operator goes through, and :func:`~sleeper_ops.airflow.get_provider_info.get_provider_info`.
Sleeper's own deployment (the DAG factory, the plugin, the processes that run Airflow) is
:mod:`sleeper_ops.orchestration`, above this package. Modules here may import Airflow;
the core never imports them."""
