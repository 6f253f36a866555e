"""The Prometheus exposition of ``GET /metrics``: each metric typed for what it is.

A counter only for a value that never goes down (Prometheus' ``rate``/``increase`` take a
drop for a restart); a figure read from a bounded window of records is a gauge, and a
gauge carries no ``_total`` suffix."""

from __future__ import annotations

from dataclasses import fields

from prometheus_client.parser import text_string_to_metric_families

from sleeper_ops.metrics import TableMetrics
from sleeper_ops.web.metrics import METRICS, render

#: the only figures that never go down (commits retried by this process since it started)
COUNTERS = {"sleeper_commit_retries"}


def figures(value: int) -> TableMetrics:
    return TableMetrics(**{f.name: value for f in fields(TableMetrics)})


def families() -> dict[str, str]:
    text = render({"events": figures(3)}).decode()
    return {f.name: f.type for f in text_string_to_metric_families(text)}


def test_only_figures_that_never_go_down_are_counters() -> None:
    typed = families()
    assert {name for name, kind in typed.items() if kind == "counter"} == COUNTERS
    assert all(kind == "gauge" for name, kind in typed.items() if name not in COUNTERS), typed
    assert set(typed) == {name for name, _, _ in METRICS.values()}  # every field of TableMetrics exposed


def test_failed_jobs_among_the_newest_records_are_a_gauge_named_for_what_it_counts() -> None:
    text = render({"events": figures(3)}).decode()
    assert "# TYPE sleeper_recent_jobs_failed gauge" in text
    assert 'sleeper_recent_jobs_failed{table="events"} 3.0' in text
    assert "sleeper_jobs_failed_total" not in text  # a counter's name on a figure that can go down: gone
    assert not any(line.startswith("sleeper_") and "_total" in line.split("{")[0]
                   for line in text.splitlines() if "commit_retries" not in line)
