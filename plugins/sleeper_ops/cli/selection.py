"""How the CLI reads what a command selects: keys and ranges as JSON in the table's types,
and ``--as-of`` (a transaction or a time), with the note an as-of read prints."""

from __future__ import annotations

from typing import Any, Optional

import click


def parse_selection(t: Any, keys: tuple[str, ...], ranges: tuple[tuple[str, str], ...]) -> tuple[list[Any], list[Any]]:
    """The keys and ranges given as JSON (``--key``, ``--range``), in the table's types."""
    from sleeper_ops.io.codec import parse_key, parse_range

    return [parse_key(t.schema, k) for k in keys], [parse_range(t.schema, lo, hi) for lo, hi in ranges]




AS_OF = click.option("--as-of", "as_of", default=None, metavar="TXN|TIME",
                      help="Read as of transaction TXN (see 'sleeper history') or an ISO 8601 TIME "
                           "(e.g. 2026-11-24T09:30:00Z), within the table's history retention and not in the future; "
                           "the write buffer is excluded.")


def as_of_value(text: Optional[str]) -> Any:
    """``--as-of`` parsed (None when not given); a bad value fails in one line."""
    from statestore.history import parse_as_of

    return None if text is None else parse_as_of(text)


def say_as_of(result: Any) -> None:
    """On stderr: which transaction an as-of result read, and that the buffer was excluded."""
    from sleeper_ops.query.as_of import AS_OF_KEY, AS_OF_TIME_KEY, BUFFER_NOTE

    meta = result.schema.metadata or {}
    if AS_OF_KEY in meta:
        click.echo(f"note: as of transaction {meta[AS_OF_KEY].decode()} ({meta[AS_OF_TIME_KEY].decode()}); "
                   f"{BUFFER_NOTE}", err=True)
