"""The Spark adapter: compaction runner ``spark`` (a batch of jobs in one spark-submit),
bulk import, and the ``sleeper`` data source.

* :mod:`~sleeper_ops.spark.batch_files`: the jobs, results and configuration files a
  batch crosses the spark-submit boundary with;
* :mod:`~sleeper_ops.spark.submit`: the submitter, in the process that created the jobs;
* :mod:`~sleeper_ops.spark.driver`: the Spark driver (``spark_apps/compaction.py``);
* :mod:`~sleeper_ops.spark.executor`: what runs on the executors, one job a task;
* :mod:`~sleeper_ops.spark.attempts`: the key each task attempt writes (its own), and
  the driver's wait until every attempt of a job has ended.

The standing shape (issue 20, docs/adr/0005-standing-spark.md):

* :mod:`~sleeper_ops.spark.service`: a long-lived driver holding one SparkSession,
  running bulk imports and compaction batches sent over a local HTTP API through the
  drivers' own functions;
* :mod:`~sleeper_ops.spark.service_client`: what the ``spark`` runners do when
  ``[spark] service`` is set;
* :mod:`~sleeper_ops.spark.cluster`: a standalone master, workers and the service as
  separate processes (``sleeper cluster``).

And the reader: :mod:`~sleeper_ops.spark.datasource`, the Spark 4 Python data source
``spark.read.format("sleeper")`` (``register(spark)`` first).

The drivers and the service import pyspark inside functions; ``datasource`` imports it at module
level, so import it only where pyspark is installed; ``attempts`` imports it inside a task
(for the attempt id). Nothing else here imports it.
"""
