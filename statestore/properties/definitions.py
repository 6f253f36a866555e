"""Every table property, one constant each: the constant is the property's name (a
``str``) and carries its default, what it does and the values it takes.

A constant is named after its property: ``sleeper.table.gc.delay.minutes`` is
:data:`GC_DELAY_MINUTES` (the name without ``sleeper.table.``, upper case, ``.`` as ``_``).
Names follow Sleeper's where Sleeper has the property. Library code names a property only
through its constant (``tests/unit/test_property_names.py`` fails on a literal).
"""

from __future__ import annotations

from typing import Callable, Optional

from statestore.properties.validators import (
    AGEOFF,
    AGGREGATION,
    BLOOM_FPP,
    BOOL,
    CALLABLE_PATH,
    FRACTION,
    ISO_TIME,
    NON_EMPTY,
    NON_NEGATIVE_INT,
    POSITIVE_HOURS,
    POSITIVE_INT,
    ROLE_ARN,
    S3_PREFIX,
    SCHEDULE,
    SIZE,
    SQS_QUEUE_URL,
    at_least,
    between,
    choice,
)

PREFIX = "sleeper.table."


class Prop(str):
    """A table property: its name (the ``str`` itself, so it serves as a key of a table's
    properties and prints as the name), ``default`` (None: unset), ``description`` (what it
    does) and ``check`` (raises ``ValueError`` for a value of the wrong kind; a
    :class:`~statestore.properties.validators.Kind` also says in ``values`` which it takes).
    Pickles as its plain name."""

    default: Optional[str]
    description: str
    check: Callable[[str], None]

    def __new__(cls, name: str, default: Optional[str], description: str, check: Callable[[str], None]) -> Prop:
        self = super().__new__(cls, name)
        self.default, self.description, self.check = default, description, check
        return self

    @property
    def name(self) -> str:
        return str(self)

    @property
    def values(self) -> str:
        """The values the property takes, in words ("" if its check does not say)."""
        return str(getattr(self.check, "values", ""))

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return (str, (str(self),))


_DEFS: list[Prop] = []


def _prop(suffix: str, default: Optional[str], description: str, check: Callable[[str], None]) -> Prop:
    prop = Prop(PREFIX + suffix, default, description, check)
    _DEFS.append(prop)
    return prop


ONLINE = _prop("online", "true", "Only online tables are split, compacted, GC'd, DAG-flushed.", BOOL)
PARTITION_SPLITTING_THRESHOLD = _prop("partition.splitting.threshold", "1000000000",
                                      "Split a leaf partition once it holds more records than this.", POSITIVE_INT)
COMPACTION_STRATEGY = _prop("compaction.strategy", "sizeratio", "Compaction strategy: sizeratio or basic.",
                            choice("sizeratio", "basic"))
COMPACTION_FILES_BATCH_SIZE = _prop("compaction.files.batch.size", "12", "Most files one compaction job merges.",
                                    POSITIVE_INT)
COMPACTION_STRATEGY_SIZERATIO_RATIO = _prop("compaction.strategy.sizeratio.ratio", "3",
                                            "Size ratio of the size-ratio strategy.", POSITIVE_INT)
COMPACTION_RUNNER = _prop("compaction.runner", "local", "Where compaction jobs run: local or spark.",
                          choice("local", "spark"))
MAINTENANCE_NICE = _prop(
    "maintenance.nice", "0",
    "CPU priority (Unix nice) that the scheduled split, compaction and GC tasks of this table lower their "
    "worker process to, every thread of it, before they work: on a machine whose cores also serve queries "
    "and ingest (one machine, sleeper airflow), 10 lets key lookups take a core first while maintenance "
    "still runs on what they leave (docs/adr/0023). 0: the worker's own priority. Only ever lowers it; "
    "sleeper compact, sleeper split, sleeper gc and the Python API run at the caller's priority.",
    between(0, 19, "nice values run from 0 (a normal process) to 19 (the lowest priority); a negative "
                   "one would raise the priority, which needs privileges"))
GC_DELAY_MINUTES = _prop("gc.delay.minutes", "15", "Delete unreferenced files once unchanged this long.",
                         at_least(1, "queries planned against a file replaced by compaction read it for up to this "
                                     "long, so 0 would delete files under running queries"))
COMPACTION_JOB_RETRY_MINUTES = _prop(
    "compaction.job.retry.minutes", "30",
    "Re-run a compaction job whose inputs stay assigned to it with no progress for this long.",
    at_least(1, "0 would start a second attempt of every job still running"))
