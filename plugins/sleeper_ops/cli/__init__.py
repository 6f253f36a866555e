"""The ``sleeper`` command line: parse, open Sleeper, call the library, print."""

from sleeper_ops.cli.commands import cli, main

__all__ = ["cli", "main"]
