"""The test scheduler's tables name files that exist, and its queue hands out the
heaviest unit first, keeping grouped modules together."""

from __future__ import annotations

from pathlib import Path

from tests.scheduling import GROUPS, SECONDS, _HeaviestFirst, scope_of

REPO = Path(__file__).resolve().parents[2]


def test_every_file_the_scheduler_names_exists() -> None:
    named = set(GROUPS) | {s for s in SECONDS if s.endswith(".py")}
    assert sorted(f for f in named if not (REPO / f).is_file()) == []
    assert set(GROUPS.values()) <= set(SECONDS)  # every group has an estimate


def test_grouped_modules_form_one_unit_and_others_their_own() -> None:
    assert scope_of("tests/integration/test_spark_reader.py::test_a") == "spark-session"
    assert scope_of("tests/integration/test_spark_export.py::test_b[x]") == "spark-session"
    assert scope_of("tests/unit/test_x.py::TestY::test_z") == "tests/unit/test_x.py"


def test_the_queue_hands_out_the_heaviest_unit_first() -> None:
    weights = {"a": 1.0, "b": 30.0, "c": 5.0}
    queue = _HeaviestFirst(lambda scope, tests: weights[scope])
    for scope in ("a", "b", "c"):
        queue[scope] = {f"{scope}::t": False}
    assert [queue.popitem(last=False)[0] for _ in range(3)] == ["b", "c", "a"]
    assert not queue
