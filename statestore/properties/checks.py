"""Checks of a table's properties together, and the merge of an update into a table's set.

Properties are strings on the wire (``--property K=V``) and stored as given after
validation. Unknown names and values of the wrong type are refused with a
:class:`PropertyError` naming the property (and the nearest known names); values unsafe
together with :func:`check_combination`.

In an update, an empty value clears the property (it takes its default again); see
:func:`apply_update`, which every backend uses to merge an update into a table's set.
"""

from __future__ import annotations

import difflib
from typing import Mapping, Optional

from statestore.errors import PropertyError
from statestore.properties.definitions import (
    BULK_IMPORT_PLATFORM,
    COMPACTION_JOB_RETRY_MINUTES,
    EMR_PROPERTIES,
    GC_JOB_ABANDON_MINUTES,
    GC_ORPHAN_GRACE_MINUTES,
    INGEST_EVENTS_DEAD_LETTER_PREFIX,
    INGEST_EVENTS_QUEUE,
    INGEST_EVENTS_VISIBILITY_SECONDS,
    PREFIX,
    PROPERTY_DEFS,
)
from statestore.properties.validators import digits


def check_combination(props: Mapping[str, str]) -> None:
    """Refuse (PropertyError) a table's whole set of properties (unset ones at their
    defaults) whose values are unsafe together:

    * the orphan grace must exceed the compaction job retry time: a job retried after
      that long may still be writing the output of its first attempt, which the job's
      record no longer names once the retry has named its own;
    * the job abandon time must be at least the orphan grace;
    * bulk import on ``emr_serverless`` needs the EMR application, execution role and
      package properties (the DAG could not build its job request otherwise);
    * an event-driven ingest dead-letter prefix or visibility timeout, when set, needs the
      events queue (nothing would read it otherwise).
    """
    eff = effective_properties(props)
    grace, retry, abandon = (int(eff[n] or 0) for n in (GC_ORPHAN_GRACE_MINUTES, COMPACTION_JOB_RETRY_MINUTES,
                                                         GC_JOB_ABANDON_MINUTES))
    if grace <= retry:
        raise PropertyError(f"{GC_ORPHAN_GRACE_MINUTES}={grace} must be longer than "
                            f"{COMPACTION_JOB_RETRY_MINUTES}={retry}: an attempt superseded by a "
                            "retry may still be writing an output that no job names any more")
    if abandon < grace:
        raise PropertyError(f"{GC_JOB_ABANDON_MINUTES}={abandon} must be at least {GC_ORPHAN_GRACE_MINUTES}={grace}")
    if eff[BULK_IMPORT_PLATFORM] == "emr_serverless":
        missing = [n for n in EMR_PROPERTIES if not eff[n]]
        if missing:
            raise PropertyError(f"{BULK_IMPORT_PLATFORM}=emr_serverless needs {' and '.join(missing)}")
    if eff[INGEST_EVENTS_DEAD_LETTER_PREFIX] and not eff[INGEST_EVENTS_QUEUE]:
        raise PropertyError(f"{INGEST_EVENTS_DEAD_LETTER_PREFIX} is set but {INGEST_EVENTS_QUEUE} is not: "
                            "no event-driven ingest would use it")
    if props.get(INGEST_EVENTS_VISIBILITY_SECONDS) and not eff[INGEST_EVENTS_QUEUE]:
        raise PropertyError(f"{INGEST_EVENTS_VISIBILITY_SECONDS} is set but {INGEST_EVENTS_QUEUE} is not: "
                            "no event-driven ingest would use it")


def check_backend_limits(props: Mapping[str, str], limits: Mapping[str, tuple[int, str]], backend: str) -> None:
    """Refuse (PropertyError) a value a state store backend cannot honour: ``limits``
    maps a numeric property to the most the backend takes and why (e.g. DynamoDB's
    100 items per transaction). Checked when a property is set, so a limit is never hit
    at run time."""
    for name, (most, why) in limits.items():
        value = props.get(name)
        if value is not None and digits(value) and int(value) > most:
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
    full = f"{PREFIX}{name}"
    if full in PROPERTY_DEFS:
        return f"; did you mean {full}?"
    names = list(PROPERTY_DEFS)
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    if not close and not name.startswith(PREFIX):
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
