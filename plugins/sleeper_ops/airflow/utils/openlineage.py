"""OpenLineage of the Sleeper operators (``get_openlineage_facets_on_complete``).

Each operator notes, while it runs, what it read and wrote (:class:`TaskLineage`,
built by :func:`note` with the Sleeper it used); the OpenLineage listener then asks
for the facets and gets:

* the table as a dataset: namespace ``sleeper://<instance id>`` (the state store's own
  id, :func:`sleeper_ops.instance.namespace`: the same from the CLI, ``sleeper
  airflow``, the cluster's workers and a scheduled run, never credentials, never a
  parsed DSN), name the table, with a ``schema`` facet of the Sleeper schema's fields;
* what each kind of work reads and writes, in the user's terms, never the table's
  internal Parquet files: compaction, split, garbage collection and flush read and
  write the table; ingest (standard, batcher) and bulk import read the user's source
  files and write the table; export reads the table and writes the user's destination
  (the directory or ``s3://`` prefix it was given, one dataset);
* user files as datasets of their own: ``file`` namespace and the absolute path for
  local files, ``s3://<bucket>`` and the key for S3 objects;
* on the table output, an ``outputStatistics`` facet: ``rowCount`` (records
  committed) and ``size`` (bytes, when known), and ``fileCount``;
* for imports and exports, whose columns map one to one, a ``columnLineage`` facet on
  each output: every output field comes unchanged (``IDENTITY``) from the same-named
  field of each input dataset.

Lineage never breaks a task: a state store that cannot give its instance id is logged
in one line and the task's lineage names only the user's files (no Sleeper dataset is
invented in its place). Without the OpenLineage provider installed nothing here is
imported.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Sequence

if TYPE_CHECKING:
    from sleeper_ops.api import Sleeper

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TaskLineage:
    """What one task read and wrote (see the module docstring). ``namespace`` is None
    when the state store could not give its id (then no table dataset is reported)."""

    namespace: Optional[str]
    table: str
    fields: tuple[tuple[str, str], ...]
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    reads_table: bool = False
    writes_table: bool = True
    column_lineage: bool = False
    rows: Optional[int] = None
    files: Optional[int] = None
    size: Optional[int] = None


def _type_name(t: Any) -> str:
    return t if isinstance(t, str) else next(iter(t)) if isinstance(t, dict) and t else str(t)


def table_namespace(sleeper: Sleeper) -> Optional[str]:
    """``sleeper://<instance id>`` of ``sleeper``'s state store, or None (logged in one
    line) when the store cannot give it."""
    from sleeper_ops.instance import namespace

    try:
        return namespace(sleeper.state_store, sleeper.config)
    except Exception as e:
        log.warning("OpenLineage: no Sleeper dataset in this task's lineage, the state store gave no instance id: %s",
                    str(e).splitlines()[0] if str(e) else type(e).__name__)
        return None


def note(sleeper: Sleeper, table: str, *, inputs: Sequence[str] = (), outputs: Sequence[str] = (),
         reads_table: bool = False, writes_table: bool = True, column_lineage: bool = False,
         rows: Optional[int] = None, files: Optional[int] = None, size: Optional[int] = None) -> TaskLineage:
    """The lineage of a task on ``table`` of ``sleeper`` (see :class:`TaskLineage`):
    ``inputs`` and ``outputs`` are the user's files (never the table's own)."""
    t = sleeper.table(table)
    schema = t.schema.to_dict()
    fields = tuple((f["name"], _type_name(f["type"])) for kind in ("rowKeyFields", "sortKeyFields", "valueFields")
                   for f in schema.get(kind, []))
    return TaskLineage(table_namespace(sleeper), table, fields, tuple(inputs), tuple(outputs), reads_table,
                       writes_table, column_lineage, rows, files, size)


def file_dataset(path: str) -> Any:
    """A user's file (or directory) as an OpenLineage dataset (``file`` or ``s3://bucket``)."""
    from airflow.providers.common.compat.openlineage.facet import Dataset

    if path.startswith("s3://"):
        bucket, _, key = path[len("s3://"):].partition("/")
        return Dataset(namespace=f"s3://{bucket}", name=key or "/")
    return Dataset(namespace="file", name=os.path.abspath(path))


