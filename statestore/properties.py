"""Table properties: names, defaults and checks.

Properties are strings on the wire (``--property K=V``) and stored as given after
validation. Unknown names and values of the wrong type are refused with a
:class:`PropertyError` naming the property (and the nearest known names). Names follow
Sleeper's where Sleeper has the property.

In an update, an empty value clears the property (it takes its default again); see
:func:`apply_update`, which every backend uses to merge an update into a table's set.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

from statestore.errors import PropertyError

_SIZE_RE = re.compile(r"^([0-9]+)([KMGT]?)$", re.IGNORECASE)
_SIZE_MULT = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
OPERATIONS = ("split", "compaction", "gc", "ingest_batcher", "flush", "bulk_import", "export")
CRON_PRESETS = ("@once", "@continuous", "@hourly", "@daily", "@weekly", "@monthly", "@yearly", "none")


def parse_size(value: str) -> int:
    """Parse ``1G``, ``512M``, ``1024`` into bytes."""
    m = _SIZE_RE.match(value.strip())
    if not m:
        raise ValueError(f"not a size: {value!r}")
    return int(m.group(1)) * _SIZE_MULT[m.group(2).upper()]


def _digits(v: str) -> bool:
    """ASCII digits only: ``str.isdigit`` also accepts e.g. ``²``, which ``int`` refuses."""
    return v.isascii() and v.isdigit()


def _bool(v: str) -> None:
    if v.lower() not in ("true", "false"):
        raise ValueError("expected true or false")


def _positive_int(v: str) -> None:
    if not _digits(v) or int(v) <= 0:
        raise ValueError("expected a positive integer")


def _non_negative_int(v: str) -> None:
    if not _digits(v):
        raise ValueError("expected a non-negative integer")


def _at_least(floor: int, why: str) -> Callable[[str], None]:
    """An integer of at least ``floor``; ``why`` says what a smaller value would break."""
    def check(v: str) -> None:
        if not _digits(v):
            raise ValueError("expected a non-negative integer")
        if int(v) < floor:
            raise ValueError(f"must be at least {floor}: {why}")
    return check


def _between(low: int, high: int, why: str) -> Callable[[str], None]:
    """An integer from ``low`` to ``high``; ``why`` says what a value outside would break."""
    def check(v: str) -> None:
        if not _digits(v):
            raise ValueError("expected a non-negative integer")
        if not low <= int(v) <= high:
            raise ValueError(f"must be from {low} to {high}: {why}")
    return check


def _non_empty(v: str) -> None:
    if not v.strip():
        raise ValueError("expected a non-empty value")


def _choice(*options: str) -> Callable[[str], None]:
    def check(v: str) -> None:
        if v not in options:
            raise ValueError(f"expected one of {', '.join(options)}")
    return check


def _fraction(v: str) -> None:
    try:
        f = float(v)
    except ValueError:
        raise ValueError("expected a number from 0 to 1") from None
    if not 0 <= f <= 1:
        raise ValueError("expected a number from 0 to 1")


def _size(v: str) -> None:
    parse_size(v)


def _ageoff(v: str) -> None:
    field_name, sep, age = v.partition(":")
    if not field_name or not sep or not _digits(age):
        raise ValueError("expected FIELD:MAX_AGE_MS")


_AGG_RE = re.compile(r"^(sum|min|max)\(([^()]+)\)$")


def _aggregation(v: str) -> None:
    for part in v.split(","):
        if not _AGG_RE.match(part.strip()):
            raise ValueError("expected a list like sum(f1),max(f2)")


_CALLABLE_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def _callable_path(v: str) -> None:
    if not _CALLABLE_RE.match(v):
        raise ValueError("expected module.path:function")


_ROLE_ARN_RE = re.compile(r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/[\w+=,.@/-]+$")


def _role_arn(v: str) -> None:
    if not _ROLE_ARN_RE.match(v):
        raise ValueError("expected an IAM role ARN, arn:aws:iam::ACCOUNT:role/NAME")


def _s3_prefix(v: str) -> None:
    if not v.startswith("s3://") or len(v.rstrip("/")) <= len("s3://"):
        raise ValueError("expected an s3://bucket/prefix URI")


def _iso_time(v: str) -> None:
    from datetime import datetime

    try:
        datetime.fromisoformat(v)
    except ValueError:
        raise ValueError("expected an ISO 8601 date or time, e.g. 2026-03-01 or 2026-03-01T06:00") from None


def _positive_hours(v: str) -> None:
    try:
        hours = float(v)
    except ValueError:
        raise ValueError("expected a number of hours, e.g. 6 or 0.5") from None
    if not hours > 0 or hours == float("inf"):
        raise ValueError("must be a positive number of hours")


def _schedule(v: str) -> None:
    if v in CRON_PRESETS:
        return
    if len(v.split()) != 5:
        raise ValueError(f"expected a 5-field cron expression or one of {', '.join(CRON_PRESETS)}")


BULK_IMPORT_PLATFORMS = ("spark", "emr_serverless")
BULK_IMPORT_PLATFORM = "sleeper.table.bulk.import.platform"
#: the EMR Serverless settings of a table whose bulk import platform is ``emr_serverless``
#: (named after Sleeper's ``sleeper.bulk.import.emr.serverless.*`` instance properties)
EMR_APPLICATION_ID = "sleeper.table.bulk.import.emr.serverless.application.id"
EMR_EXECUTION_ROLE = "sleeper.table.bulk.import.emr.serverless.execution.role.arn"
EMR_PACKAGE = "sleeper.table.bulk.import.emr.serverless.package"


@dataclass(frozen=True)
class PropertyDef:
    name: str
    default: Optional[str]
    description: str
    check: Callable[[str], None]


_DEFS = [
    PropertyDef("sleeper.table.online", "true", "Only online tables are split, compacted, GC'd, DAG-flushed.", _bool),
    PropertyDef("sleeper.table.partition.splitting.threshold", "1000000000",
                "Split a leaf partition once it holds more records than this.", _positive_int),
    PropertyDef("sleeper.table.compaction.strategy", "sizeratio", "Compaction strategy: sizeratio or basic.",
                _choice("sizeratio", "basic")),
    PropertyDef("sleeper.table.compaction.files.batch.size", "12", "Most files one compaction job merges.",
                _positive_int),
    PropertyDef("sleeper.table.compaction.strategy.sizeratio.ratio", "3", "Size ratio of the size-ratio strategy.",
                _positive_int),
    PropertyDef("sleeper.table.compaction.runner", "local", "Where compaction jobs run: local or spark.",
                _choice("local", "spark")),
    PropertyDef("sleeper.table.gc.delay.minutes", "15", "Delete unreferenced files once unchanged this long.",
                _at_least(1, "queries planned against a file replaced by compaction read it for up to this "
                             "long, so 0 would delete files under running queries")),
    PropertyDef("sleeper.table.compaction.job.retry.minutes", "30",
                "Re-run a compaction job whose inputs stay assigned to it with no progress for this long.",
                _at_least(1, "0 would start a second attempt of every job still running")),
    PropertyDef("sleeper.table.gc.orphan.grace.minutes", "60",
                "Delete objects under the table's prefix that the state store never knew once this old "
                "(and no job still running names them).",
                _at_least(10, "a write in flight is older than its job's last update by the time it takes to "
                              "write, and a clock skew between hosts counts against the grace too")),
    PropertyDef("sleeper.table.gc.job.abandon.minutes", "1440",
                "A job not yet committed or failed protects the outputs it names from the orphan sweep until "
                "it shows no progress for this long (it is then taken as dead).",
                _at_least(10, "the longest job must finish within it, or its output may be swept")),
    PropertyDef("sleeper.table.gc.batch.size", "1000", "Files deleted per garbage collection commit.", _positive_int),
    PropertyDef("sleeper.table.parquet.rowgroup.rows.max", "2048",
                "Most rows in one Parquet row group (small: a point read decodes one; docs/adr/0002).",
                _positive_int),
    PropertyDef("sleeper.table.parquet.page.size", "131072", "Target Parquet data page size in bytes.", _positive_int),
    PropertyDef("sleeper.table.parquet.compression.codec", "zstd", "Parquet compression codec.",
                _choice("zstd", "snappy", "gzip", "lz4", "none")),
    PropertyDef("sleeper.table.created.by", None,
                "What created the table (free text); 'sleeper demo' replaces only a table it created itself.",
                _non_empty),
    PropertyDef("sleeper.table.iterator.ageoff", None, "Age-off iterator: FIELD:MAX_AGE_MS.", _ageoff),
    PropertyDef("sleeper.table.iterator.aggregation", None, "Aggregation iterator: sum(f1),max(f2),...", _aggregation),
    PropertyDef("sleeper.table.iterator.python", None,
                "User iterator: module.path:function taking and returning an Arrow record batch.", _callable_path),
    PropertyDef("sleeper.table.bulk.import.source", None,
                "Where the table's dated bulk import DAG reads: a template on the run's data interval, e.g. "
                "s3://raw/events/{{ data_interval_start | ds }}/ (several separated by commas).", _non_empty),
    PropertyDef("sleeper.table.export.destination", None,
                "Where the table's dated export DAG writes: a directory or s3:// prefix, a template on the run's "
                "data interval, e.g. s3://exports/events/{{ data_interval_start | ds }}/ (one export a date).",
                _non_empty),
    PropertyDef("sleeper.table.bulk.import.start", None,
                "The dated bulk import DAG's scheduled runs start with the first interval starting at or after "
                "this UTC date or time (ISO 8601, e.g. 2026-03-01) and run every interval after it; set to the "
                "time of setting the source when not given. Manual runs and backfills may run any date.", _iso_time),
    PropertyDef("sleeper.table.bulk.import.wait.hours", "6",
                "A dated bulk import run whose source has no input files yet waits for them this many hours "
                "(in Airflow's triggerer, holding no worker slot), then fails saying what it found missing.",
                _positive_hours),
    PropertyDef("sleeper.table.bulk.import.min.leaf.partitions", "64",
                "A bulk import into an empty table with fewer leaf partitions splits it first (into a table "
                "with data: in proportion to the import's share), at medians of the table and the input, "
                "as far as sleeper.table.bulk.import.min.rows.per.leaf allows.", _positive_int),
    PropertyDef("sleeper.table.bulk.import.min.rows.per.leaf", "1000000",
                "A bulk import's pre-split leaves the table no more leaves than its records after the import "
                "divided by this (at least one): no leaf made for fewer rows.", _positive_int),
    PropertyDef("sleeper.table.bulk.import.platform", "spark",
                "Where the dated bulk import DAG runs Spark: spark (the configuration's Spark master or "
                "service) or emr_serverless (an EMR Serverless job; needs the three emr.serverless properties).",
                _choice(*BULK_IMPORT_PLATFORMS)),
    PropertyDef(EMR_APPLICATION_ID, None, "The EMR Serverless application (Spark) that runs bulk imports.",
                _non_empty),
    PropertyDef(EMR_EXECUTION_ROLE, None,
                "The IAM role an EMR Serverless bulk import job runs as (reads the sources and the package, "
                "writes the table's files and its state store).", _role_arn),
    PropertyDef(EMR_PACKAGE, None,
                "Where 'sleeper bulk-import --package' put the job's entry point, library and configuration "
                "(s3://bucket/prefix).", _s3_prefix),
    PropertyDef("sleeper.table.spark.deferrable", "false",
                "The generated DAGs' bulk import and Spark compaction tasks submit to the standing Spark service "
                "and wait in Airflow's triggerer, not in a worker slot (true or false).", _bool),
    PropertyDef("sleeper.table.ingest.batcher.job.min.size", "1G", "Smallest ingest batcher job (bytes).", _size),
    PropertyDef("sleeper.table.ingest.batcher.job.max.size", "5G", "Largest ingest batcher job (bytes).", _size),
    PropertyDef("sleeper.table.ingest.batcher.bulk.import.min.size", "2G",
                "Batcher jobs at least this big (bytes) run as a bulk import on Spark, not standard ingest.", _size),
    PropertyDef("sleeper.table.ingest.batcher.job.max.files", "100", "Most files in one ingest batcher job.",
                _positive_int),
    PropertyDef("sleeper.table.ingest.batcher.job.max.age.seconds", "300",
                "Send a job below the minimum size once its oldest request is this old.", _positive_int),
    PropertyDef("sleeper.table.write.buffer.max.records", "10000000",
                "Writes are refused (buffer full, flush pending) while the write buffer holds this many records.",
                _positive_int),
    PropertyDef("sleeper.table.write.buffer.flush.records", "1000000",
                "Flush the write buffer once it holds this many records; also the most records one flush "
                "round reads into memory.", _positive_int),
    PropertyDef("sleeper.table.write.buffer.flush.age.seconds", "60",
                "Flush the write buffer once its oldest record has waited this long.", _positive_int),
    PropertyDef("sleeper.table.write.idempotency.hours", "24",
                "A write or ingest request sent again with the same idempotency key within this long returns "
                "the first answer and stores nothing (garbage collection forgets older keys).",
                _between(1, 720, "a client resending after a timeout must still find its first write, and the "
                                 "state store keeps every key for this long")),
    PropertyDef("sleeper.table.history.retention.minutes", "30",
                "How far back the table can be read as of an earlier transaction (sleeper history, --as-of): "
                "garbage collection keeps every file a state within it references, so files replaced by "
                "compaction (and deleted records in them) stay this long, plus the GC delay.",
                _non_negative_int),
    PropertyDef("sleeper.table.delete.purge.hours", "24",
                "A deleted record stays in a data file at most about this long: compaction job creation makes "
                "jobs for files holding records deleted longer ago, even when the strategy would not.",
                _non_negative_int),
    PropertyDef("sleeper.table.ageoff.rewrite.fraction", "0.5",
                "With the age-off iterator set, compaction job creation makes a job of a file once more than "
                "this fraction of its records have expired (garbage collection drops files wholly expired "
                "without a rewrite).", _fraction),
]
EMR_PROPERTIES = (EMR_APPLICATION_ID, EMR_EXECUTION_ROLE, EMR_PACKAGE)
_DEFAULT_SCHEDULES = {"split": "*/10 * * * *", "compaction": "*/5 * * * *", "gc": "*/15 * * * *",
                      "ingest_batcher": "* * * * *", "flush": "* * * * *", "bulk_import": "@daily",
                      "export": "@daily"}
for _op in OPERATIONS:
    _DEFS.append(PropertyDef(f"sleeper.table.schedule.{_op}", _DEFAULT_SCHEDULES[_op],
                             f"Airflow schedule of the {_op} DAG (cron or preset, 'none' for manual only).", _schedule))

PROPERTY_DEFS: dict[str, PropertyDef] = {d.name: d for d in _DEFS}


GRACE = "sleeper.table.gc.orphan.grace.minutes"
RETRY = "sleeper.table.compaction.job.retry.minutes"
ABANDON = "sleeper.table.gc.job.abandon.minutes"


def check_combination(props: Mapping[str, str]) -> None:
    """Refuse (PropertyError) a table's whole set of properties (unset ones at their
    defaults) whose values are unsafe together:

    * the orphan grace must exceed the compaction job retry time: a job retried after
      that long may still be writing the output of its first attempt, which the job's
      record no longer names once the retry has named its own;
    * the job abandon time must be at least the orphan grace;
    * bulk import on ``emr_serverless`` needs the EMR application, execution role and
      package properties (the DAG could not build its job request otherwise).
    """
    eff = effective_properties(props)
    grace, retry, abandon = (int(eff[n] or 0) for n in (GRACE, RETRY, ABANDON))
    if grace <= retry:
        raise PropertyError(f"{GRACE}={grace} must be longer than {RETRY}={retry}: an attempt superseded by a "
                            "retry may still be writing an output that no job names any more")
    if abandon < grace:
        raise PropertyError(f"{ABANDON}={abandon} must be at least {GRACE}={grace}")
    if eff[BULK_IMPORT_PLATFORM] == "emr_serverless":
        missing = [n for n in EMR_PROPERTIES if not eff[n]]
        if missing:
            raise PropertyError(f"{BULK_IMPORT_PLATFORM}=emr_serverless needs {' and '.join(missing)}")


def check_backend_limits(props: Mapping[str, str], limits: Mapping[str, tuple[int, str]], backend: str) -> None:
    """Refuse (PropertyError) a value a state store backend cannot honour: ``limits``
    maps a numeric property to the most the backend takes and why (e.g. DynamoDB's
    100 items per transaction). Checked when a property is set, so a limit is never hit
    at run time."""
    for name, (most, why) in limits.items():
        value = props.get(name)
        if value is not None and _digits(value) and int(value) > most:
            raise PropertyError(f"property {name}={value} is more than the {backend} state store can honour "
                                f"(at most {most}): {why}")


def validate_properties(props: Mapping[str, str]) -> dict[str, str]:
    """Return ``props`` as a plain dict after checking every name and value, and the
    values together (with defaults for the rest, as for a new table). Empty values are
    dropped: the property keeps its default."""
    out = {k: v for k, v in validate_values(props).items() if v != ""}
    check_combination(out)
    return out


def validate_values(props: Mapping[str, str]) -> dict[str, str]:
    """Return ``props`` as a plain dict after checking every name and value, one by one
    (an update then checks the table's merged set with :func:`check_combination`).
    An empty value is kept as ``""``: in an update it clears the property."""
    out: dict[str, str] = {}
    for name, value in props.items():
        d = PROPERTY_DEFS.get(name)
        if d is None:
            raise PropertyError(f"unknown table property {name!r}{did_you_mean(name)}")
        if not isinstance(value, str):
            value = str(value).lower() if isinstance(value, bool) else str(value)
        if value.strip() == "":
            out[name] = ""
            continue
        try:
            d.check(value)
        except ValueError as e:
            raise PropertyError(f"property {name}={value!r}: {e}") from e
        out[name] = value
    return out


def did_you_mean(name: str) -> str:
    """``"; did you mean X?"`` naming the defined properties nearest to ``name`` (a short
    name such as ``gc.delay.minutes`` finds ``sleeper.table.gc.delay.minutes``), or ``""``."""
    full = f"sleeper.table.{name}"
    if full in PROPERTY_DEFS:
        return f"; did you mean {full}?"
    names = list(PROPERTY_DEFS)
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    if not close and not name.startswith("sleeper.table."):
        close = difflib.get_close_matches(full, names, n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(close)}?" if close else ""


def split_update(update: Mapping[str, str]) -> tuple[dict[str, str], tuple[str, ...]]:
    """A checked update (from :func:`validate_values`) as (properties to set, names to clear)."""
    return ({k: v for k, v in update.items() if v != ""}, tuple(k for k, v in update.items() if v == ""))


def apply_update(current: Mapping[str, str], update: Mapping[str, str]) -> dict[str, str]:
    """``current`` with a checked ``update`` applied: non-empty values set, empty ones cleared."""
    to_set, to_clear = split_update(update)
    merged = {**current, **to_set}
    for name in to_clear:
        merged.pop(name, None)
    return merged


def effective_properties(props: Mapping[str, str]) -> dict[str, Optional[str]]:
    """Every defined property with its value: the set one if any, else the default."""
    return {name: props.get(name, d.default) for name, d in PROPERTY_DEFS.items()}
