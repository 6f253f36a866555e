"""spark-submit entry points; installed as ``sleeper_ops.spark.apps`` so spark-submit finds them outside a checkout."""
