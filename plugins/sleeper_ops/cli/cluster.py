"""``sleeper cluster``: the standing Spark cluster and the Spark service, until Ctrl-C.

Starts, as separate processes (:mod:`sleeper_ops.spark.cluster`), a Spark standalone
master, its workers and the Sleeper Spark service, prints where each is and the
``[spark]`` settings that send bulk imports and Spark compactions to them, and stops
them all on Ctrl-C. Not started yet (issue 20): Airflow with the CeleryExecutor, Redis,
the moto server.
"""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.option("--workers", default=2, show_default=True, help="Spark workers.")
@click.option("--cores", default=1, show_default=True, help="Cores of each worker.")
@click.option("--memory", default="2g", show_default=True, help="Memory of each worker.")
@click.option("--master-port", default=7077, show_default=True, help="The Spark master's port (0: any free one).")
@click.option("--service-port", default=8998, show_default=True, help="The Spark service's port (0: any free one).")
@click.option("--max-jobs", default=2, show_default=True, help="Jobs the service runs at once.")
@click.option("--work-dir", default=None, type=click.Path(file_okay=False),
              help="Logs and worker directories (default: SLEEPER_HOME/cluster).")
@click.pass_context
def cluster(ctx: click.Context, workers: int, cores: int, memory: str, master_port: int, service_port: int,
            max_jobs: int, work_dir: str | None) -> None:
    """Run a Spark standalone cluster and the Sleeper Spark service until Ctrl-C."""
    from sleeper_ops.spark.cluster import free_port, standing_cluster, wait_until_stopped

    work = Path(work_dir) if work_dir else Path(ctx.obj["home"]) / "cluster"
    click.echo(f"starting a Spark master, {workers} workers and the Spark service (logs in {work}) ...")
    with standing_cluster(work, workers=workers, cores=cores, memory=memory, max_jobs=max_jobs,
                          master_port=master_port or free_port(), service_port=service_port) as c:
        for line in c.describe():
            click.echo(f"  {line}")
        click.echo("send bulk imports and Spark compactions here with, in sleeper.toml:\n"
                   f"  [spark]\n  master = \"{c.master}\"\n  service = \"{c.service}\"\n"
                   f"or the Airflow connection's extra: {{\"spark_master\": \"{c.master}\", "
                   f"\"spark_service\": \"{c.service}\"}}\n"
                   "not started yet: Airflow (CeleryExecutor), Redis, moto. Ctrl-C stops it all.")
        why = wait_until_stopped(c)
        click.echo(f"{why}: stopping the cluster")
