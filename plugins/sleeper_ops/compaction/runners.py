"""Compaction of a table: create jobs, run them with the table's runner, commit.

:func:`compact_table` is what the CLI, the Python API and the Airflow DAG call. It
creates jobs (:mod:`sleeper_ops.compaction.jobs`: push-down, retries of stale jobs,
the strategy, one assignment commit) and runs them:

* runner ``local``: in this process, at most ``max_workers`` jobs at a time in
  threads (DataFusion and Parquet encoding release the GIL);
* runner ``spark``: the whole batch in one ``spark-submit`` of
  ``spark_apps/compaction.py``, one job a Spark task (:mod:`sleeper_ops.spark`), so
  Spark's start-up is paid once a batch. The core never imports the Spark adapter: it
  is named in :data:`BATCH_RUNNERS` and imported by :func:`load_batch_runner` when used.

Every job commits on its own; a failed job leaves its inputs assigned, and a later
run retries it once it is stale. Offline tables are skipped.
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from sleeper_ops.compaction.execute import JobResult, run_job
from sleeper_ops.compaction.jobs import CompactionJob, JobCreation, create_compaction_jobs
from sleeper_ops.engine.iterators import BatchFn, IteratorChain
from sleeper_ops.errors import ConfigError
from sleeper_ops.io.storage import ObjectStore
from statestore.catalog import TableInfo
from statestore.properties import COMPACTION_RUNNER
from statestore.store import StateStore

if TYPE_CHECKING:
    from sleeper_ops.config import SleeperConfig

RUNNERS = ("local", "spark")

#: Runs a batch of one table's assigned jobs elsewhere; one result per job, in order.
BatchRunner = Callable[[TableInfo, list[CompactionJob]], list[JobResult]]
#: Builds a :data:`BatchRunner` from ``(config, state_store, run_id)``.
BatchRunnerFactory = Callable[["SleeperConfig", StateStore, Optional[str]], BatchRunner]
#: Runners that run a batch outside this process, as ``module:factory``, imported when used.
BATCH_RUNNERS: dict[str, str] = {"spark": "sleeper_ops.spark.submit:batch_runner"}


def load_batch_runner(name: str) -> BatchRunnerFactory:
    """The factory of the batch runner ``name`` (see :data:`BATCH_RUNNERS`), imported now.

    Raises ConfigError for an unknown name or when the runner's packages are missing."""
    try:
        module_name, factory = BATCH_RUNNERS[name].split(":")
    except KeyError:
        raise ConfigError(
            f"unknown batch runner {name!r}; expected one of {', '.join(sorted(BATCH_RUNNERS))}") from None
    try:
        module: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"the {name} runner cannot be loaded: {e}") from e
    loaded: BatchRunnerFactory = getattr(module, factory)
    return loaded


