"""``sleeper cluster``: the scaled-out shape on this machine, until Ctrl-C.

Starts (:mod:`sleeper_ops.cluster.run`), as separate processes: Redis, one moto server
(S3 and DynamoDB), the embedded PostgreSQL, Airflow with the CeleryExecutor (scheduler,
DAG processor, triggerer, API server, two Celery workers) and the standing Spark
cluster (master, 2 workers, the Spark service); prints where each is, how to reach it
from the CLI, and stops it all on Ctrl-C.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import click


@click.command()
@click.option("--state-store", type=click.Choice(["dynamodb", "postgres"]), default="dynamodb", show_default=True,
              help="dynamodb: S3 and DynamoDB on one moto server; postgres: the embedded PostgreSQL and S3 on moto.")
@click.option("--port", default=8080, show_default=True, help="The Airflow API server's port (0: any free one).")
@click.option("--spark/--no-spark", default=True, show_default=True,
              help="Start the standing Spark cluster (master, 2 workers, the Spark service).")
@click.option("--spark-memory", default="1g", show_default=True, help="Memory of each Spark worker.")
@click.option("--work-dir", default=None, type=click.Path(file_okay=False),
              help="The processes' folders and logs (default: SLEEPER_HOME/cluster).")
@click.option("--timeout", default=300.0, show_default=True, help="Seconds to wait for everything to be ready.")
@click.pass_context
def cluster(ctx: click.Context, state_store: str, port: int, spark: bool, spark_memory: str,
            work_dir: Optional[str], timeout: float) -> None:
    """Run Airflow (CeleryExecutor, 2 workers), Redis, S3 and DynamoDB (moto) or PostgreSQL,
    and a standing Spark cluster until Ctrl-C."""
    from sleeper_ops.cluster.report import ready_lines, until_stopped
    from sleeper_ops.cluster.run import running_cluster
    from sleeper_ops.spark.cluster import free_port

    work = Path(work_dir) if work_dir else Path(ctx.obj["home"]) / "cluster"
    click.echo(f"starting the cluster ({state_store} state store) in {work} ...")
    with until_stopped() as stopped, running_cluster(work, state_store=state_store, api_port=port or free_port(),
                                                     spark=spark, spark_memory=spark_memory, timeout=timeout) as c:
        for line in ready_lines(c):
            click.echo(line)
        why = stopped(c)
    killed = f" (killed after the grace period: {', '.join(c.killed)})" if c.killed else ""
    click.echo(f"{why}: stopped the cluster{killed}")
