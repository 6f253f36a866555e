"""DynamoDB's size limits, counted on every attribute an item stores (DESIGN.md section
12), and DynamoDB's rejection of a request's items, as a definite refusal.

* :func:`item_size` is an item's size as DynamoDB counts it (attribute names and values;
  a number counted at its longest), so a commit checks its log item before sending it
  (:func:`check_log_item`): an item over :data:`ITEM_LIMIT` is refused once with
  :class:`~statestore.errors.TransactionTooLargeError` naming the table and the size,
  never a ``ValidationException`` at run time. A log item's parts are bounded: its body
  inline up to :data:`statestore.dynamodb.log.INLINE_LIMIT` (else in the blob store) and
  its summary up to :data:`statestore.dynamodb.history.SUMMARY_LIMIT`.
* :func:`rejection` turns DynamoDB's rejection of a request's items (a
  ``ValidationException`` to the first and only try, or a transaction cancelled with a
  ``ValidationError`` reason) into a :class:`~statestore.errors.TransactionError`:
  nothing of the request applied, and sending it again would be rejected again. Group
  commit uses it to refuse that one request alone (:mod:`statestore.dynamodb.group_commit`).
"""

from __future__ import annotations

from typing import Any, Optional

import botocore.exceptions

from statestore.dynamodb.connection import cancellation_codes, error_code
from statestore.errors import StateStoreUnavailableError, TransactionError, TransactionTooLargeError

#: DynamoDB's limit on one item, attribute names and values counted
ITEM_LIMIT = 400 * 1024


def value_size(v: dict[str, Any]) -> int:
    """The bytes DynamoDB counts for one attribute value (numbers at their longest)."""
    (kind, x), = v.items()
    if kind == "S":
        return len(str(x).encode())
    if kind == "B":
        return len(x)
    if kind == "N":
        return min(21, len(str(x)) + 1)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + value_size(e) + 1 for k, e in x.items())
    if kind == "L":
        return 3 + sum(value_size(e) + 1 for e in x)
    if kind == "SS":
        return sum(len(e.encode()) for e in x)
    if kind == "BS":
        return sum(len(e) for e in x)
    if kind == "NS":
        return sum(min(21, len(e) + 1) for e in x)
    raise ValueError(f"unknown DynamoDB attribute type {kind!r}")


def item_size(item: dict[str, Any]) -> int:
    """The size DynamoDB counts for ``item``: every attribute's name and value."""
    return sum(len(k.encode()) + value_size(v) for k, v in item.items())


def too_large(table_id: str, kind: str, item: dict[str, Any]) -> Optional[TransactionTooLargeError]:
    """The refusal of a ``kind`` transaction to the table whose log item ``item`` is
    over DynamoDB's item limit (None: it fits)."""
    size = item_size(item)
    if size <= ITEM_LIMIT:
        return None
    return TransactionTooLargeError(
        f"commit {kind} to table {table_id}: its log item would take {size:,} bytes, over DynamoDB's "
        f"{ITEM_LIMIT:,}-byte item limit (body {value_size(item['body']) if 'body' in item else 0:,}, summary "
        f"{value_size(item['summary']) if 'summary' in item else 0:,}); nothing was written")


def check_log_item(table_id: str, kind: str, item: dict[str, Any]) -> None:
    """Raise :class:`TransactionTooLargeError` when the log item of a ``kind``
    transaction to the table is over DynamoDB's item limit."""
    refused = too_large(table_id, kind, item)
    if refused is not None:
        raise refused


def rejection(e: BaseException, what: str) -> Optional[TransactionError]:
    """The definite refusal of ``what`` (naming its table) when ``e`` is DynamoDB
    rejecting its items -- a ``ValidationException`` to the first and only try, or a
    cancellation with a ``ValidationError`` reason -- else None."""
    cause = e.__cause__ if isinstance(e, StateStoreUnavailableError) else e
    if not isinstance(cause, botocore.exceptions.ClientError):
        return None
    retried = int(cause.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) or 0) > 0
    if error_code(cause) == "ValidationException" and not retried:
        message = cause.response.get("Error", {}).get("Message", "")
        return TransactionError(f"{what}: DynamoDB rejected its items, so nothing was written "
                                f"(ValidationException: {message})")
    if "ValidationError" in cancellation_codes(cause):
        return TransactionError(f"{what}: DynamoDB rejected its items, so nothing was written "
                                "(a transaction cancelled for a ValidationError)")
    return None
