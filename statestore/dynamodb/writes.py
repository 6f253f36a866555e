"""The one rule for every remote write of the DynamoDB backend (DESIGN.md section 10):
a write whose reply was lost is either found applied or retried safely, and nothing
is deleted unless the store answered a definite no.

Why a rule is needed: botocore retries a request whose reply was lost (a dropped
connection, a timeout, a 5xx), and the retry of a conditional write fails its
condition *because the first try applied*. DynamoDB's ``TransactWriteItems`` token
does not help on moto, and ``PutItem``/``UpdateItem`` have none. So:

* :func:`outcome_unknown` says whether an error leaves the write's outcome open: a lost
  connection or timeout, a server error, or any error that came after botocore retried
  (an earlier try may have applied). Only a 4xx answer to the first and only try is a
  definite no.
* :func:`put_if_absent` writes an item conditionally and, when the condition fails,
  reads the item back: if it is our own (``ours``), the earlier try applied and the
  write succeeded.
* :func:`cleanup_on_refusal` deletes a writer's blobs when the block it guards fails
  with a definite refusal, and keeps them otherwise (an unknown outcome leaves them to
  the orphan sweep and the retry).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Callable, Iterator, Optional, Sequence

import botocore.exceptions

from statestore.dynamodb.blobs import BlobStore
from statestore.dynamodb.connection import CONNECTION_ERRORS, Dynamo, is_condition_failed
from statestore.errors import (
    BufferFullError,
    CommitConflictError,
    CommitOutcomeUnknownError,
    SleeperError,
    StateStoreUnavailableError,
    TableExistsError,
    TableNotFoundError,
    TransactionError,
)

log = logging.getLogger(__name__)

#: errors of ours that are raised only after the store answered no (or before anything was sent)
DEFINITE_REFUSALS = (TransactionError, TableNotFoundError, TableExistsError, BufferFullError, CommitConflictError)


def _retried(e: botocore.exceptions.ClientError) -> bool:
    return int(e.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) or 0) > 0


def outcome_unknown(e: BaseException) -> bool:
    """Whether the write that raised ``e`` may have applied (see the module docstring).
    Our own refusals (:data:`DEFINITE_REFUSALS`) are definite; a
    StateStoreUnavailableError is judged by its cause; anything unexpected (an
    interrupt, a bug) is unknown; a local file error is not."""
    if isinstance(e, CommitOutcomeUnknownError):
        return True
    if isinstance(e, DEFINITE_REFUSALS):
        return False
    if isinstance(e, StateStoreUnavailableError) and e.__cause__ is not None:
        e = e.__cause__
    if isinstance(e, botocore.exceptions.ClientError):
        status = int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        return not (400 <= status < 500) or _retried(e)
    if isinstance(e, (botocore.exceptions.ParamValidationError, botocore.exceptions.NoCredentialsError)):
        return False  # nothing was sent
    if isinstance(e, (botocore.exceptions.BotoCoreError, *CONNECTION_ERRORS)):
        return True  # a connection lost, a timeout: sent, perhaps applied
    if isinstance(e, OSError):
        return False  # a local file operation: it failed, and we know it
    return True


def may_have_applied(e: botocore.exceptions.ClientError) -> bool:
    """Whether a refusal (a failed condition, a cancelled transaction) came after botocore
    retried the request: then the refusal may be the retry running into the first
    try's own write, which the caller must look for."""
    return _retried(e)


def put_if_absent(dynamo: Dynamo, what: str, role: str, item: dict[str, Any], key: dict[str, Any],
                  condition: str, ours: Callable[[dict[str, Any]], bool]) -> bool:
    """PutItem ``item`` under ``condition`` (e.g. ``attribute_not_exists(n)``). Returns
    True when the item is written -- by this call, or by an earlier try of it whose reply
    was lost (the stored item at ``key`` satisfies ``ours``) -- and False when the
    condition failed on someone else's item: a definite no. Other errors are raised
    (judge them with :func:`outcome_unknown`)."""
    try:
        dynamo.call(what, dynamo.client.put_item, TableName=dynamo.table(role), Item=item,
                    ConditionExpression=condition)
        return True
    except botocore.exceptions.ClientError as e:
        if not is_condition_failed(e):
            raise
    stored = dynamo.get(f"{what} (check for our own earlier write)", role, key)
    return stored is not None and ours(stored)


@contextlib.contextmanager
def cleanup_on_refusal(blobs: BlobStore, keys: Sequence[Optional[str]], what: str) -> Iterator[list[Optional[str]]]:
    """Run the block; if it raises a definite refusal (``not outcome_unknown``), delete
    ``keys`` (best effort) before the error goes on. On an unknown outcome the keys are
    kept: the write may have applied and may name them. Yields the list of keys, to
    which the block may add keys it writes."""
    owned = list(keys)
    try:
        yield owned
    except BaseException as e:
        wanted = [k for k in owned if k]
        if wanted and not outcome_unknown(e):
            delete_quietly(blobs, wanted, what)
        elif wanted:
            log.warning("%s: outcome unknown (%s); keeping %s for the orphan sweep", what, e, wanted)
        raise


def delete_quietly(blobs: BlobStore, keys: Sequence[str], what: str) -> None:
    """Delete blobs nothing names; a failure only wastes space, so it is logged."""
    try:
        blobs.delete(list(keys))
    except SleeperError as e:
        log.warning("%s: blobs %s not deleted: %s", what, list(keys), e)
