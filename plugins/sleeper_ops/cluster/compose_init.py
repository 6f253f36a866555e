"""docker-compose.yaml's ``airflow-init`` service: ``python -m sleeper_ops.cluster.compose_init``
prepares the metadata database as ``sleeper cluster`` does before any Airflow process
starts (:func:`sleeper_ops.cluster.environment.init_commands` of the compose layout: migrate,
the ``spark`` pool, and ``sleeper_default`` written with the fields the workers are given,
so the UI lists it and its Test button reaches the cluster's stores), in one interpreter
(:mod:`sleeper_ops.orchestration.cli_batch`). Exits with the first failing command's status."""

from __future__ import annotations

import sys

from sleeper_ops.cluster.environment import compose_layout, init_commands
from sleeper_ops.orchestration.cli_batch import run_commands

#: the name the connection's description gives its writer (see sleeper_ops.orchestration.connections)
WRITER = "sleeper docker compose"


def commands() -> list[list[str]]:
    """The commands ``airflow-init`` runs."""
    return init_commands(compose_layout(), WRITER)


if __name__ == "__main__":
    sys.exit(run_commands(commands()))
