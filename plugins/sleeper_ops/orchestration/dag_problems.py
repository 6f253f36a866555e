"""Tables whose DAGs cannot be built, reported as Airflow import errors while every other
table's DAGs load.

A DAG file defines the DAGs of one operation for every table. Were it to raise when one
table's DAG cannot be built (a name Airflow refuses, a property the build raises on),
Airflow would drop every table's DAGs of that file. So the factory builds each table on its
own (:func:`build_each`) and, when some cannot be built, adds to the file one stand-in DAG,
``sleeper-unbuildable-<operation>`` (no table's DAG id looks like it: those start with
``sleeper_``), whose timetable's ``validate()`` raises ``AirflowTimetableInvalid`` naming
every such table and why.

That is Airflow's own path for a DAG found invalid when it is put into a DAG bag
(``BaseTimetable.validate``; ``DagBag.process_file`` validates each DAG of a file before
bagging it): the stand-in is not bagged, its error becomes the file's import error (the
UI's "DAG import errors", ``airflow dags list-import-errors``, ``GET
/api/v2/importErrors``) and the file's other DAGs are bagged as usual. The error goes at
the first parse after the tables are fixed (renamed, the property changed, or deleted).
"""

from __future__ import annotations

import logging
import shlex
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional

from statestore.catalog import TABLE_NAME_RULE, table_name_problem

if TYPE_CHECKING:
    from airflow.sdk import DAG

    from statestore.catalog import TableInfo

log = logging.getLogger(__name__)

#: The stand-in DAG's id (never bagged): ``sleeper-unbuildable-<operation>``.
STAND_IN_PREFIX = "sleeper-unbuildable-"


def build_problem(table: TableInfo, operation: str, build: Callable[[TableInfo, str], Any]) -> Optional[str]:
    """Why ``build(table, operation)`` cannot give the table's DAG, naming the table
    (its name outside the rule, or what the build or the DAG's ``validate()`` raised),
    or None when it can."""
    return _build(table, operation, build)[1]


def _build(table: TableInfo, operation: str, build: Callable[[TableInfo, str], Any]) -> tuple[Any, Optional[str]]:
    if table_name_problem(table.name) is not None:
        return None, (f"table {table.name!r} has a name outside the rule ({TABLE_NAME_RULE}); rename it: "
                      f"sleeper table rename {shlex.quote(table.name)} NEW_NAME")
    try:
        dag = build(table, operation)
        dag.validate()  # what Airflow checks before bagging it (a schedule's cron, ...), here where the table is known
        return dag, None
    except Exception as e:  # whatever one table's build raises must not stop the others
        return None, (f"table {table.name!r}: its {operation} DAG cannot be built: {type(e).__name__}: {e} "
                      f"(see its properties: sleeper table describe {shlex.quote(table.name)})")


def build_each(tables: Iterable[TableInfo], operation: str,
               build: Callable[[TableInfo, str], DAG], dag_id: Callable[[str, str], str]) -> dict[str, Any]:
    """``build(table, operation)`` for each table on its own, keyed by ``dag_id(name,
    operation)``; the tables that cannot be built are logged and named by one stand-in
    DAG (:func:`stand_in_dag`) under its own id."""
    dags: dict[str, Any] = {}
    problems = []
    for table in tables:
        dag, problem = _build(table, operation, build)
        if problem is None:
            dags[dag_id(table.name, operation)] = dag
        else:
            log.error("Sleeper %s DAGs: %s", operation, problem)
            problems.append(problem)
    if problems:
        dags[STAND_IN_PREFIX + operation] = stand_in_dag(operation, problems)
    return dags


def unbuildable_message(operation: str, problems: list[str]) -> str:
    """The import error of a DAG file with ``problems`` (one per table)."""
    tables = "1 table" if len(problems) == 1 else f"{len(problems)} tables"
    return (f"the Sleeper {operation} DAGs of {tables} cannot be built (every other table's {operation} DAG is "
            f"loaded): " + "; ".join(problems))


def stand_in_dag(operation: str, problems: list[str]) -> DAG:
    """A DAG that Airflow refuses to bag with the message :func:`unbuildable_message`
    (see the module docstring)."""
    from airflow.sdk import DAG
    from airflow.sdk.bases.timetable import BaseTimetable
    from airflow.sdk.exceptions import AirflowTimetableInvalid

    message = unbuildable_message(operation, problems)

    class Unbuildable(BaseTimetable):
        can_be_scheduled = False

        def validate(self) -> None:
            raise AirflowTimetableInvalid(message)

    return DAG(STAND_IN_PREFIX + operation, schedule=Unbuildable(), tags=["sleeper", operation],
               description=f"stands for the Sleeper {operation} DAGs that cannot be built; never loaded")


def backfill_refusal(dag_id: str, table_name: str, operation: str) -> str:
    """Why the maintenance DAG ``dag_id`` (``operation`` of ``table_name``) refuses a
    backfill, and what to do instead, in one line. Airflow refuses it (the DAG's
    ``allowed_run_types``); :mod:`sleeper_ops.orchestration.backfills` answers this line
    in place of Airflow's bare one."""
    return (f"{dag_id} is not backfilled: Sleeper's {operation} of table {table_name} works on the table's "
            f"current state, not on past dates, so a backfill would only repeat a run of now; trigger a run now "
            f"instead (the Trigger button, or POST /api/v2/dags/{dag_id}/dagRuns)")
