"""Helpers for the CLI: reading schema and split-point files, parsing JSON keys, progress."""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import sys
import uuid
from typing import Any, Callable, Iterator, Optional

import click

from statestore.errors import SchemaError
from statestore.schema import Schema, key_from_json

#: OpenBLAS's environment variable for the size of its thread pool
BLAS_THREADS = "OPENBLAS_NUM_THREADS"


#: the ``--request-id`` option of every write command
REQUEST_ID = click.option(
    "--request-id", default=None, metavar="ID",
    help="An idempotency key: run again with the same ID and input (e.g. after a timeout), nothing more is stored "
         "and the first answer is printed (within sleeper.table.write.idempotency.hours); the ID with other input "
         "is refused. Without it the command takes one of its own, so its own retries never write twice.")


#: the request id this invocation took for itself, if any (see :func:`request_id_of`)
_own_ids: list[str] = []


def request_id_of(given: Optional[str], command: str) -> str:
    """The idempotency key of a write command: ``--request-id``, or one of this
    invocation (DESIGN.md section 12), so a retry inside the command (botocore's, a
    PostgreSQL commit whose reply was lost) finds its own first try and answers success
    instead of raising or writing twice. It is kept like a given key
    (``sleeper.table.write.idempotency.hours``); :func:`unknown_outcome_hint` names it."""
    if given is not None:
        return given
    _own_ids[:] = [f"cli-{command}-{uuid.uuid4().hex}"]
    return _own_ids[0]


def unknown_outcome_hint(start: bool = False) -> str:
    """For the error line of a write whose state store was lost: the request id to run
    it again with, so it finishes without writing twice ("" when the command took none).
    ``start``: forget the last invocation's."""
    if start:
        _own_ids.clear()
        return ""
    if not _own_ids:
        return ""
    return f" (run the command again with --request-id {_own_ids[0]} to finish it without writing twice)"


def import_arrow() -> None:
    """Import pyarrow, and with it NumPy, whose OpenBLAS starts a thread pool as it
    loads: one thread, unless the user's environment says otherwise (no command uses
    BLAS; the pool's start cost a lookup process ~65 ms, docs/adr/0009-lookup-process.md).
    The environment is left as it was, so processes the command starts get the user's."""
    if "numpy" not in sys.modules and BLAS_THREADS not in os.environ:
        os.environ[BLAS_THREADS] = "1"
        try:
            import numpy  # noqa: F401 - loads OpenBLAS
        finally:
            os.environ.pop(BLAS_THREADS, None)
    import pyarrow  # noqa: F401


def open_sleeper(ctx: Any) -> Any:
    """The command's :class:`~sleeper_ops.api.Sleeper` (a ``click.Context``'s), opened from
    the home once and closed when the command ends (pyarrow imported by :func:`import_arrow`)."""
    import_arrow()
    from sleeper_ops.api import Sleeper

    if "sleeper" not in ctx.obj:
        ctx.obj["sleeper"] = ctx.with_resource(Sleeper(ctx.obj["home"]))
    return ctx.obj["sleeper"]


def read_schema_file(path: str) -> Schema:
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as e:
        raise SchemaError(f"cannot read schema file {path}: {e.strerror}") from e
    try:
        return Schema.from_json(text)
    except SchemaError as e:
        raise SchemaError(f"{path}: {e}") from e


def read_split_points(path: str, schema: Schema) -> list[Any]:
    """Sleeper's split points file: one per line for the first row key field; bytes as base64."""
    first = schema.row_key_fields[0]
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as e:
        raise SchemaError(f"cannot read split points file {path}: {e.strerror}") from e
    out: list[Any] = []
    for i, line in enumerate(lines, 1):
        if line == "" and first.type != "StringType":
            continue
        try:
            if first.type in ("IntType", "LongType"):
                out.append(key_from_json(first.type, int(line.strip()), first.name))
            elif first.type == "ByteArrayType":
                out.append(base64.b64decode(line.strip(), validate=True))
            else:
                out.append(line)
        except (ValueError, binascii.Error, SchemaError) as e:
            raise SchemaError(f"{path} line {i}: {line!r} is not a valid {first.type} split point") from e
    return out


@contextlib.contextmanager
def record_progress(label: str, total: Optional[int] = None) -> Iterator[Callable[[int], None]]:
    """A Rich progress display on stderr; yields a callback taking records done. Shown
    only where Rich sees a terminal; where it could not (stderr no terminal, and neither
    ``TTY_COMPATIBLE=1`` nor ``FORCE_COLOR`` set, Rich's own overrides), Rich is not
    imported at all (about 50 ms of a ``sleeper compact`` or ``sleeper ingest`` run by a
    script or a DAG) and the callback does nothing."""
    if not _maybe_terminal(sys.stderr):
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    columns = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("records"), TimeElapsedColumn()]
    # Shown only on a terminal, so scripts (and error output) get clean stderr.
    with Progress(*columns, console=console, transient=False, disable=not console.is_terminal) as p:
        task = p.add_task(label, total=total)
        yield lambda n: p.advance(task, n)


def _maybe_terminal(stream: Any) -> bool:
    """Whether Rich may take ``stream`` for a terminal: it is one, or the environment
    says to treat it as one (``TTY_COMPATIBLE=1``, or ``FORCE_COLOR`` set non-empty)."""
    if os.environ.get("TTY_COMPATIBLE") == "1" or os.environ.get("FORCE_COLOR"):
        return True
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False
