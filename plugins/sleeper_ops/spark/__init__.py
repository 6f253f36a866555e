"""The Spark adapter: compaction runner ``spark``, a batch of jobs in one spark-submit.

* :mod:`~sleeper_ops.spark.batch_files`: the jobs, results and configuration files a
  batch crosses the spark-submit boundary with;
* :mod:`~sleeper_ops.spark.submit`: the submitter, in the process that created the jobs;
* :mod:`~sleeper_ops.spark.driver`: the Spark driver (``spark_apps/compaction.py``);
* :mod:`~sleeper_ops.spark.executor`: what runs on the executors, one job a task.

Only the driver imports pyspark, inside its ``main``.
"""
