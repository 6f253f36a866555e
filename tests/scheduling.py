"""How ``pytest -n N --dist loadfile`` hands out the test modules: heaviest first.

pytest-xdist's ``loadfile`` keeps each module whole on one worker (a module-scoped
Airflow server or Spark session starts once), but it queues modules by their number
of tests, so the few modules that run for minutes with a handful of tests (a live
Airflow, Spark jobs, the README tour) came last and ran alone at the end while the
other workers idled. :class:`HeaviestFirstScheduling` keeps the modules whole, lets a
few modules that share one expensive session-scoped fixture run on one worker as one
unit (:data:`GROUPS`), and hands out the unit with the largest estimated time first.

The estimates (:data:`SECONDS`) are seconds a module took in a full parallel run of the
suite; a module not listed counts half a second a test. They only order the queue: a
stale figure makes the run slower, never wrong. ``tests/unit/test_scheduling.py``
checks that every file named here exists.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable

from xdist.scheduler import LoadFileScheduling

#: modules that share a session-scoped fixture of tests/integration/conftest.py (the
#: ``spark`` session; the ``airflow_home`` whose DAG server runs their DAGs), run one
#: after another on one worker
GROUPS: dict[str, str] = {
    "tests/integration/test_spark_reader.py": "spark-session",
    "tests/integration/test_spark_reader_deletes.py": "spark-session",
    "tests/integration/test_spark_export.py": "spark-session",
    "tests/integration/test_bulk_import_emr.py": "spark-session",
    "tests/integration/test_dags.py": "dag-server",
    "tests/integration/test_export_dag.py": "dag-server",
    "tests/integration/test_dynamodb_dags.py": "dag-server",
    "tests/integration/test_deferrable_spark.py": "dag-server",
    # not a shared fixture: the two modules that run a whole Airflow (standalone, and the
    # cluster with Spark) starved each other's API server on 2 cores, so they take turns
    "tests/integration/test_airflow_end_to_end.py": "live-airflow",
    "tests/system/test_cluster.py": "live-airflow",
}

#: seconds per module (or group) in a full ``make test`` run; ordering only
SECONDS: dict[str, float] = {
    "live-airflow": 480,
    "tests/system/test_readme_tour.py": 180,
    "tests/integration/test_bulk_import.py": 180,
    "dag-server": 280,
    "tests/integration/test_fault_matrix.py": 150,
    "tests/integration/test_erasure_oracle_dynamodb.py": 60,
    "tests/integration/test_fault_matrix_spark.py": 60,
    "tests/integration/test_erasure_oracle.py": 100,
    "tests/integration/test_fault_matrix_kills_dynamodb.py": 55,
    "tests/integration/test_fault_matrix_kills_postgres.py": 50,
    "tests/integration/test_fault_matrix_mixed.py": 60,
    "tests/integration/test_spark_compaction.py": 130,
    "spark-session": 170,
    "tests/integration/test_install.py": 110,
    "tests/integration/test_cli_postgres.py": 100,
    "tests/integration/test_deletes_walkthrough.py": 90,
    "tests/integration/test_spark_service.py": 90,
    "tests/integration/statestore/test_model_based.py": 90,
    "tests/integration/test_dynamodb_cli.py": 80,
    "tests/integration/test_readiness.py": 70,
    "tests/integration/test_provider.py": 70,
    "tests/integration/test_postgres_killed.py": 45,
    "tests/integration/test_sql_postgres.py": 65,
    "tests/test_bench_smoke.py": 290,
    "tests/integration/test_embedded_server.py": 55,
    "tests/integration/test_spark_attempts.py": 55,
    "tests/system/test_demo.py": 50,
}


def scope_of(nodeid: str) -> str:
    """The unit a test belongs to: its module, or the group its module is in."""
    module = nodeid.split("::", 1)[0]
    return GROUPS.get(module, module)


class _HeaviestFirst(OrderedDict):  # type: ignore[type-arg]
    """xdist's work queue, whose ``popitem(last=False)`` (the next unit to hand out)
    gives the unit with the largest estimate instead of the oldest."""

    def __init__(self, weight: Callable[[str, Any], float]) -> None:
        super().__init__()
        self._weight = weight

    def popitem(self, last: bool = True) -> tuple[str, Any]:
        if last:
            return super().popitem(last=True)
        scope = max(self, key=lambda s: self._weight(s, self[s]))
        return scope, self.pop(scope)


class HeaviestFirstScheduling(LoadFileScheduling):
    """``loadfile`` with :data:`GROUPS` as units and the heaviest unit handed out first."""

    def __init__(self, config: Any, log: Any = None) -> None:
        super().__init__(config, log)
        self.workqueue = _HeaviestFirst(lambda scope, tests: SECONDS.get(scope, 0.5 * len(tests)))

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)