def _column_lineage(fields: Sequence[str], sources: Sequence[Any]) -> Any:
    """Each of ``fields`` from the same-named field of each of ``sources``, unchanged."""
    from airflow.providers.common.compat.openlineage.facet import ColumnLineageDatasetFacet, Fields, InputField

    return ColumnLineageDatasetFacet(fields={
        name: Fields(inputFields=[InputField(namespace=s.namespace, name=s.name, field=name) for s in sources],
                     transformationType="IDENTITY", transformationDescription="copied unchanged")
        for name in fields})


def operator_lineage(lineage: Optional[TaskLineage]) -> Any:
    """The ``OperatorLineage`` of a task (empty when it noted nothing, e.g. skipped)."""
    from airflow.providers.common.compat.openlineage.facet import (
        Dataset,
        OutputDataset,
        OutputStatisticsOutputDatasetFacet,
        SchemaDatasetFacet,
        SchemaDatasetFacetFields,
    )
    from airflow.providers.openlineage.extractors import OperatorLineage

    if lineage is None:
        return OperatorLineage()
    schema = SchemaDatasetFacet(fields=[SchemaDatasetFacetFields(name=n, type=t) for n, t in lineage.fields])
    names = [n for n, _ in lineage.fields]
    inputs = [file_dataset(p) for p in lineage.inputs]
    if lineage.reads_table and lineage.namespace is not None:
        inputs.append(Dataset(namespace=lineage.namespace, name=lineage.table, facets={"schema": schema}))
    facets: dict[str, Any] = {"schema": schema}
    outputs: list[Any] = []
    if lineage.column_lineage and inputs:
        facets["columnLineage"] = _column_lineage(names, inputs)
    if lineage.writes_table and lineage.namespace is not None:
        output_facets: dict[str, Any] = {}
        if lineage.rows is not None:
            output_facets["outputStatistics"] = OutputStatisticsOutputDatasetFacet(
                rowCount=lineage.rows, size=lineage.size, fileCount=lineage.files)
        outputs.append(OutputDataset(namespace=lineage.namespace, name=lineage.table, facets=facets,
                                     outputFacets=output_facets))
    for path in lineage.outputs:
        d = file_dataset(path)
        outputs.append(OutputDataset(namespace=d.namespace, name=d.name, facets=facets))
    return OperatorLineage(inputs=inputs, outputs=outputs)


def jobs_lineage(sleeper: Sleeper, table: str, jobs: Sequence[Any]) -> TaskLineage:
    """The lineage of compaction ``jobs`` (:class:`~sleeper_ops.compaction.jobs.CompactionJob`):
    the table read and written (not its files), the records their committed records say
    were written (one file per committed job)."""
    t = sleeper.table(table)
    records = [sleeper.state_store.get_job(t.info.table_id, j.job_id) for j in jobs]
    done = [r for r in records if r is not None and r.status == "committed"]
    return note(sleeper, table, reads_table=True, rows=sum(r.rows_written for r in done), files=len(done))


def compaction_lineage(t: Any, report: Any) -> TaskLineage:
    """The lineage of a one-task compaction run (its :class:`CompactionReport`)."""
    return jobs_lineage(t.sleeper, t.name, [r.job for r in report.results])


def spark_lineage_conf(context: Any) -> dict[str, str]:
    """The Spark properties a Sleeper Spark job gets so its own OpenLineage events name
    this task as their parent and reach the same transport: what the apache-spark
    provider's ``SparkSubmitOperator`` injects, under the same switches
    (``[openlineage] spark_inject_parent_job_info`` and ``spark_inject_transport_info``,
    both off by default)."""
    from airflow.providers.common.compat.openlineage.utils.spark import (
        inject_parent_job_information_into_spark_properties,
        inject_transport_information_into_spark_properties,
    )
    from airflow.providers.common.compat.sdk import conf

    props: dict[str, str] = {}
    if conf.getboolean("openlineage", "spark_inject_parent_job_info", fallback=False):
        props = inject_parent_job_information_into_spark_properties(props, context)
    if conf.getboolean("openlineage", "spark_inject_transport_info", fallback=False):
        props = inject_transport_information_into_spark_properties(props, context)
    return props
