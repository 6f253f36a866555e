"""The kinds of value a table property takes: each a :class:`Kind`, a check that refuses
other values with a ``ValueError`` saying what was expected, and those values in words
(the properties table of ``docs/usage/tables-and-properties.md`` shows them)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

_SIZE_RE = re.compile(r"^([0-9]+)([KMGT]?)$", re.IGNORECASE)
_SIZE_MULT = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
CRON_PRESETS = ("@once", "@continuous", "@hourly", "@daily", "@weekly", "@monthly", "@yearly", "none")


def parse_size(value: str) -> int:
    """Parse ``1G``, ``512M``, ``1024`` into bytes."""
    m = _SIZE_RE.match(value.strip())
    if not m:
        raise ValueError(f"not a size: {value!r}")
    return int(m.group(1)) * _SIZE_MULT[m.group(2).upper()]


def digits(v: str) -> bool:
    """ASCII digits only: ``str.isdigit`` also accepts e.g. ``²``, which ``int`` refuses."""
    return v.isascii() and v.isdigit()


@dataclass(frozen=True)
class Kind:
    """A kind of property value: calling it checks a value (``ValueError`` if not of the
    kind); ``values`` says which values it takes, for people."""

    values: str
    check: Callable[[str], None]

    def __call__(self, value: str) -> None:
        self.check(value)


def _bool(v: str) -> None:
    if v.lower() not in ("true", "false"):
        raise ValueError("expected true or false")


def _positive_int(v: str) -> None:
    if not digits(v) or int(v) <= 0:
        raise ValueError("expected a positive integer")


def _non_negative_int(v: str) -> None:
    if not digits(v):
        raise ValueError("expected a non-negative integer")


def at_least(floor: int, why: str) -> Kind:
    """An integer of at least ``floor``; ``why`` says what a smaller value would break."""
    def check(v: str) -> None:
        if not digits(v):
            raise ValueError("expected a non-negative integer")
        if int(v) < floor:
            raise ValueError(f"must be at least {floor}: {why}")
    return Kind(f"an integer of at least {floor}", check)


def between(low: int, high: int, why: str) -> Kind:
    """An integer from ``low`` to ``high``; ``why`` says what a value outside would break."""
    def check(v: str) -> None:
        if not digits(v):
            raise ValueError("expected a non-negative integer")
        if not low <= int(v) <= high:
            raise ValueError(f"must be from {low} to {high}: {why}")
    return Kind(f"an integer from {low} to {high}", check)


def _non_empty(v: str) -> None:
    if not v.strip():
        raise ValueError("expected a non-empty value")


def choice(*options: str) -> Kind:
    """One of ``options``, exactly."""
    def check(v: str) -> None:
        if v not in options:
            raise ValueError(f"expected one of {', '.join(options)}")
    return Kind(f"one of {', '.join(options)}", check)


def number_from(low: float, high: float, text: str) -> Kind:
    """A number (not only an integer) from ``low`` to ``high``, described as ``text``."""
    def check(v: str) -> None:
        try:
            f = float(v)
        except ValueError:
            raise ValueError(f"expected {text}") from None
        if not low <= f <= high:
            raise ValueError(f"expected {text}")
    return Kind(text, check)


def _size(v: str) -> None:
    parse_size(v)


def _ageoff(v: str) -> None:
    field_name, sep, age = v.partition(":")
    if not field_name or not sep or not digits(age):
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


_SQS_QUEUE_RE = re.compile(r"^https?://[^/\s]+/[0-9]{12}/[A-Za-z0-9_-]{1,80}(\.fifo)?$")


def _sqs_queue_url(v: str) -> None:
    if not _SQS_QUEUE_RE.match(v):
        raise ValueError("expected an SQS queue URL, https://sqs.REGION.amazonaws.com/ACCOUNT/NAME")


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


BOOL = Kind("true or false", _bool)
POSITIVE_INT = Kind("a positive integer", _positive_int)
NON_NEGATIVE_INT = Kind("a non-negative integer", _non_negative_int)
NON_EMPTY = Kind("non-empty text", _non_empty)
FRACTION = number_from(0, 1, "a number from 0 to 1")
BLOOM_FPP = number_from(0, 0.5, "a number from 0 (no filter) to 0.5")
SIZE = Kind("a size in bytes: digits with an optional K, M, G or T (e.g. 512M)", _size)
AGEOFF = Kind("FIELD:MAX_AGE_MS", _ageoff)
AGGREGATION = Kind("a list like sum(f1),max(f2) (sum, min or max of each value field)", _aggregation)
CALLABLE_PATH = Kind("module.path:function", _callable_path)
ROLE_ARN = Kind("an IAM role ARN, arn:aws:iam::ACCOUNT:role/NAME", _role_arn)
S3_PREFIX = Kind("an s3://bucket/prefix URI", _s3_prefix)
SQS_QUEUE_URL = Kind("an SQS queue URL, https://sqs.REGION.amazonaws.com/ACCOUNT/NAME (any host and port, e.g. "
                     "a moto server's)", _sqs_queue_url)
ISO_TIME = Kind("an ISO 8601 date or time, e.g. 2026-03-01 or 2026-03-01T06:00", _iso_time)
POSITIVE_HOURS = Kind("a positive number of hours, e.g. 6 or 0.5", _positive_hours)
SCHEDULE = Kind(f"a 5-field cron expression or one of {', '.join(CRON_PRESETS)}", _schedule)
