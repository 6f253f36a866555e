"""A click group whose subcommands are imported when used: ``sleeper query`` loads
neither the modules of ``sleeper cluster`` nor those of ``sleeper table``. Listing the
commands (``sleeper --help``) imports each of them, as it must to show their help."""

from __future__ import annotations

import importlib
from typing import Any, Mapping, Optional

import click


class LazyGroup(click.Group):
    """A :class:`click.Group` with, besides its own commands, ``lazy_subcommands``: a
    name for each ``"module:attribute"`` holding a command, imported on first use."""

    def __init__(self, *args: Any, lazy_subcommands: Optional[Mapping[str, str]] = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_subcommands = dict(lazy_subcommands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.lazy_subcommands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> Optional[click.Command]:
        if cmd_name in self.lazy_subcommands and cmd_name not in self.commands:
            module, _, attribute = self.lazy_subcommands[cmd_name].partition(":")
            command = getattr(importlib.import_module(module), attribute)
            if not isinstance(command, click.Command):
                raise TypeError(f"{self.lazy_subcommands[cmd_name]} is not a click command")
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)
