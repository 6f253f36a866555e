"""``sleeper history``: parsing and printing only; the history is the state store's
(:mod:`statestore.history`). ``--as-of`` of ``query`` and ``sql`` is in
:mod:`sleeper_ops.cli.commands`."""

from __future__ import annotations

import datetime
import json

import click

from sleeper_ops.cli.support import open_sleeper
from statestore.history import TransactionSummary


def _when(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


def render(rows: list[TransactionSummary]) -> str:
    """One line a transaction, newest first, under a header."""
    head = f"{'TXN':>10}  {'TIME (UTC)':19}  {'KIND':24} {'FILES +/-':>10} {'RECORDS +/-':>20}  JOB"
    lines = [head]
    for h in rows:
        files = f"+{h.files_added}/-{h.files_removed}"
        records = f"+{h.records_added:,}/-{h.records_removed:,}"
        job = h.job_id or "-"
        lines.append(f"{h.number:>10}  {_when(h.time_ms)}  {h.kind:24} {files:>10} {records:>20}  {job}"
                     + (f"  ({h.detail})" if h.detail else ""))
    return "\n".join(lines)


@click.command("history")
@click.argument("table_name", metavar="TABLE")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True, help="Most transactions to list.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object a transaction, newest first.")
@click.pass_context
def history(ctx: click.Context, table_name: str, limit: int, as_json: bool) -> None:
    """List TABLE's transactions, newest first: number, time, kind, files and records
    added and removed, and the job that made each. Any number listed within the
    table's sleeper.table.history.retention.minutes can be read with --as-of."""
    rows = open_sleeper(ctx).table(table_name).history(limit)
    if as_json:
        for h in rows:
            click.echo(json.dumps(h.to_dict()))
        return
    click.echo(render(rows))
