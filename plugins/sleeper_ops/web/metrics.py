"""The figures of ``GET /metrics`` (:mod:`sleeper_ops.web.routes.metrics`): every readable
table's figures (:mod:`sleeper_ops.metrics`) in the Prometheus text format, one sample per
table labelled ``table``.

A metric is a counter only when its value never goes down (Prometheus' ``rate`` and
``increase`` read a drop as a restart): here only the commit retries, counted by this
process since it started. Every other figure, including those counted within a bounded
window of records, is a gauge, and no gauge carries a counter's ``_total`` suffix.

=================================  =====================================================
sleeper_records                    records in the table's files (not the buffer)
sleeper_records_approximate        1 when sleeper_records includes estimated counts, else 0 (exact)
sleeper_files                      tracked files (referenced or awaiting GC)
sleeper_leaf_partitions            leaf partitions
sleeper_leaf_files_max             the most file references on one leaf partition
sleeper_buffer_records             records in the write buffer
sleeper_buffer_oldest_seconds      age of the oldest buffered write (0: empty)
sleeper_ingest_requests_pending    queued ingest requests no job has taken
sleeper_compaction_jobs_pending    compaction jobs created, started or finished, not committed
sleeper_recent_jobs_failed         failed jobs among the newest job records (a gauge: it goes
                                   down as newer records push failures out of the window)
sleeper_gc_files_pending           files with no reference, awaiting garbage collection
sleeper_commit_retries_total       commits tried again, in this server process since it started
=================================  =====================================================
"""

from __future__ import annotations

from typing import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sleeper_ops.metrics import TableMetrics

#: field of TableMetrics -> (metric name, help, is a counter)
METRICS: dict[str, tuple[str, str, bool]] = {
    "records": ("sleeper_records", "Records in the table's files", False),
    "records_approximate": ("sleeper_records_approximate",
                            "1 when sleeper_records includes estimated counts (files of split partitions not yet "
                            "compacted), else 0", False),
    "files": ("sleeper_files", "Tracked files, referenced or awaiting garbage collection", False),
    "leaf_partitions": ("sleeper_leaf_partitions", "Leaf partitions", False),
    "leaf_files_max": ("sleeper_leaf_files_max", "The most file references on one leaf partition", False),
    "buffer_records": ("sleeper_buffer_records", "Records in the write buffer", False),
    "buffer_oldest_seconds": ("sleeper_buffer_oldest_seconds", "Age of the oldest buffered write", False),
    "ingest_requests_pending": ("sleeper_ingest_requests_pending", "Ingest requests no job has taken", False),
    "compaction_jobs_pending": ("sleeper_compaction_jobs_pending", "Compaction jobs not yet committed", False),
    "jobs_failed": ("sleeper_recent_jobs_failed", "Failed jobs among the newest 10,000 job records of the table",
                    False),
    "gc_files_pending": ("sleeper_gc_files_pending", "Files awaiting garbage collection", False),
    "commit_retries": ("sleeper_commit_retries", "Commits tried again by this process since it started", True),
}


class _TablesCollector(Collector):
    def __init__(self, figures: dict[str, TableMetrics]) -> None:
        self.figures = figures

    def collect(self) -> Iterator[Metric]:
        for field, (name, text, counter) in METRICS.items():
            family: Metric = (CounterMetricFamily(name, text, labels=["table"]) if counter
                              else GaugeMetricFamily(name, text, labels=["table"]))
            for table, m in self.figures.items():
                family.add_metric([table], float(getattr(m, field)))  # type: ignore[attr-defined]
            yield family


def render(figures: dict[str, TableMetrics]) -> bytes:
    """The Prometheus text exposition of the tables' figures."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_TablesCollector(figures))
    return generate_latest(registry)
