"""``sleeper delete`` and ``sleeper report erasure``: parsing and printing only; the
logic is :mod:`sleeper_ops.maintenance.deletes` and :mod:`sleeper_ops.maintenance.erasure`."""

from __future__ import annotations

import json
import sys
from typing import Any, Optional

import click

from sleeper_ops.cli.commands import _sleeper, cli

#: ``sleeper report erasure`` exits with this when some object still holds matching records
EXIT_NOT_ERASED = 3

KEY = click.option("--key", "keys", multiple=True, help="A key as JSON; several row key fields as a JSON array.")
RANGE = click.option("--range", "ranges", multiple=True, nargs=2, metavar="MIN MAX",
                     help="[MIN, MAX) on the first row key field, as JSON; MAX null is unbounded.")
WHERE = click.option("--where", default=None, metavar="PREDICATE",
                     help="Only records this SQL predicate (on any fields) is true for.")


def parse_selection(t: Any, keys: tuple[str, ...], ranges: tuple[tuple[str, str], ...]) -> tuple[list[Any], list[Any]]:
    """The keys and ranges given as JSON, in the table's types."""
    from sleeper_ops.io.codec import parse_key, parse_range

    return [parse_key(t.schema, k) for k in keys], [parse_range(t.schema, lo, hi) for lo, hi in ranges]


@cli.command("delete")
@click.argument("table_name", metavar="TABLE")
@KEY
@RANGE
@WHERE
@click.option("--request-id", default=None, metavar="ID",
              help="An idempotency key: the same ID again adds no second delete.")
@click.pass_context
def delete(ctx: click.Context, table_name: str, keys: tuple[str, ...], ranges: tuple[tuple[str, str], ...],
           where: Optional[str], request_id: Optional[str]) -> None:
    """Delete the records with a --key or in a --range (and matching --where) written
    before this command: one commit, hidden from every read at once, purged from files
    by compaction within sleeper.table.delete.purge.hours."""
    t = _sleeper(ctx).table(table_name)
    ks, rs = parse_selection(t, keys, ranges)
    click.echo(t.delete(keys=ks, ranges=rs, where=where, request_id=request_id).summary())


def erasure(ctx: click.Context, table_name: str, keys: tuple[str, ...], ranges: tuple[tuple[str, str], ...],
            where: Optional[str], as_json: bool) -> None:
    """Print the erasure report; exit :data:`EXIT_NOT_ERASED` unless it is clean."""
    t = _sleeper(ctx).table(table_name)
    ks, rs = parse_selection(t, keys, ranges)
    report = t.erasure_report(keys=ks, ranges=rs, where=where)
    click.echo(json.dumps(report.to_dict()) if as_json else report.render())
    if not report.clean:
        sys.stdout.flush()
        raise SystemExit(EXIT_NOT_ERASED)
