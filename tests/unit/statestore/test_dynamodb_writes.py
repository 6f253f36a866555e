"""Which errors leave a DynamoDB write's outcome open (:mod:`statestore.dynamodb.writes`):
only a 4xx answer to the first and only try is a definite no."""

from __future__ import annotations

from typing import Any

import pytest

botocore_exceptions = pytest.importorskip("botocore.exceptions")

from statestore.dynamodb.blobs import LocalBlobStore  # noqa: E402
from statestore.dynamodb.writes import cleanup_on_refusal, outcome_unknown  # noqa: E402
from statestore.errors import (  # noqa: E402
    BufferFullError,
    CommitOutcomeUnknownError,
    StateStoreUnavailableError,
    TableNotFoundError,
)


def client_error(code: str, status: int, retries: int = 0) -> Any:
    return botocore_exceptions.ClientError(
        {"Error": {"Code": code, "Message": code},
         "ResponseMetadata": {"HTTPStatusCode": status, "RetryAttempts": retries}}, "PutItem")


def unavailable(cause: BaseException) -> StateStoreUnavailableError:
    try:
        raise StateStoreUnavailableError("cannot write") from cause
    except StateStoreUnavailableError as e:
        return e


@pytest.mark.parametrize(("error", "unknown"), [
    (client_error("ConditionalCheckFailedException", 400), False),
    (client_error("ValidationException", 400), False),
    (client_error("ThrottlingException", 400, retries=3), True),  # an earlier try may have applied
    (client_error("InternalServerError", 500), True),
    (botocore_exceptions.ReadTimeoutError(endpoint_url="http://dynamodb"), True),
    (botocore_exceptions.ConnectionClosedError(endpoint_url="http://dynamodb"), True),
    (unavailable(client_error("ResourceNotFoundException", 400)), False),
    (unavailable(botocore_exceptions.EndpointConnectionError(endpoint_url="http://dynamodb")), True),
    (unavailable(FileNotFoundError("no such blob")), False),
    (CommitOutcomeUnknownError("lost"), True),
    (TableNotFoundError("gone"), False),
    (BufferFullError("full"), False),
    (KeyboardInterrupt(), True),
])
def test_only_a_first_try_answered_no_is_a_definite_refusal(error, unknown):
    assert outcome_unknown(error) is unknown


def test_blobs_are_deleted_after_a_refusal_and_kept_after_an_unknown_outcome(tmp_path):
    blobs = LocalBlobStore(tmp_path)
    for key, error in (("refused", TableNotFoundError("gone")), ("unknown", client_error("InternalServerError", 500))):
        blobs.put(key, b"bytes")
        with pytest.raises(type(error)), cleanup_on_refusal(blobs, [key], "write"):
            raise error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["unknown"]
