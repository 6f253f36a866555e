"""Runs a Sleeper operator's ``execute`` in the test's process, as its DAG's task would."""

from __future__ import annotations

import collections
import contextlib
from types import SimpleNamespace
from typing import Any


def execute_task(operator: Any, sleeper: Any, *, run_id: str = "manual__1") -> Any:
    """``operator.execute`` on ``sleeper`` (its hook opens that), in DAG
    ``sleeper_<table>_<task id>``'s run ``run_id``; asset events are dropped."""
    operator.__dict__["hook"] = SimpleNamespace(get_conn=lambda: contextlib.nullcontext(sleeper))
    ti = SimpleNamespace(dag_id=f"sleeper_{operator.table}_{operator.task_id}", run_id=run_id, try_number=1,
                         task_id=operator.task_id, map_index=-1)
    events: Any = collections.defaultdict(lambda: SimpleNamespace(add=lambda *a, **k: None))
    return operator.execute({"ti": ti, "run_id": run_id, "outlet_events": events})