GC_ORPHAN_GRACE_MINUTES = _prop(
    "gc.orphan.grace.minutes", "60",
    "Delete objects under the table's prefix that the state store never knew once this old "
    "(and no job still running names them).",
    at_least(10, "a write in flight is older than its job's last update by the time it takes to "
                 "write, and a clock skew between hosts counts against the grace too"))
GC_JOB_ABANDON_MINUTES = _prop(
    "gc.job.abandon.minutes", "1440",
    "A job not yet committed or failed protects the outputs it names from the orphan sweep until "
    "it shows no progress for this long (it is then taken as dead).",
    at_least(10, "the longest job must finish within it, or its output may be swept"))
GC_BATCH_SIZE = _prop("gc.batch.size", "1000", "Files deleted per garbage collection commit.", POSITIVE_INT)
PARQUET_ROWGROUP_ROWS_MAX = _prop("parquet.rowgroup.rows.max", "2048",
                                  "Most rows in one Parquet row group (small: a point read decodes one; "
                                  "docs/adr/0002).", POSITIVE_INT)
PARQUET_PAGE_SIZE = _prop("parquet.page.size", "131072", "Target Parquet data page size in bytes.", POSITIVE_INT)
PARQUET_ROWKEY_BLOOM_FPP = _prop(
    "parquet.rowkey.bloom.fpp", "0.01",
    "False-positive rate of the Bloom filter each data file keeps, per row group, on the first row key "
    "field: a key lookup reads a row group only when its filter may hold the key, so its cost follows the "
    "files that hold the key, not every file of the leaf (on S3, the filters a file's footer read brings: "
    "its last 64 KiB to 1 MiB; docs/adr/0022). About 2 bytes a row at 0.01; 0: no filter. "
    "Applies to files written from then on.", BLOOM_FPP)
PARQUET_COMPRESSION_CODEC = _prop("parquet.compression.codec", "zstd", "Parquet compression codec.",
                                  choice("zstd", "snappy", "gzip", "lz4", "none"))
INGEST_PARQUET_COMPRESSION_CODEC = _prop(
    "ingest.parquet.compression.codec", "none",
    "Parquet codec of the files ingest, bulk import and flushes write (compaction rewrites them in "
    "parquet.compression.codec): none spends least CPU at ingest, for files about 3x larger until compacted; "
    "set it to zstd where storage bytes cost more than CPU (S3) or the table is loaded once.",
    choice("zstd", "snappy", "gzip", "lz4", "none"))
INGEST_MAX_FILES_PER_LEAF = _prop(
    "ingest.max.files.per.leaf", "0",
    "An ingest waits before reading its input while some leaf holds more than this many file references "
    "(its own and its ancestors': the files a key lookup reads), until compaction brings every leaf to it "
    "(a write stall, so lookups stay fast when ingest outruns compaction); 0: never wait.", NON_NEGATIVE_INT)
INGEST_MAX_FILES_WAIT_SECONDS = _prop(
    "ingest.max.files.wait.seconds", "600",
    "Longest an ingest waits for ingest.max.files.per.leaf before it gives up with an error, "
    "having read and written nothing.", POSITIVE_INT)
CREATED_BY = _prop("created.by", None,
                   "What created the table (free text); 'sleeper demo' replaces only a table it created itself.",
                   NON_EMPTY)
ITERATOR_AGEOFF = _prop("iterator.ageoff", None, "Age-off iterator: FIELD:MAX_AGE_MS.", AGEOFF)
ITERATOR_AGGREGATION = _prop("iterator.aggregation", None, "Aggregation iterator: sum(f1),max(f2),...", AGGREGATION)
ITERATOR_PYTHON = _prop("iterator.python", None,
                        "User iterator: module.path:function taking and returning an Arrow record batch.",
                        CALLABLE_PATH)
BULK_IMPORT_SOURCE = _prop(
    "bulk.import.source", None,
    "Where the table's dated bulk import DAG reads: a template on the run's data interval, e.g. "
    "s3://raw/events/{{ data_interval_start | ds }}/ (several separated by commas).", NON_EMPTY)
EXPORT_DESTINATION = _prop(
    "export.destination", None,
    "Where the table's dated export DAG writes: a directory or s3:// prefix, a template on the run's "
    "data interval, e.g. s3://exports/events/{{ data_interval_start | ds }}/ (one export a date).", NON_EMPTY)
BULK_IMPORT_START = _prop(
    "bulk.import.start", None,
    "The dated bulk import DAG's scheduled runs start with the first interval starting at or after "
    "this UTC date or time (ISO 8601, e.g. 2026-03-01) and run every interval after it; set to the "
    "time of setting the source when not given. Manual runs and backfills may run any date.", ISO_TIME)
