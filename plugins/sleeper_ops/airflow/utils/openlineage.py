"""OpenLineage of the Sleeper operators (``get_openlineage_facets_on_complete``).

Each operator notes, while it runs, what it read and wrote (:class:`TaskLineage`,
built by :func:`note` with the Sleeper it used); the OpenLineage listener then asks
for the facets and gets:

* the table as a dataset: namespace ``sleeper://<instance>`` (the state store's
  identity, :func:`sleeper_ops.instance.instance_of`: never credentials), name the
  table, with a ``schema`` facet of the Sleeper schema's fields. It is an output of
  every operator, and also an input of those that rewrite what is there (compaction,
  split, garbage collection, flush);
* the files read as datasets of their own: ``file`` namespace and the absolute path
  for local files, ``s3://<bucket>`` and the key for S3 objects;
* on the table output, an ``outputStatistics`` facet: ``rowCount`` (records
  committed) and ``size`` (bytes, when known), and ``fileCount``.

Without the OpenLineage provider installed nothing here is imported.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Sequence

if TYPE_CHECKING:
    from sleeper_ops.api import Sleeper


@dataclass(frozen=True)
class TaskLineage:
    """What one task read and wrote (see the module docstring)."""

    namespace: str
    table: str
    fields: tuple[tuple[str, str], ...]
    inputs: tuple[str, ...] = ()
    reads_table: bool = False
    rows: Optional[int] = None
    files: Optional[int] = None
    size: Optional[int] = None


def _type_name(t: Any) -> str:
    return t if isinstance(t, str) else next(iter(t)) if isinstance(t, dict) and t else str(t)


def note(sleeper: Sleeper, table: str, *, inputs: Sequence[str] = (), reads_table: bool = False,
         rows: Optional[int] = None, files: Optional[int] = None, size: Optional[int] = None) -> TaskLineage:
    """The lineage of a task on ``table`` of ``sleeper`` (see :class:`TaskLineage`)."""
    from sleeper_ops.instance import instance_of

    t = sleeper.table(table)
    schema = t.schema.to_dict()
    fields = tuple((f["name"], _type_name(f["type"])) for kind in ("rowKeyFields", "sortKeyFields", "valueFields")
                   for f in schema.get(kind, []))
    ns = f"sleeper://{instance_of(sleeper.config)}" if sleeper.config is not None else "sleeper://local"
    return TaskLineage(ns, table, fields, tuple(inputs), reads_table, rows, files, size)


def file_dataset(path: str) -> Any:
    """An input file as an OpenLineage dataset (``file`` or ``s3://bucket``)."""
    from airflow.providers.common.compat.openlineage.facet import Dataset

    if path.startswith("s3://"):
        bucket, _, key = path[len("s3://"):].partition("/")
        return Dataset(namespace=f"s3://{bucket}", name=key or "/")
    return Dataset(namespace="file", name=os.path.abspath(path))


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
    output_facets: dict[str, Any] = {}
    if lineage.rows is not None:
        output_facets["outputStatistics"] = OutputStatisticsOutputDatasetFacet(
            rowCount=lineage.rows, size=lineage.size, fileCount=lineage.files)
    table_out = OutputDataset(namespace=lineage.namespace, name=lineage.table, facets={"schema": schema},
                        outputFacets=output_facets)
    inputs = [file_dataset(p) for p in lineage.inputs]
    if lineage.reads_table:
        inputs.append(Dataset(namespace=lineage.namespace, name=lineage.table, facets={"schema": schema}))
    return OperatorLineage(inputs=inputs, outputs=[table_out])


def jobs_lineage(sleeper: Sleeper, table: str, jobs: Sequence[Any]) -> TaskLineage:
    """The lineage of compaction ``jobs`` (:class:`~sleeper_ops.compaction.jobs.CompactionJob`):
    their input files read, the table read and written, the records their committed
    records say were written (one file per committed job)."""
    t = sleeper.table(table)
    records = [sleeper.state_store.get_job(t.info.table_id, j.job_id) for j in jobs]
    done = [r for r in records if r is not None and r.status == "committed"]
    return note(sleeper, table, inputs=[sleeper.objects.uri_of(f) for j in jobs for f in j.inputs], reads_table=True,
                rows=sum(r.rows_written for r in done), files=len(done))


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
