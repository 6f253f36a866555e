"""The ``sleeper`` command line: parse, open Sleeper, call the library, print."""

from sleeper_ops.cli.cluster import cluster
from sleeper_ops.cli.commands import cli, main
from sleeper_ops.cli.deletes import delete
from sleeper_ops.cli.history import history
from sleeper_ops.cli.server import server

cli.add_command(server)
cli.add_command(delete)
cli.add_command(history)
cli.add_command(cluster)

__all__ = ["cli", "main"]
