"""spark-submit entry point: bulk import files into a Sleeper table, in one commit.

    spark-submit --master local[2] spark_apps/bulk_import.py (--home SLEEPER_HOME | --config-file F) \
        --table T (--source PATH [--source PATH ...] | --sources P1,P2) [--import-key K] [--run-id ID] \
        [--results-file R]

The entry point of EMR Serverless bulk import jobs too (``--config-file s3://...``;
see :mod:`sleeper_ops.spark.emr_serverless`).

See :mod:`sleeper_ops.spark.bulk_driver` (its ``main``) for what it does.
"""

import sys

from sleeper_ops.spark.bulk_driver import main

if __name__ == "__main__":
    sys.exit(main())
