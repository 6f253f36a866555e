"""``sleeper table ...``: create, list, describe, set and clear properties, rename, delete."""

from __future__ import annotations

import json
from typing import Optional

import click

from sleeper_ops.cli.support import open_sleeper as _sleeper
from statestore.properties import ONLINE


# ----- table ---------------------------------------------------------------------------
@click.group()
def table() -> None:
    """Create, list, describe, set and unset properties of, rename and delete tables."""


def _parse_props(props: tuple[str, ...], hint: str = "--property") -> dict[str, str]:
    out = {}
    for p in props:
        k, sep, v = p.partition("=")
        if not sep:
            raise click.BadParameter(f"{p!r} is not NAME=VALUE (an empty VALUE clears the property)",
                                     param_hint=hint)
        out[k.strip()] = v.strip()
    return out


@table.command("create")
@click.argument("name")
@click.option("--schema", "schema_file", required=True, type=click.Path(dir_okay=False),
              help="Schema JSON file (Sleeper's format).")
@click.option("--split-points", "split_file", type=click.Path(dir_okay=False),
              help="One split point per line, for the first row key field.")
@click.option("--property", "props", multiple=True, metavar="K=V", help="A table property; repeatable.")
@click.pass_context
def table_create(ctx: click.Context, name: str, schema_file: str, split_file: Optional[str],
                 props: tuple[str, ...]) -> None:
    """Create table NAME."""
    from sleeper_ops.cli.support import read_schema_file, read_split_points

    schema = read_schema_file(schema_file)
    points = read_split_points(split_file, schema) if split_file else []
    t = _sleeper(ctx).create_table(name, schema, points, _parse_props(props))
    click.echo(f"created table {t.name} ({t.info.table_id}) with {len(points) + 1} leaf partitions")


@table.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def table_list(ctx: click.Context, as_json: bool) -> None:
    """List tables; a table whose name cannot become Airflow DAG ids (it gets no DAGs, so
    no scheduled maintenance) is reported on stderr, with the rename that fixes it."""
    import shlex

    from statestore.catalog import table_name_problem

    tables = _sleeper(ctx).tables()
    if as_json:
        click.echo(json.dumps([{"name": t.name, "id": t.table_id, "online": t.online} for t in tables]))
    else:
        for t in tables:
            click.echo(f"{t.name}\t{t.table_id}\t{'online' if t.online else 'offline'}")
    for t in tables:
        problem = table_name_problem(t.name)
        if problem is not None:
            click.echo(f"warning: {problem}; table {t.name!r} gets no Airflow DAGs (no scheduled maintenance, "
                       f"no REST access) until renamed: sleeper table rename {shlex.quote(t.name)} NEW_NAME", err=True)


@table.command("describe")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def table_describe(ctx: click.Context, name: str, as_json: bool) -> None:
    """Show a table's schema and every property: its value, which is its default unless
    set on the table (marked *, its default shown after it). --json: the same as
    ``properties`` (values), ``set`` (names set) and ``defaults``."""
    from statestore.properties import PROPERTY_DEFS

    info = _sleeper(ctx).table(name).info
    props = info.all_properties()
    defaults = {k: d.default for k, d in PROPERTY_DEFS.items()}
    if as_json:
        click.echo(json.dumps({"name": info.name, "id": info.table_id, "schema": info.schema.to_dict(),
                               "properties": props, "set": sorted(info.properties), "defaults": defaults}))
        return
    click.echo(f"table {info.name} ({info.table_id}), {'online' if info.online else 'offline'}")
    click.echo(f"schema: {info.schema.to_json()}")
    click.echo("properties (* set on this table, its default after it; the others are at their default):")
    for k, v in props.items():
        if k in info.properties:
            default = defaults.get(k)
            click.echo(f"* {k} = {'' if v is None else v} (default {'none' if default is None else default})")
        else:
            click.echo(f"  {k} = {'' if v is None else v}")


@table.command("online")
@click.argument("name")
@click.pass_context
def table_online(ctx: click.Context, name: str) -> None:
    """Put a table online (splitting, compaction and GC run)."""
    _sleeper(ctx).set_properties(name, {ONLINE: "true"})
    click.echo(f"table {name} is online")


@table.command("offline")
@click.argument("name")
@click.pass_context
def table_offline(ctx: click.Context, name: str) -> None:
    """Take a table offline (the split, compaction, GC and flush DAGs skip it; ingest and queries still work)."""
    _sleeper(ctx).set_properties(name, {ONLINE: "false"})
    click.echo(f"table {name} is offline")


@table.command("set")
@click.argument("name")
@click.argument("props", nargs=-1, required=True, metavar="NAME=VALUE...")
@click.pass_context
def table_set(ctx: click.Context, name: str, props: tuple[str, ...]) -> None:
    """Set table properties (NAME= with no value clears one). Each is checked before
    any is set: iterators against the schema, their code imported."""
    update = _parse_props(props, hint="NAME=VALUE")
    _sleeper(ctx).set_properties(name, update)
    _say_changed(name, update)


@table.command("unset")
@click.argument("name")
@click.argument("keys", nargs=-1, required=True, metavar="PROPERTY...")
@click.pass_context
def table_unset(ctx: click.Context, name: str, keys: tuple[str, ...]) -> None:
    """Clear table properties: each takes its default again."""
    _sleeper(ctx).unset_properties(name, list(keys))
    _say_changed(name, dict.fromkeys(keys, ""))


def _say_changed(name: str, update: dict[str, str]) -> None:
    set_ = [f"{k}={v}" for k, v in update.items() if v]
    cleared = [k for k, v in update.items() if not v]
    parts = ([f"set {', '.join(set_)}"] if set_ else []) + ([f"cleared {', '.join(cleared)}"] if cleared else [])
    click.echo(f"table {name}: {'; '.join(parts)}")


@table.command("rename")
@click.argument("old")
@click.argument("new")
@click.pass_context
def table_rename(ctx: click.Context, old: str, new: str) -> None:
    """Rename table OLD to NEW."""
    _sleeper(ctx).rename_table(old, new)
    click.echo(f"renamed table {old} to {new}")


@table.command("delete")
@click.argument("name")
@click.option("--yes", "-y", is_flag=True, help="Delete without asking (needed when stdin is not a terminal).")
@click.pass_context
def table_delete(ctx: click.Context, name: str, yes: bool) -> None:
    """Delete a table, its metadata and its files, for good. Asks first (y/N) on a
    terminal; without one, refuses unless --yes."""
    import sys

    sleeper = _sleeper(ctx)
    sleeper.table(name)  # an unknown table is said before anything is asked
    if not yes:
        if not sys.stdin.isatty():
            raise click.UsageError(f"table {name} is not deleted: deleting asks for confirmation and stdin is not "
                                   "a terminal; pass --yes to delete it")
        if not click.confirm(f"Delete table {name}, its metadata and all its files? This cannot be undone",
                             default=False):
            raise click.ClickException(f"table {name} is not deleted (not confirmed)")
    sleeper.delete_table(name)
    click.echo(f"deleted table {name}")