BULK_IMPORT_WAIT_HOURS = _prop(
    "bulk.import.wait.hours", "6",
    "A dated bulk import run whose source has no input files yet waits for them this many hours "
    "(in Airflow's triggerer, holding no worker slot), then fails saying what it found missing.", POSITIVE_HOURS)
BULK_IMPORT_MIN_LEAF_PARTITIONS = _prop(
    "bulk.import.min.leaf.partitions", "64",
    "A bulk import into an empty table with fewer leaf partitions splits it first (into a table "
    "with data: in proportion to the import's share), at medians of the table and the input, "
    "as far as sleeper.table.bulk.import.min.rows.per.leaf allows.", POSITIVE_INT)
BULK_IMPORT_MIN_ROWS_PER_LEAF = _prop(
    "bulk.import.min.rows.per.leaf", "1000000",
    "A bulk import's pre-split leaves the table no more leaves than its records after the import "
    "divided by this (at least one): no leaf made for fewer rows.", POSITIVE_INT)
BULK_IMPORT_PLATFORMS = ("spark", "emr_serverless")
BULK_IMPORT_PLATFORM = _prop(
    "bulk.import.platform", "spark",
    "Where the dated bulk import DAG runs Spark: spark (the configuration's Spark master or "
    "service) or emr_serverless (an EMR Serverless job; needs the three emr.serverless properties).",
    choice(*BULK_IMPORT_PLATFORMS))
#: the EMR Serverless settings of a table whose bulk import platform is ``emr_serverless``
#: (named after Sleeper's ``sleeper.bulk.import.emr.serverless.*`` instance properties)
BULK_IMPORT_EMR_SERVERLESS_APPLICATION_ID = _prop(
    "bulk.import.emr.serverless.application.id", None,
    "The EMR Serverless application (Spark) that runs bulk imports.", NON_EMPTY)
BULK_IMPORT_EMR_SERVERLESS_EXECUTION_ROLE_ARN = _prop(
    "bulk.import.emr.serverless.execution.role.arn", None,
    "The IAM role an EMR Serverless bulk import job runs as (reads the sources and the package, "
    "writes the table's files and its state store).", ROLE_ARN)
BULK_IMPORT_EMR_SERVERLESS_PACKAGE = _prop(
    "bulk.import.emr.serverless.package", None,
    "Where 'sleeper bulk-import --package' put the job's entry point, library and configuration "
    "(s3://bucket/prefix).", S3_PREFIX)
SPARK_DEFERRABLE = _prop(
    "spark.deferrable", "false",
    "The generated DAGs' bulk import and Spark compaction tasks submit to the standing Spark service "
    "and wait in Airflow's triggerer, not in a worker slot (true or false).", BOOL)
SPARK_DURABLE = _prop(
    "spark.durable", "true",
    "The generated DAGs' blocking bulk import and Spark compaction tasks on the standing Spark service keep "
    "their job's id in Airflow's task state store, so a retry after a dead worker waits for that job instead "
    "of submitting it again (true or false; false: every try submits its own).", BOOL)
DATED_RETRY_DELAY_SECONDS = _prop(
    "dated.retry.delay.seconds", "120",
    "The generated dated DAGs' (bulk import, export) wait before a failed try of a date runs again, in "
    "seconds (each date is tried 3 times).", POSITIVE_INT)
INGEST_BATCHER_JOB_MIN_SIZE = _prop("ingest.batcher.job.min.size", "1G", "Smallest ingest batcher job (bytes).", SIZE)
INGEST_BATCHER_JOB_MAX_SIZE = _prop("ingest.batcher.job.max.size", "5G", "Largest ingest batcher job (bytes).", SIZE)
INGEST_BATCHER_BULK_IMPORT_MIN_SIZE = _prop(
    "ingest.batcher.bulk.import.min.size", "2G",
    "Batcher jobs at least this big (bytes) run as a bulk import on Spark, not standard ingest.", SIZE)
INGEST_BATCHER_JOB_MAX_FILES = _prop("ingest.batcher.job.max.files", "100", "Most files in one ingest batcher job.",
                                     POSITIVE_INT)
INGEST_BATCHER_JOB_MAX_AGE_SECONDS = _prop("ingest.batcher.job.max.age.seconds", "300",
                                           "Send a job below the minimum size once its oldest request is this old.",
                                           POSITIVE_INT)
INGEST_EVENTS_QUEUE = _prop(
    "ingest.events.queue", None,
    "An SQS queue fed by S3 event notifications (ObjectCreated): each file it announces is queued for the "
    "table's ingest batcher once, keyed by its message's id, and the table's ingest DAG runs on every batch "
    "of messages. Unset: no event-driven ingest.", SQS_QUEUE_URL)
