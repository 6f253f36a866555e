"""Several ``airflow`` commands in one interpreter.

``python -m sleeper_ops.orchestration.cli_batch '["db", "migrate"]' '["pools", "set", ...]'``
runs each argument (a JSON list: one command's words after ``airflow``) in turn, the
way Airflow's own entry point (``airflow.__main__``) runs one: the default
configuration written if it is missing, then the command's parser and function.

Every ``airflow`` command is a new interpreter that imports Airflow and its providers
(about 3.5 s of CPU on the 2-core test machine). ``sleeper airflow`` and ``sleeper
cluster`` prepare the metadata database with two of them (migrate it, then create the
``spark`` pool), so they run both here and pay the import once.

One command is Sleeper's own: ``["sleeper-connection", conn_id, fields, writer]`` writes a
connection into the metadata database the batch has just migrated
(:func:`sleeper_ops.orchestration.connections.run`), so ``sleeper airflow`` and ``sleeper
cluster`` create ``sleeper_default`` without a third interpreter.

Guarantees: the commands run in the order given; the first that fails ends the batch
with its exit status (or 1 when it raised), and the commands after it do not run.
"""

from __future__ import annotations

import json
import sys
from typing import Optional, Sequence


def parse_commands(argv: Sequence[str]) -> list[list[str]]:
    """Each argument as a command (a JSON list of strings); ValueError on anything else."""
    commands = []
    for arg in argv:
        try:
            words = json.loads(arg)
        except json.JSONDecodeError as e:
            raise ValueError(f"not a JSON list of words: {arg!r} ({e})") from None
        if not isinstance(words, list) or not words or not all(isinstance(w, str) for w in words):
            raise ValueError(f"a command is a non-empty JSON list of strings, got {arg!r}")
        commands.append(words)
    return commands


def run_commands(commands: Sequence[Sequence[str]]) -> int:
    """Run ``commands`` in this interpreter (see the module docstring); the exit status."""
    from airflow.cli import cli_parser
    from airflow.configuration import write_default_airflow_configuration_if_needed

    from sleeper_ops.orchestration import connections

    write_default_airflow_configuration_if_needed()
    parser = cli_parser.get_parser()
    for words in commands:
        if words[0] == connections.COMMAND:
            print(f"--- {words[0]} {words[1]}", flush=True)
            connections.run(*words[1:])
            continue
        print(f"--- airflow {' '.join(words)}", flush=True)
        try:
            args = parser.parse_args(list(words))
            args.func(args)
        except SystemExit as e:
            if e.code not in (None, 0):
                return e.code if isinstance(e.code, int) else 1
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        commands = parse_commands(sys.argv[1:] if argv is None else argv)
    except ValueError as e:
        print(f"sleeper_ops.orchestration.cli_batch: {e}", file=sys.stderr)
        return 2
    return run_commands(commands)


if __name__ == "__main__":
    sys.exit(main())
