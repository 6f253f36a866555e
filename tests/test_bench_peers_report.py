"""``bench/peers.py`` checks every result by content: rows hash alike whatever their order
and string layout, a system that returns other rows is named, no ratio is printed and the
report's exit status is 1."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow as pa
import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_peers_report_test_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


rows = _load("_rows")
peers_report = _load("_peers_report")


def _table(keys: list[str], string_type: pa.DataType = pa.string()) -> pa.Table:
    return pa.table({"key": pa.array(keys, string_type), "timestamp": pa.array(range(len(keys)), pa.int64()),
                     "value1": pa.array(["v"] * len(keys), string_type),
                     "value2": pa.array(["w"] * len(keys), string_type)})


def test_rows_hash_alike_in_any_order_and_string_layout_and_differ_when_a_row_differs() -> None:
    a = _table(["a", "b", "c"])
    shuffled = a.take([2, 0, 1]).cast(pa.schema([("key", pa.string_view()), ("timestamp", pa.int64()),
                                                  ("value1", pa.large_string()), ("value2", pa.string())]))
    assert rows.rows_digest(shuffled) == rows.rows_digest(a)
    assert rows.rows_digest(_table(["a", "b", "d"])) != rows.rows_digest(a)
    assert rows.rows_digest(_table(["a", "b"])) != rows.rows_digest(a)


def _result(system: str, method: str, api: str, digests: list[str]) -> dict[str, Any]:
    answers = {"ms": [1.0] * len(digests), "rows": [1] * len(digests), "digest": digests}
    return {"system": system, "method": method, "api": api, "run": 0, "loads": [1.0], "maintain": 1.0,
            "files": 1, "group_rows": 2048, "exact": answers, "range": answers}


def _results(peer_digests: list[str]) -> list[dict[str, Any]]:
    return [_result("ours", "query runner", "native", ["x", "y"]), _result("ours", "Sleeper.sql", "SQL", ["x", "y"]),
            _result("delta-rs", "z-order", "SQL", peer_digests)]


def test_report_prints_ratios_and_exits_0_when_every_result_matches(capsys: pytest.CaptureFixture[str]) -> None:
    assert peers_report.report(_results(["x", "y"]), {}, 1000, 1, 1) == 0
    out = capsys.readouterr().out
    assert "MISMATCH" not in out and re.search(r"\| delta-rs best \| 1\.00 \|", out)


def test_report_names_a_mismatch_prints_no_ratio_and_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert peers_report.report(_results(["x", "other"]), {}, 1000, 1, 1) == 1
    out = capsys.readouterr().out
    assert "MISMATCH: delta-rs / z-order / SQL (run 1): 1 of 2 exact queries returned other rows than ours" in out
    assert "no ratios" in out and "ratios peer best / ours" not in out