INGEST_EVENTS_VISIBILITY_SECONDS = _prop(
    "ingest.events.visibility.seconds", "60",
    "How long the ingest DAG's land_events task keeps the queue messages it works on hidden at a time (it "
    "renews this every half of it until each is landed): the delay before the messages of a run whose every "
    "try was lost are delivered again and landed by another run (a try lost with its worker is retried on the "
    "same messages at once). A message delivered again is a repeat (nothing twice).",
    at_least(10, "the task renews the hold every half of it; much shorter, a slow store call between two "
                 "renewals lets messages of a live run be delivered again"))
INGEST_EVENTS_DEAD_LETTER_PREFIX = _prop(
    "ingest.events.dead.letter.prefix", None,
    "Where event-driven ingest copies a file that fails validation (not readable as its type, or not of the "
    "table's schema), with a .reason.json object beside it; events for keys under it are ignored. Unset: "
    "s3://<the file's bucket>/dead-letter/.", S3_PREFIX)
WRITE_BUFFER_MAX_RECORDS = _prop(
    "write.buffer.max.records", "10000000",
    "Writes are refused (buffer full, flush pending) while the write buffer holds this many records.", POSITIVE_INT)
WRITE_BUFFER_FLUSH_RECORDS = _prop(
    "write.buffer.flush.records", "1000000",
    "Flush the write buffer once it holds this many records; also the most records one flush "
    "round reads into memory.", POSITIVE_INT)
WRITE_BUFFER_FLUSH_AGE_SECONDS = _prop("write.buffer.flush.age.seconds", "60",
                                       "Flush the write buffer once its oldest record has waited this long.",
                                       POSITIVE_INT)
WRITE_IDEMPOTENCY_HOURS = _prop(
    "write.idempotency.hours", "24",
    "A write or ingest request sent again with the same idempotency key within this long returns "
    "the first answer and stores nothing (garbage collection forgets older keys).",
    between(1, 720, "a client resending after a timeout must still find its first write, and the "
                    "state store keeps every key for this long"))
HISTORY_RETENTION_MINUTES = _prop(
    "history.retention.minutes", "30",
    "How far back the table can be read as of an earlier transaction (sleeper history, --as-of): "
    "garbage collection keeps every file a state within it references, so files replaced by "
    "compaction (and deleted records in them) stay this long, plus the GC delay.", NON_NEGATIVE_INT)
DELETE_PURGE_HOURS = _prop(
    "delete.purge.hours", "24",
    "A deleted record stays in a data file at most about this long: compaction job creation makes "
    "jobs for files holding records deleted longer ago, even when the strategy would not.", NON_NEGATIVE_INT)
AGEOFF_REWRITE_FRACTION = _prop(
    "ageoff.rewrite.fraction", "0.5",
    "With the age-off iterator set, compaction job creation makes a job of a file once more than "
    "this fraction of its records have expired (garbage collection drops files wholly expired "
    "without a rewrite).", FRACTION)


#: each operation's schedule property; the keys are the operations that have DAGs
SCHEDULES: dict[str, Prop] = {}


def _schedule(operation: str, default: str) -> Prop:
    SCHEDULES[operation] = _prop(f"schedule.{operation}", default,
                                 f"Airflow schedule of the {operation} DAG (cron or preset, 'none' for manual only).",
                                 SCHEDULE)
    return SCHEDULES[operation]


SCHEDULE_SPLIT = _schedule("split", "*/10 * * * *")
SCHEDULE_COMPACTION = _schedule("compaction", "*/5 * * * *")
SCHEDULE_GC = _schedule("gc", "*/15 * * * *")
SCHEDULE_INGEST_BATCHER = _schedule("ingest_batcher", "* * * * *")
SCHEDULE_FLUSH = _schedule("flush", "* * * * *")
SCHEDULE_BULK_IMPORT = _schedule("bulk_import", "@daily")
SCHEDULE_EXPORT = _schedule("export", "@daily")
OPERATIONS = tuple(SCHEDULES)
EMR_PROPERTIES = (BULK_IMPORT_EMR_SERVERLESS_APPLICATION_ID, BULK_IMPORT_EMR_SERVERLESS_EXECUTION_ROLE_ARN,
                  BULK_IMPORT_EMR_SERVERLESS_PACKAGE)

#: every property by name, in the order ``sleeper table describe`` lists them
PROPERTY_DEFS: dict[str, Prop] = {p.name: p for p in _DEFS}
PropertyDef = Prop
