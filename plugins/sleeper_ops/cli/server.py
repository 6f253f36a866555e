"""``sleeper server status|stop``: the embedded PostgreSQL that outlives commands.

The first command that needs the embedded state store starts it; it then stays up for
later commands (and ``sleeper airflow``) until it has had no client for
``[state_store] idle_minutes`` (default 30), or until ``sleeper server stop``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from sleeper_ops.config import SleeperConfig


def _embedded(ctx: click.Context) -> SleeperConfig:
    from sleeper_ops.config import SleeperConfig

    config = SleeperConfig.load(ctx.obj["home"])
    if config.state_store_backend != "postgres" or config.state_store_dsn:
        where = "a DSN" if config.state_store_dsn else f"the {config.state_store_backend} backend"
        raise click.ClickException(f"no embedded server here: the state store is {where} "
                                   f"(see {config.home}/sleeper.toml)")
    return config


@click.group()
def server() -> None:
    """The embedded PostgreSQL kept running between commands."""


@server.command("status")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def server_status(ctx: click.Context, as_json: bool) -> None:
    """Whether the embedded server runs, its clients and when it stops by itself."""
    from statestore.postgres.idle_stop import status

    config = _embedded(ctx)
    st = status(config.embedded_pg_dir)
    if as_json:
        click.echo(json.dumps({"running": st.running, "pid": st.pid, "data_dir": str(st.data_dir),
                               "socket_dir": st.socket_dir, "clients": st.clients, "watcher_pid": st.watcher_pid,
                               "idle_minutes": st.idle_minutes}))
        return
    if not st.running:
        click.echo(f"the embedded PostgreSQL in {st.data_dir} is not running (the next command starts it)")
        return
    stops = (f"stops after {st.idle_minutes:g} minutes with no client" if st.watcher_pid
             else "no idle watcher: stops with the last process using it")
    click.echo(f"the embedded PostgreSQL runs (pid {st.pid}) in {st.data_dir}, socket in {st.socket_dir}; "
               f"{st.clients} client(s); {stops}")


@server.command("stop")
@click.pass_context
def server_stop(ctx: click.Context) -> None:
    """Stop the embedded server now (open transactions roll back; commits are durable)."""
    from statestore.postgres.idle_stop import stop_server

    config = _embedded(ctx)
    if stop_server(config.embedded_pg_dir):
        click.echo(f"stopped the embedded PostgreSQL in {config.embedded_pg_dir}")
    else:
        click.echo(f"the embedded PostgreSQL in {config.embedded_pg_dir} was not running")
