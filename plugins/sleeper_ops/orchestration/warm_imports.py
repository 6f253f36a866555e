"""Imports that Airflow's forking processes make once, so each process they fork has them.

Airflow's DAG processor parses every DAG file in a new process forked from it, every
``min_file_process_interval`` (30 s here), and the scheduler (LocalExecutor) and a Celery
worker fork a process for every task, which parses its DAG file again. A Sleeper DAG file
imports pyarrow (with NumPy), psycopg, boto3 and the state store: about 0.3-0.4 s of CPU
that every parse and every task paid afresh. Imported once in the forking process, the
forked ones share them.

:func:`warm` imports them when the running program is one of those processes
(:data:`FORKING_COMMANDS`), saying so in one line on stderr, and does nothing otherwise. It is called from the
``airflow_local_settings.py`` that :func:`write_local_settings` puts in the homes
``sleeper airflow`` and ``sleeper cluster`` make (Airflow imports that module in every
process it starts). Only libraries that do not import Airflow are warmed: the module runs
while Airflow's own settings are being set up. Nothing here changes what a task or parse
does, only when its imports are paid.

It also loads botocore's models of the AWS services the DynamoDB state store's clients
use (DynamoDB, and S3 for its blobs) into boto3's default session, where those clients
are made (:func:`statestore.dynamodb.load_client_models`): each new client otherwise
parses its service's JSON model afresh (S3's is the largest), about half of a parse's
CPU on DynamoDB. The clients are made with placeholder keys and a region, so nothing is
resolved from the environment (credentials, instance metadata) and nothing connects: a
client the parse or task makes later resolves its own, as before. Only the models, the
endpoint rules and the configuration files read with them are kept.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Sequence

#: ``airflow <command>`` programs that fork the processes which parse DAG files or run tasks
FORKING_COMMANDS = ("dag-processor", "scheduler", "celery")

#: what a Sleeper DAG file's parse and a Sleeper task import, none of it importing Airflow
MODULES = (
    "numpy", "pyarrow", "pyarrow.parquet", "pyarrow.compute", "psycopg", "boto3", "botocore.session",
    "statestore.backends", "statestore.postgres", "statestore.dynamodb", "sleeper_ops.config", "sleeper_ops.api",
)

#: the first line of the file :func:`write_local_settings` writes (how it knows its own)
MARK = "# Written by sleeper (sleeper_ops.orchestration.warm_imports); rewritten on each start."
#: the first lines earlier releases wrote: their files are ours too, and rewritten
PREVIOUS_MARKS = ("# Written by sleeper (sleeper_ops.airflow.warm_imports); rewritten on each start.",)

LOCAL_SETTINGS = f'''{MARK}
"""Airflow imports this module in each of its processes: the ones that fork DAG parses
and tasks import Sleeper's libraries once (see sleeper_ops.orchestration.warm_imports)."""
from sleeper_ops.orchestration.warm_imports import warm

warm()
'''


def forks_parses_or_tasks(argv: Sequence[str]) -> bool:
    """Whether ``argv`` runs an Airflow program that forks DAG parses or tasks."""
    return len(argv) > 1 and Path(argv[0]).name == "airflow" and argv[1] in FORKING_COMMANDS


def warm(argv: Sequence[str] = tuple(sys.argv)) -> list[str]:
    """Import :data:`MODULES` when ``argv`` is a forking Airflow program; the modules
    imported (none otherwise). A module that fails to import is left for the parse or the
    task to report: warming never stops Airflow from starting."""
    if not forks_parses_or_tasks(argv):
        return []
    done = []
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception:
            continue
        done.append(name)
    models = _load_aws_models()
    print(f"sleeper: {len(done)} of {len(MODULES)} modules imported once for the DAG parses and tasks "
          f"this {argv[1]} forks, and the models of {len(models)} AWS services", file=sys.stderr, flush=True)
    return done


def _load_aws_models() -> list[str]:
    """The AWS services whose botocore models the DynamoDB state store's clients use,
    loaded once (:func:`statestore.dynamodb.load_client_models`); none if that store
    does not import."""
    try:
        from statestore.dynamodb import load_client_models
    except Exception:
        return []
    return load_client_models()


def write_local_settings(airflow_home: Path) -> bool:
    """Put ``airflow_local_settings.py`` in ``airflow_home/config`` (where Airflow looks
    for it), unless a file of the user's own is there; whether it was written."""
    path = Path(airflow_home) / "config" / "airflow_local_settings.py"
    if path.exists() and not path.read_text().startswith((MARK, *PREVIOUS_MARKS)):
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(LOCAL_SETTINGS)
    return True
