"""``sleeper export``: parsing and printing only; the logic is :mod:`sleeper_ops.query.export`."""

from __future__ import annotations

import json
from typing import Optional

import click

from sleeper_ops.cli.selection import parse_selection
from sleeper_ops.cli.support import open_sleeper as _sleeper


@click.command("export")
@click.argument("table_name", metavar="TABLE")
@click.argument("destination", metavar="DEST")
@click.option("--range", "key_range", nargs=2, default=None, metavar="MIN MAX",
              help="Only [MIN, MAX) on the first row key field, as JSON; null at either end is unbounded.")
@click.option("--where", default=None, metavar="PREDICATE", help="Only records this SQL predicate is true for.")
@click.option("--export-key", default=None, metavar="KEY",
              help="An idempotency key naming one export: the same KEY and export again answers 'already "
                   "exported' and writes nothing; the KEY with another destination, range or where is refused.")
@click.option("--runner", type=click.Choice(["local", "spark"]), default="local", show_default=True,
              help="Write the leaves in this process, or one Spark task a leaf.")
@click.option("--no-buffer", is_flag=True, help="Leave out records still in the write buffer.")
@click.option("--json", "as_json", is_flag=True, help="Print the result and manifest as JSON.")
@click.pass_context
def export(ctx: click.Context, table_name: str, destination: str, key_range: Optional[tuple[str, str]],
           where: Optional[str], export_key: Optional[str], runner: str, no_buffer: bool, as_json: bool) -> None:
    """Export TABLE to DEST (a directory or s3:// prefix): one sorted Parquet file per
    leaf partition, iterators applied, deletes hidden, and a _manifest.json naming the
    transaction read at, the files and their row counts (written last)."""
    t = _sleeper(ctx).table(table_name)
    rng = parse_selection(t, (), (key_range,))[1][0] if key_range else None
    result = t.export(destination, range=rng, where=where, export_key=export_key, runner=runner,
                      buffer=not no_buffer)
    click.echo(json.dumps(result.to_dict()) if as_json else result.summary())
