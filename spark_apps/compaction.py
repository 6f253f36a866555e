"""spark-submit entry point: run a batch of a Sleeper table's compaction jobs, one job a task.

    spark-submit --master local[2] spark_apps/compaction.py (--home SLEEPER_HOME | --config-file F) \
        --table T [--jobs-file J] [--results-file R] [--run-id ID]

See :mod:`sleeper_ops.spark.driver` (its ``main``) for what it does.
"""

import sys

from sleeper_ops.spark.driver import main

if __name__ == "__main__":
    sys.exit(main())
