"""``sleeper delete``: parsing and printing only; the logic is
:mod:`sleeper_ops.maintenance.deletes` (``sleeper report erasure`` is in :mod:`sleeper_ops.cli.commands`)."""

from __future__ import annotations

from typing import Optional

import click

from sleeper_ops.cli.selection import parse_selection
from sleeper_ops.cli.support import open_sleeper as _sleeper

KEY = click.option("--key", "keys", multiple=True, help="A key as JSON; several row key fields as a JSON array.")
RANGE = click.option("--range", "ranges", multiple=True, nargs=2, metavar="MIN MAX",
                     help="[MIN, MAX) on the first row key field, as JSON; null at either end is unbounded.")
WHERE = click.option("--where", default=None, metavar="PREDICATE",
                     help="Only records this SQL predicate (on any fields) is true for.")


@click.command("delete")
@click.argument("table_name", metavar="TABLE")
@KEY
@RANGE
@WHERE
@click.option("--request-id", default=None, metavar="ID",
              help="An idempotency key, kept with what the delete matches: the same delete again adds "
                   "no second tombstone; the ID with another delete is refused.")
@click.pass_context
def delete(ctx: click.Context, table_name: str, keys: tuple[str, ...], ranges: tuple[tuple[str, str], ...],
           where: Optional[str], request_id: Optional[str]) -> None:
    """Delete the records with a --key or in a --range (and matching --where) written
    before this command: one commit, hidden from every read at once, purged from files
    by compaction within sleeper.table.delete.purge.hours."""
    from sleeper_ops.cli.support import request_id_of

    t = _sleeper(ctx).table(table_name)
    ks, rs = parse_selection(t, keys, ranges)
    click.echo(t.delete(keys=ks, ranges=rs, where=where, request_id=request_id_of(request_id, "delete")).summary())
