"""Event-driven ingest, the acting part: a batch of S3 event messages (parsed by
:mod:`sleeper_ops.ingest.events`) landed in a table's ingest queue, exactly once each.

:func:`land_messages` takes each message in turn:

1. a message that is not an S3 event notification is left unsettled (the queue's redrive
   policy deals with it); one that announces no file (a test event, a removal) is settled;
2. a message whose key ``sqs:<message id>`` the table already holds (a redelivery, or a
   second run over the same batch) is settled and queues nothing;
3. each announced file is validated (:func:`validate_file`: its type is known, it reads
   as that type, its columns are the table's); a file refused for good is copied to its
   dead letter with a reason object beside it (:func:`dead_letter`), and only once both
   copies are confirmed does it count as handled; a file no longer there is logged and
   handled (nothing to ingest);
4. the files that passed are queued for the ingest batcher as one request keyed by the
   message (:func:`sleeper_ops.ingest.batcher.submit_ingest_requests`: the key is kept
   in the same state-store transaction as the requests);
5. only then is the message settled (:attr:`LandingReport.settled`: the caller deletes
   those from the queue).

Whatever cannot be decided (S3 or the state store unreachable, a copy not confirmed) leaves
the message unsettled with its reason: SQS redelivers it and step 2 or 3 runs again. The
batcher then ingests queued requests exactly once each (its own guarantee). The source
file is never deleted or changed: a dead letter is a copy.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, Sequence

import pyarrow as pa
import pyarrow.fs as pafs

from sleeper_ops.errors import IngestError
from sleeper_ops.ingest.batcher import submit_ingest_requests
from sleeper_ops.ingest.events import (
    EventMessage,
    EventMessageError,
    dead_letter_uris,
    parse_message,
    request_id_of,
)
from sleeper_ops.io.inputs import detect_format, read_batches, resolve
from statestore import clock
from statestore.errors import StateStoreUnavailableError

if TYPE_CHECKING:
    from sleeper_ops.io.storage import S3Options
    from sleeper_ops.stores import Stores
    from statestore.schema import Schema

log = logging.getLogger(__name__)


class FileGone(IngestError):
    """The announced file is no longer there (deleted after its event)."""


@dataclass
class LandingReport:
    """What :func:`land_messages` did with one batch."""

    #: messages handled for good, to delete from the queue (in the order given)
    settled: list[EventMessage] = field(default_factory=list)
    #: (message id, why) of messages left on the queue, to be redelivered
    unsettled: list[tuple[str, str]] = field(default_factory=list)
    #: files queued for the ingest batcher by this call
    queued: list[str] = field(default_factory=list)
    #: ids of messages whose key the table held already: nothing queued again
    repeats: list[str] = field(default_factory=list)
    #: (file, reason) of files copied to their dead letter
    dead_letters: list[tuple[str, str]] = field(default_factory=list)
    #: one line per record or file that announced nothing to ingest
    ignored: list[str] = field(default_factory=list)


def validate_file(uri: str, schema: Schema, s3: Optional[S3Options] = None, *, table: str = "") -> Optional[str]:
    """None if ``uri`` can be ingested into a table of ``schema`` (known type, readable as
    that type, the table's columns present and of the table's types, judged on its first
    batch); else the reason, one line, for a refusal that a retry would repeat.

    Raises:
        FileGone: there is no such object.
        OSError: the store could not be asked (try again later; never a dead letter).
    """
    try:
        detect_format(uri)
    except IngestError as e:
        return str(e)
    fs, path = resolve(uri, s3)
    if fs.get_file_info(path).type != pafs.FileType.File:
        raise FileGone(f"{uri}: no such file")
    try:
        next(iter(read_batches(uri, schema, s3, batch_rows=1024, table=table)), None)
    except IngestError as e:
        cause = e.__cause__
        if isinstance(cause, OSError) and not isinstance(cause, pa.ArrowInvalid):
            raise OSError(str(e)) from e  # a failed read is not a bad file
        return str(e)
    return None


def dead_letter(uri: str, reason: str, *, prefix: Optional[str], s3: Optional[S3Options] = None,
                table: str = "", message_id: str = "") -> str:
    """Copy ``uri`` to its dead letter (:func:`sleeper_ops.ingest.events.dead_letter_uris`)
    and write the reason object beside it (JSON: source, reason, table, message id, time);
    return the copy's URI once both are confirmed there (the copy as big as the source).

    Raises:
        OSError, IngestError: a copy failed or could not be confirmed; the source is untouched.
    """
    copy_uri, reason_uri = dead_letter_uris(uri, prefix)
    fs, src = resolve(uri, s3)
    _, dst = resolve(copy_uri, s3)
    _, why = resolve(reason_uri, s3)
    size = fs.get_file_info(src).size
    fs.copy_file(src, dst)
    body = json.dumps({"source": uri, "reason": reason, "table": table, "message_id": message_id,
                       "at_ms": clock.now_ms()}, indent=1).encode()
    with fs.open_output_stream(why) as out:
        out.write(body)
    copied, note = fs.get_file_info([dst, why])
    if copied.type != pafs.FileType.File or copied.size != size or note.type != pafs.FileType.File:
        raise IngestError(f"{uri}: its dead letter {copy_uri} could not be confirmed")
    return copy_uri


def land_messages(sleeper: Stores, table_name: str, messages: Sequence[EventMessage], *,
                  dead_letter_prefix: Optional[str] = None, own_prefixes: Sequence[str] = ()) -> LandingReport:
    """Queue the files ``messages`` announce for table ``table_name``'s ingest batcher,
    each message once (see the module docstring). ``own_prefixes``: the ``s3://`` roots of
    the instance's own objects, never announced (:func:`sleeper_ops.ingest.events.parse_message`).
    Never raises for one message: what could not be done is in :attr:`LandingReport.unsettled`."""
    report = LandingReport()
    info = sleeper.state_store.get_table(table_name)
    for message in messages:
        try:
            announced = parse_message(message, dead_letter_prefix=dead_letter_prefix, own_prefixes=own_prefixes)
        except EventMessageError as e:
            log.warning("table %s: %s; left on the queue", table_name, e)
            report.unsettled.append((message.message_id, str(e)))
            continue
        report.ignored.extend(announced.ignored)
        key = request_id_of(message.message_id)
        try:
            if announced.files and sleeper.state_store.client_write(info.table_id, key) is not None:
                report.repeats.append(message.message_id)
            elif announced.files:
                good = _sort_out(sleeper, info.name, info.schema, message, announced.files, dead_letter_prefix,
                                 report)
                if good:
                    submit_ingest_requests(sleeper, table_name, good, request_id=key)
                    report.queued.extend(good)
        except (OSError, IngestError, StateStoreUnavailableError) as e:
            # StateStoreUnavailableError: the store unreachable, or a commit whose outcome is
            # unknown (the redelivery finds the key held if it did commit)
            log.warning("table %s: message %s left on the queue: %s", table_name, message.message_id, e)
            report.unsettled.append((message.message_id, str(e)))
            continue
        report.settled.append(message)
    return report


def _sort_out(sleeper: Stores, table: str, schema: Schema, message: EventMessage, files: Sequence[str],
              prefix: Optional[str], report: LandingReport) -> list[str]:
    """The files of one message that pass validation; the others are dead-lettered
    (recorded in ``report``) or, when gone, noted as ignored."""
    good: list[str] = []
    for uri in files:
        try:
            reason = validate_file(uri, schema, sleeper.s3, table=table)
        except FileGone as e:
            report.ignored.append(str(e))
            continue
        if reason is None:
            good.append(uri)
            continue
        dead_letter(uri, reason, prefix=prefix, s3=sleeper.s3, table=table, message_id=message.message_id)
        log.warning("table %s: %s copied to the dead letters: %s", table, uri, reason)
        report.dead_letters.append((uri, reason))
    return good
