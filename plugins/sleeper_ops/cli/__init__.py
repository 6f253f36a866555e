"""The ``sleeper`` command line: parse, open Sleeper, call the library, print.

The commands living in modules of their own (``table``, ``server``, ``delete``,
``export``, ``cluster``, ``history``) are imported only when run (:mod:`sleeper_ops.cli.lazy`), so a command's
start-up pays for its own imports only."""

from sleeper_ops.cli.commands import cli, main

__all__ = ["cli", "main"]
