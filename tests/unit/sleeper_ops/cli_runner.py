"""Runs the ``sleeper`` command in the test's process."""

from __future__ import annotations

import contextlib
from typing import Any

import sleeper_ops.api
from sleeper_ops.cli.commands import main


def invoke_cli(capsys: Any, *args: str) -> tuple[int, str, str]:
    """``sleeper ARGS`` in process; returns (exit code, stdout, stderr)."""
    capsys.readouterr()
    try:
        main(list(args))
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def run_cli(sleeper: Any, monkeypatch: Any, capsys: Any, *args: str) -> tuple[int, str, str]:
    """``sleeper ARGS`` in process, every command using ``sleeper``; returns (exit code,
    stdout, stderr)."""
    monkeypatch.setattr(sleeper_ops.api, "Sleeper", lambda home: contextlib.nullcontext(sleeper))
    return invoke_cli(capsys, *args)
