"""What a DAG file's parse and a task process import: each parse is a new process every
cycle, so the Spark provider's ``SparkSubmitOperator`` (OpenLineage's client with it, about
half a second of CPU) is imported only where the compaction batch's operator is used: its
module, :mod:`sleeper_ops.airflow.operators.spark_compaction`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SPARK_SUBMIT = "airflow.providers.apache.spark.operators.spark_submit"
DAGS = Path(__file__).resolve().parents[3] / "dags"


def _run(code: str) -> str:
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def test_only_the_spark_compaction_module_imports_the_spark_provider() -> None:
    out = _run(f"""
import sys
from sleeper_ops.airflow.operators import base, bulk_import, compaction, emr, export, ingest, maintenance
print({SPARK_SUBMIT!r} in sys.modules)
from sleeper_ops.airflow.operators.spark_compaction import SleeperSparkCompactionOperator
from {SPARK_SUBMIT} import SparkSubmitOperator
print(issubclass(SleeperSparkCompactionOperator, SparkSubmitOperator))
""")
    assert out.splitlines() == ["False", "True"]


def test_the_dag_processor_parses_the_operation_files_and_not_the_package_marker() -> None:
    from airflow.utils.file import might_contain_dag_via_default_heuristic

    assert not might_contain_dag_via_default_heuristic(str(DAGS / "__init__.py"))
    ops = sorted(p.name for p in DAGS.glob("sleeper_*.py"))
    assert len(ops) == 7 and all(might_contain_dag_via_default_heuristic(str(DAGS / f)) for f in ops), ops
