"""Table properties: the registry of names, defaults and checks.

Each property is one constant of :mod:`~statestore.properties.definitions` (a
:class:`Prop`: the name, with its default, description and check), imported from here:
``table.get_int(GC_DELAY_MINUTES)``. Values are strings, checked when set
(:func:`validate_properties`, :func:`validate_values`; kinds of value in
:mod:`~statestore.properties.validators`) and together (:func:`check_combination`);
:func:`apply_update` merges an update (an empty value clears) into a table's set.
``python -m statestore.properties.doc`` prints the table of every property that
``docs/usage/tables-and-properties.md`` holds.
"""

from __future__ import annotations

import warnings
from typing import Any

from statestore.properties.checks import (
    apply_update,
    check_backend_limits,
    check_combination,
    did_you_mean,
    effective_properties,
    split_update,
    validate_properties,
    validate_values,
)
from statestore.properties.definitions import (
    AGEOFF_REWRITE_FRACTION,
    BULK_IMPORT_EMR_SERVERLESS_APPLICATION_ID,
    BULK_IMPORT_EMR_SERVERLESS_EXECUTION_ROLE_ARN,
    BULK_IMPORT_EMR_SERVERLESS_PACKAGE,
    BULK_IMPORT_MIN_LEAF_PARTITIONS,
    BULK_IMPORT_MIN_ROWS_PER_LEAF,
    BULK_IMPORT_PLATFORM,
    BULK_IMPORT_PLATFORMS,
    BULK_IMPORT_SOURCE,
    BULK_IMPORT_START,
    BULK_IMPORT_WAIT_HOURS,
    COMPACTION_FILES_BATCH_SIZE,
    COMPACTION_JOB_RETRY_MINUTES,
    COMPACTION_RUNNER,
    COMPACTION_STRATEGY,
    COMPACTION_STRATEGY_SIZERATIO_RATIO,
    CREATED_BY,
    DATED_RETRY_DELAY_SECONDS,
    DELETE_PURGE_HOURS,
    EMR_PROPERTIES,
    EXPORT_DESTINATION,
    GC_BATCH_SIZE,
    GC_DELAY_MINUTES,
    GC_JOB_ABANDON_MINUTES,
    GC_ORPHAN_GRACE_MINUTES,
    HISTORY_RETENTION_MINUTES,
    INGEST_BATCHER_BULK_IMPORT_MIN_SIZE,
    INGEST_BATCHER_JOB_MAX_AGE_SECONDS,
    INGEST_BATCHER_JOB_MAX_FILES,
    INGEST_BATCHER_JOB_MAX_SIZE,
    INGEST_BATCHER_JOB_MIN_SIZE,
    INGEST_EVENTS_DEAD_LETTER_PREFIX,
    INGEST_EVENTS_QUEUE,
    INGEST_EVENTS_VISIBILITY_SECONDS,
    INGEST_MAX_FILES_PER_LEAF,
    INGEST_MAX_FILES_WAIT_SECONDS,
    INGEST_PARQUET_COMPRESSION_CODEC,
    ITERATOR_AGEOFF,
    ITERATOR_AGGREGATION,
    ITERATOR_PYTHON,
    ONLINE,
    OPERATIONS,
    PARQUET_COMPRESSION_CODEC,
    PARQUET_PAGE_SIZE,
    PARQUET_ROWGROUP_ROWS_MAX,
    PARQUET_ROWKEY_BLOOM_FPP,
    PARTITION_SPLITTING_THRESHOLD,
    PREFIX,
    PROPERTY_DEFS,
    SCHEDULE_BULK_IMPORT,
    SCHEDULE_COMPACTION,
    SCHEDULE_EXPORT,
    SCHEDULE_FLUSH,
    SCHEDULE_GC,
    SCHEDULE_INGEST_BATCHER,
    SCHEDULE_SPLIT,
    SCHEDULES,
    SPARK_DEFERRABLE,
    SPARK_DURABLE,
    WRITE_BUFFER_FLUSH_AGE_SECONDS,
    WRITE_BUFFER_FLUSH_RECORDS,
    WRITE_BUFFER_MAX_RECORDS,
    WRITE_IDEMPOTENCY_HOURS,
    Prop,
    PropertyDef,
)
from statestore.properties.validators import CRON_PRESETS, Kind, parse_size