@dataclass
class CompactionReport:
    """What one compaction run of a table did."""

    table: str
    runner: str
    creation: JobCreation
    results: list[JobResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def skipped_reason(self) -> Optional[str]:
        return self.creation.skipped_reason

    def count(self, status: str) -> int:
        return sum(1 for r in self.results if r.status == status)

    @property
    def rows_read(self) -> int:
        return sum(r.rows_read for r in self.results)

    @property
    def rows_written(self) -> int:
        return sum(r.rows_written for r in self.results)

    def summary(self) -> str:
        if self.skipped_reason:
            return f"{self.table}: compaction skipped ({self.skipped_reason})"
        if self.creation.nothing_to_do:
            return "\n".join([f"{self.table}: 0 compaction jobs: {self.creation.nothing_reason()}",
                              *self.creation.waiting_lines()])
        rate = self.rows_read / self.seconds if self.seconds > 0 else 0.0
        text = (f"{self.table}: {len(self.results)} compaction jobs ({self.creation.new} new, "
                f"{self.creation.retried} retried) on runner {self.runner}: {self.count('committed')} committed, "
                f"{self.count('refused')} refused, {self.count('failed')} failed; {self.rows_read:,} rows read, "
                f"{self.rows_written:,} written in {self.seconds:.1f} s ({rate:,.0f} rows/s); "
                f"{self.creation.pushed_down} references pushed down")
        for r in self.results:
            if r.status != "committed":
                text += f"\n  job {r.job.job_id} {r.status}: {r.reason}"
        return "\n".join([text, *self.creation.waiting_lines()])


def run_local(state_store: StateStore, objects: ObjectStore, table: TableInfo, jobs: Sequence[CompactionJob], *,
              iterators: Sequence[BatchFn] = (), run_id: Optional[str] = None, max_workers: Optional[int] = None,
              progress: Optional[Callable[[int], None]] = None, python_modules: Sequence[str] = ()
              ) -> list[JobResult]:
    """Run ``jobs`` in this process, at most ``max_workers`` (default: cores) at once;
    ``python_modules``: where the table's Python iterator may come from."""
    if not jobs:
        return []
    workers = max(1, min(len(jobs), max_workers or os.cpu_count() or 1))
    lock = threading.Lock()
    # Partial-file jobs filter to their partition: read the partitions once for all of them.
    regions = ({p.id: p.region for p in state_store.partitions(table.table_id)}
               if any(not j.whole_files for j in jobs) else {})

    def on_rows(n: int) -> None:
        if progress is not None:
            with lock:
                progress(n)

    def one(job: CompactionJob) -> JobResult:
        return run_job(state_store, objects, table, job, region=regions.get(job.partition_id), iterators=iterators,
                       run_id=run_id, on_rows=on_rows, python_modules=python_modules)

    if workers == 1:
        return [one(j) for j in jobs]
    with ThreadPoolExecutor(workers, thread_name_prefix="compaction") as pool:
        return list(pool.map(one, jobs))


def compact_table(state_store: StateStore, objects: ObjectStore, table: TableInfo, *,
                  runner: Optional[str] = None, iterators: Sequence[BatchFn] = (), run_id: Optional[str] = None,
                  max_workers: Optional[int] = None, retry_after_minutes: Optional[float] = None,
                  progress: Optional[Callable[[int], None]] = None,
                  on_jobs: Optional[Callable[[JobCreation], None]] = None,
                  spark: Optional[BatchRunner] = None, python_modules: Sequence[str] = (),
                  ) -> CompactionReport:
    """Create and run the table's compaction jobs (see the module docstring).

    ``runner`` defaults to the table's ``sleeper.table.compaction.runner``. ``on_jobs``
    is told what was created before any job runs (e.g. to size a progress bar).
    ``spark`` runs a batch on Spark; required for the spark runner (the API passes
    one bound to the configuration). ``python_modules``: the deployment's
    ``iterators.python_modules``; the table's iterators are built first, so one that
    cannot be (e.g. a Python iterator from a module outside the list, never imported)
    raises ConfigError naming the table before any job is created.
    """
    runner = runner or table.get(COMPACTION_RUNNER) or "local"
    if runner not in RUNNERS:
        raise ConfigError(f"unknown compaction runner {runner!r}: expected one of {', '.join(RUNNERS)}")
    if runner == "spark" and iterators:
        raise ConfigError("the spark runner takes iterators from table properties only, not Python callables")
    if table.online:  # an offline table is skipped whatever its iterators
        # the table's iterators build here or nowhere: a bad one fails this table's run in
        # one line, before any job is created or assigned
        IteratorChain.for_table(table, iterators, python_modules=python_modules)
    started = time.perf_counter()
    creation = create_compaction_jobs(state_store, table, run_id=run_id, retry_after_minutes=retry_after_minutes,
                                      objects=objects)
    report = CompactionReport(table.name, runner, creation)
    if on_jobs is not None:
        on_jobs(creation)
    if creation.jobs:
        if runner == "local":
            report.results = run_local(state_store, objects, table, creation.jobs, iterators=iterators,
                                       run_id=run_id, max_workers=max_workers, progress=progress,
                                       python_modules=python_modules)
        else:
            if spark is None:
                raise ConfigError("the spark runner needs a Spark configuration (use Sleeper.table(...).compact)")
            report.results = spark(table, creation.jobs)
    report.seconds = time.perf_counter() - started
    return report