#: former second names of properties: each warns and gives the property's constant
_RENAMED = {
    "EMR_APPLICATION_ID": "BULK_IMPORT_EMR_SERVERLESS_APPLICATION_ID",
    "EMR_EXECUTION_ROLE": "BULK_IMPORT_EMR_SERVERLESS_EXECUTION_ROLE_ARN",
    "EMR_PACKAGE": "BULK_IMPORT_EMR_SERVERLESS_PACKAGE",
    "GRACE": "GC_ORPHAN_GRACE_MINUTES",
    "RETRY": "COMPACTION_JOB_RETRY_MINUTES",
    "ABANDON": "GC_JOB_ABANDON_MINUTES",
}


def __getattr__(name: str) -> Any:
    new = _RENAMED.get(name)
    if new is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"statestore.properties.{name} is deprecated: use statestore.properties.{new}",
                  DeprecationWarning, stacklevel=2)
    return globals()[new]


__all__ = [
    "AGEOFF_REWRITE_FRACTION",
    "BULK_IMPORT_EMR_SERVERLESS_APPLICATION_ID",
    "BULK_IMPORT_EMR_SERVERLESS_EXECUTION_ROLE_ARN",
    "BULK_IMPORT_EMR_SERVERLESS_PACKAGE",
    "BULK_IMPORT_MIN_LEAF_PARTITIONS",
    "BULK_IMPORT_MIN_ROWS_PER_LEAF",
    "BULK_IMPORT_PLATFORM",
    "BULK_IMPORT_PLATFORMS",
    "BULK_IMPORT_SOURCE",
    "BULK_IMPORT_START",
    "BULK_IMPORT_WAIT_HOURS",
    "COMPACTION_FILES_BATCH_SIZE",
    "COMPACTION_JOB_RETRY_MINUTES",
    "COMPACTION_RUNNER",
    "COMPACTION_STRATEGY",
    "COMPACTION_STRATEGY_SIZERATIO_RATIO",
    "CREATED_BY",
    "CRON_PRESETS",
    "DATED_RETRY_DELAY_SECONDS",
    "DELETE_PURGE_HOURS",
    "EMR_PROPERTIES",
    "EXPORT_DESTINATION",
    "GC_BATCH_SIZE",
    "GC_DELAY_MINUTES",
    "GC_JOB_ABANDON_MINUTES",
    "GC_ORPHAN_GRACE_MINUTES",
    "HISTORY_RETENTION_MINUTES",
    "INGEST_BATCHER_BULK_IMPORT_MIN_SIZE",
    "INGEST_EVENTS_DEAD_LETTER_PREFIX",
    "INGEST_EVENTS_QUEUE",
    "INGEST_EVENTS_VISIBILITY_SECONDS",
    "INGEST_BATCHER_JOB_MAX_AGE_SECONDS",
    "INGEST_BATCHER_JOB_MAX_FILES",
    "INGEST_BATCHER_JOB_MAX_SIZE",
    "INGEST_BATCHER_JOB_MIN_SIZE",
    "ITERATOR_AGEOFF",
    "ITERATOR_AGGREGATION",
    "ITERATOR_PYTHON",
    "Kind",
    "ONLINE",
    "OPERATIONS",
    "INGEST_MAX_FILES_PER_LEAF",
    "INGEST_MAX_FILES_WAIT_SECONDS",
    "INGEST_PARQUET_COMPRESSION_CODEC",
    "PARQUET_COMPRESSION_CODEC",
    "PARQUET_PAGE_SIZE",
    "PARQUET_ROWGROUP_ROWS_MAX",
    "PARQUET_ROWKEY_BLOOM_FPP",
    "PARTITION_SPLITTING_THRESHOLD",
    "PREFIX",
    "PROPERTY_DEFS",
    "Prop",
    "PropertyDef",
    "SCHEDULES",
    "SCHEDULE_BULK_IMPORT",
    "SCHEDULE_COMPACTION",
    "SCHEDULE_EXPORT",
    "SCHEDULE_FLUSH",
    "SCHEDULE_GC",
    "SCHEDULE_INGEST_BATCHER",
    "SCHEDULE_SPLIT",
    "SPARK_DEFERRABLE",
    "SPARK_DURABLE",
    "WRITE_BUFFER_FLUSH_AGE_SECONDS",
    "WRITE_BUFFER_FLUSH_RECORDS",
    "WRITE_BUFFER_MAX_RECORDS",
    "WRITE_IDEMPOTENCY_HOURS",
    "apply_update",
    "check_backend_limits",
    "check_combination",
    "did_you_mean",
    "effective_properties",
    "parse_size",
    "split_update",
    "validate_properties",
    "validate_values",
]
