"""The ``sleeper`` command: argument parsing and printing only; logic lives in the API.

Errors from bad input exit 1 with a one-line ``error: ...`` message on stderr; a write
refused because the table's buffer is full exits 75; `report erasure` exits 3 while records remain.
"""

from __future__ import annotations

import json
import sys
from gc import freeze as freeze_objects
from pathlib import Path
from typing import Any, Optional

import click

from sleeper_ops.cli.lazy import LazyGroup
from sleeper_ops.cli.run_ids import process_gone, run_id_of
from sleeper_ops.cli.selection import AS_OF, as_of_value, parse_selection, say_as_of
from sleeper_ops.cli.support import REQUEST_ID, unknown_outcome_hint
from sleeper_ops.cli.support import open_sleeper as _sleeper
from statestore.errors import BufferFullError, SleeperError, StateStoreUnavailableError

#: the exit code of a write refused because the buffer is full (EX_TEMPFAIL: try again later)
EXIT_BUFFER_FULL = 75
#: the exit code of ``report erasure`` while some object still holds matching records
EXIT_NOT_ERASED = 3


#: commands in modules of their own, imported only when run (or listed by --help)
LAZY_SUBCOMMANDS = {"table": "sleeper_ops.cli.tables:table", "server": "sleeper_ops.cli.server:server",
                    "delete": "sleeper_ops.cli.deletes:delete", "export": "sleeper_ops.cli.export:export",
                    "cluster": "sleeper_ops.cli.cluster:cluster", "history": "sleeper_ops.cli.history:history"}


@click.group(cls=LazyGroup, lazy_subcommands=LAZY_SUBCOMMANDS)
@click.option("--home", envvar="SLEEPER_HOME", default=".sleeper", show_default=True,
              help="Directory holding sleeper.toml (env SLEEPER_HOME).")
@click.pass_context
def cli(ctx: click.Context, home: str) -> None:
    """Sleeper: sorted Parquet files in an LSM tree, kept by Airflow and Spark."""
    ctx.ensure_object(dict)
    ctx.obj["home"] = home



# ----- data ----------------------------------------------------------------------------
@cli.command()
@click.argument("table_name", metavar="TABLE")
@click.argument("files", nargs=-1, required=True)
@REQUEST_ID
@click.pass_context
def ingest(ctx: click.Context, table_name: str, files: tuple[str, ...], request_id: Optional[str]) -> None:
    """Ingest Parquet, CSV or JSON Lines FILES (local paths or s3:// URIs) in one commit.
    With --request-id the ID is kept with the files' names and sizes."""
    from sleeper_ops.cli.support import record_progress, request_id_of

    t = _sleeper(ctx).table(table_name)
    key = request_id_of(request_id, "ingest")
    with record_progress(f"ingest {table_name}") as progress:
        r = t.ingest(list(files), progress=progress, request_id=key)
    if r.repeat:
        click.echo(f"already ingested (a repeat of request id {key}): {r.records:,} records by job {r.job_id}; "
                   "nothing more stored")
        return
    click.echo(f"ingested {r.records:,} records into {len(r.files)} files in {r.seconds:.2f}s "
               f"({r.rows_per_second:,.0f} records/s)")


@cli.command()
@click.argument("table_name", metavar="TABLE")
@click.argument("files", nargs=-1, required=True)
@REQUEST_ID
@click.pass_context
def write(ctx: click.Context, table_name: str, files: tuple[str, ...], request_id: Optional[str]) -> None:
    """Write the records of Parquet, CSV or JSON Lines FILES into TABLE's write buffer,
    as one write: durable when this returns, all or nothing. A full buffer exits 75."""
    from sleeper_ops.cli.support import request_id_of

    r = _sleeper(ctx).table(table_name).write_files(list(files), request_id=request_id_of(request_id, "write"))
    click.echo(f"wrote {r.records:,} records to the buffer of {table_name} (sequence number {r.seq}) "
               f"in {r.seconds * 1000:.1f} ms")


@cli.command()
@click.argument("table_name", metavar="TABLE")
@click.pass_context
def flush(ctx: click.Context, table_name: str) -> None:
    """Write TABLE's buffered records as sorted files, exactly once (takes the flush lease)."""
    t, run_id = _sleeper(ctx).table(table_name), run_id_of("flush")
    with t.exclusive("flush", run_id, holder_gone=process_gone):
        r = t.flush(run_id=run_id)
    click.echo(r.summary())


@cli.command("bulk-import")
@click.argument("table_name", metavar="TABLE", required=False)
@click.argument("sources", nargs=-1)
@click.option("--import-key", default=None,
              help="Imports of the same key and sources add their records once; the key with other sources "
                   "is refused (default: a key of this invocation).")
@click.option("--package", "package", metavar="DEST", default=None,
              help="Instead of importing: put the EMR Serverless job's entry point, library (sleeper.zip) and "
                   "secret-free configuration under DEST (s3://bucket/prefix or a directory).")
@click.option("--environment", metavar="ARCHIVE", default=None,
              help="With --package: a venv-pack .tar.gz (Python 3.11 + libraries) to upload as environment.tar.gz.")
@click.pass_context
def bulk_import(ctx: click.Context, table_name: Optional[str], sources: tuple[str, ...], import_key: Optional[str],
                package: Optional[str], environment: Optional[str]) -> None:
    """Bulk import SOURCES (files, directories or globs; local or s3://) into TABLE on Spark, in one
    commit; or, with --package DEST, prepare EMR Serverless bulk imports (docs/deploy.md)."""
    if package is not None:
        if table_name is not None or sources or import_key is not None:
            raise click.UsageError("--package takes no TABLE, SOURCES or --import-key")
        from sleeper_ops.config import SleeperConfig
        from sleeper_ops.spark.emr_serverless import build_package

        for uri in build_package(package, SleeperConfig.load(ctx.obj["home"], create=False),
                                 environment=environment):
            click.echo(uri)
        if environment is None:
            click.echo(f"note: no --environment given: jobs expect {package.rstrip('/')}/environment.tar.gz "
                       "(docs/deploy.md says how to build it)", err=True)
        return
    if table_name is None or not sources:
        raise click.UsageError("give TABLE and SOURCES (or --package DEST)")
    from sleeper_ops.cli.support import request_id_of

    import_key = request_id_of(import_key, "bulk-import")  # one per invocation: a resubmission imports once
    t = _sleeper(ctx).table(table_name)
    done = t.already_imported(import_key, list(sources))
    if done is not None:  # said before Spark starts
        click.echo(done.summary())
        return
    if t.sleeper.config is not None:
        from sleeper_ops.bulk_import.runners import where_it_runs

        click.echo(f"bulk import into {table_name}: starting {where_it_runs(t.sleeper.config)}", err=True)
    r = t.bulk_import(list(sources), import_key=import_key)
    click.echo(r.summary())


@cli.command()
@click.argument("table_name", metavar="TABLE")
@click.option("--key", "keys", multiple=True, help="A key as JSON; several row key fields as a JSON array.")
@click.option("--range", "ranges", multiple=True, nargs=2, metavar="MIN MAX",
              help="[MIN, MAX) on the first row key field, as JSON; null at either end is unbounded.")
@click.option("--format", "fmt", type=click.Choice(["jsonl", "csv", "parquet"]), default="jsonl", show_default=True)
@click.option("--output", type=click.Path(dir_okay=False), help="Write to this file instead of stdout.")
@click.option("--no-buffer", is_flag=True, help="Skip records still in the write buffer (read files only).")
@AS_OF
@click.pass_context
def query(ctx: click.Context, table_name: str, keys: tuple[str, ...], ranges: tuple[tuple[str, str], ...],
          fmt: str, output: Optional[str], no_buffer: bool, as_of: Optional[str]) -> None:
    """Read records by exact key or key range (--as-of: as of an earlier transaction)."""
    if not keys and not ranges:
        raise click.UsageError("give at least one --key or --range")
    t = _sleeper(ctx).table(table_name)  # first: it imports pyarrow (cli.support.import_arrow)
    from sleeper_ops.io.codec import parse_key, parse_range
    from sleeper_ops.io.output import write_results

    ks = [parse_key(t.schema, k) for k in keys]
    rs = [parse_range(t.schema, lo, hi) for lo, hi in ranges]
    if fmt == "parquet" and not output:
        raise click.UsageError("--format parquet needs --output FILE")
    result = t.query(keys=ks, ranges=rs, buffer=not no_buffer, as_of=as_of_value(as_of))
    say_as_of(result)
    write_results(result, fmt, output)
    if output:
        click.echo(f"wrote {result.num_rows:,} records to {output}", err=True)


@cli.command()
@click.argument("statement")
@click.option("--format", "fmt", type=click.Choice(["jsonl", "csv", "parquet"]), default=None,
              help="Output format [default: jsonl; EXPLAIN prints its plans as text].")
@click.option("--output", type=click.Path(dir_okay=False), help="Write to this file instead of stdout.")
@AS_OF
@click.pass_context
def sql(ctx: click.Context, statement: str, fmt: Optional[str], output: Optional[str], as_of: Optional[str]) -> None:
    """Run a read-only SQL STATEMENT over the tables (DataFusion); EXPLAIN shows what each table's scan reads."""
    from sleeper_ops.io.output import write_results
    from sleeper_ops.query.sql_explain import is_explain, render_explain

    if fmt == "parquet" and not output:
        raise click.UsageError("--format parquet needs --output FILE")
    when = as_of_value(as_of)
    result = _sleeper(ctx).sql(statement, as_of=when)
    if when is not None:
        from sleeper_ops.query.as_of import BUFFER_NOTE

        click.echo(f"note: {BUFFER_NOTE}", err=True)
    if fmt is None and output is None and is_explain(result):
        click.echo(render_explain(result))
        return
    write_results(result, fmt or "jsonl", output)
    if output:
        click.echo(f"wrote {result.num_rows:,} rows to {output}", err=True)


@cli.command(no_args_is_help=True)
@click.argument("kind", type=click.Choice(["partitions", "files", "jobs", "erasure"]), metavar="KIND")
@click.argument("table_name", metavar="TABLE")
@click.option("--json", "as_json", is_flag=True)
@click.option("--limit", default=100, show_default=True, help="Most jobs to list (jobs report).")
@click.option("--key", "keys", multiple=True, help="Erasure report: a key as JSON.")
@click.option("--range", "ranges", multiple=True, nargs=2, metavar="MIN MAX",
              help="Erasure report: [MIN, MAX) on the first row key field, as JSON.")
@click.option("--where", default=None, metavar="PREDICATE", help="Erasure report: an SQL predicate on any fields.")
@click.pass_context
def report(ctx: click.Context, kind: str, table_name: str, as_json: bool, limit: int, keys: tuple[str, ...],
           ranges: tuple[tuple[str, str], ...], where: Optional[str]) -> None:
    """Report on TABLE; KIND is one of:

    \b
      partitions  the partition tree: each partition's range, files and records
      files       every file: its references (partition, records, job), or none
      jobs        the table's jobs, newest first (--limit of them)
      erasure     every place still holding records or keys of a --key or --range
                  (and --where): data files, untracked objects, buffer entries and
                  blobs, exports, the state store's own records, each with when it
                  goes; exits 3 until none does (docs/usage/deletes.md)

    --json prints the report as JSON."""
    from sleeper_ops import reports as rep

    t = _sleeper(ctx).table(table_name)
    if kind == "erasure":
        ks, rs = parse_selection(t, keys, ranges)
        erased = t.erasure_report(keys=ks, ranges=rs, where=where)
        click.echo(json.dumps(erased.to_dict()) if as_json else erased.render())
        if not erased.clean:
            sys.stdout.flush()
            raise SystemExit(EXIT_NOT_ERASED)
        return
    if kind == "jobs":
        jobs = t.jobs(limit=limit)
        click.echo(json.dumps(rep.jobs_report(jobs)) if as_json else rep.render_jobs(jobs))
        return
    state = t.state()
    if as_json:
        data = rep.partitions_report(state) if kind == "partitions" else rep.files_report(state)
        click.echo(json.dumps(data))
    else:
        click.echo(rep.render_partitions(state) if kind == "partitions" else rep.render_files(state))


@cli.command()
@click.argument("table_name", metavar="TABLE")
@click.option("--runner", type=click.Choice(["local", "spark"]), default=None,
              help="Where jobs run (default: the table's sleeper.table.compaction.runner).")
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Local runner: jobs at once.")
@click.pass_context
def compact(ctx: click.Context, table_name: str, runner: Optional[str], workers: Optional[int]) -> None:
    """Create compaction jobs for TABLE, run them and commit each (under the table's
    compaction lease, so it never overlaps a scheduled run)."""
    from sleeper_ops.cli.support import record_progress

    t = _sleeper(ctx).table(table_name)
    run_id = run_id_of("compact")
    with t.exclusive("compaction", run_id, holder_gone=process_gone), \
            record_progress(f"compact {table_name}") as progress:
        r = t.compact(runner, max_workers=workers, progress=progress, run_id=run_id)
    click.echo(r.summary())
    if r.count("failed"):
        sys.exit(3)


@cli.command()
@click.argument("table_name", metavar="TABLE")
@click.pass_context
def split(ctx: click.Context, table_name: str) -> None:
    """Split TABLE's leaf partitions that are over the splitting threshold."""
    t, run_id = _sleeper(ctx).table(table_name), run_id_of("split")
    with t.exclusive("split", run_id, holder_gone=process_gone):
        click.echo(t.split(run_id=run_id).summary())


@cli.command()
@click.argument("table_name", metavar="TABLE")
@click.option("--dry-run", is_flag=True, help="List what would be deleted; change nothing.")
@click.pass_context
def gc(ctx: click.Context, table_name: str, dry_run: bool) -> None:
    """Delete TABLE's unreferenced files (after the GC delay) and old orphaned objects."""
    t, run_id = _sleeper(ctx).table(table_name), run_id_of("gc")
    with t.exclusive("gc", run_id, holder_gone=process_gone):
        click.echo(t.gc(dry_run=dry_run, explain=True).summary())


@cli.command()
@click.option("--rows", default=10_000_000, show_default=True, help="Rows to generate and ingest.")
@click.option("--batches", default=5, show_default=True, help="Ingest in this many batches.")
@click.option("--table", "table_name", default="demo", show_default=True)
@click.pass_context
def demo(ctx: click.Context, rows: int, batches: int, table_name: str) -> None:
    """Run the whole pipeline on the embedded default."""
    from sleeper_ops.cli.demo import run_demo

    run_demo(_sleeper(ctx), rows=rows, batches=batches, table_name=table_name,
             work_dir=Path(ctx.obj["home"]) / "demo-input")


@cli.command("ingest-request")
@click.argument("table_name", metavar="TABLE")
@click.argument("files", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print the queued requests as JSON.")
@REQUEST_ID
@click.pass_context
def ingest_request(ctx: click.Context, table_name: str, files: tuple[str, ...], as_json: bool,
                   request_id: Optional[str]) -> None:
    """Queue FILES (local paths or s3:// URIs) for the table's ingest batcher.

    Every file must exist and be Parquet, CSV or JSON Lines, or nothing is queued.
    """
    from sleeper_ops.cli.support import request_id_of
    from sleeper_ops.ingest.batcher import submit_ingest_requests

    requests = submit_ingest_requests(_sleeper(ctx), table_name, list(files),
                                      request_id=request_id_of(request_id, "ingest-request"))
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in requests]))
        return
    size = sum(r.size_bytes for r in requests)
    click.echo(f"queued {len(requests)} ingest requests ({size:,} bytes) for table {table_name}")


@cli.command()
@click.option("--port", default=8080, show_default=True, help="Port of the Airflow UI and API on 127.0.0.1.")
@click.option("--demo/--no-demo", default=True, show_default=True,
              help="Create a small demo table if the catalog has no tables.")
@click.option("--users", default=None, metavar="NAME:ROLE,...",
              help="Airflow users and roles (viewer, user, op, admin), e.g. admin:admin,viewer:viewer,ops:op; "
                   "must include admin:admin. Default: $AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS, else admin only.")
@click.pass_context
def airflow(ctx: click.Context, port: int, demo: bool, users: Optional[str]) -> None:
    """Run Airflow standalone with the Sleeper DAGs and plugin until Ctrl-C; prints every
    user's password once Airflow is ready."""
    from sleeper_ops.orchestration.standalone import run_standalone

    code = run_standalone(ctx.obj["home"], port=port, demo=demo, users=users, say=click.echo)
    if code:
        sys.exit(code)


def _one_line(message: str) -> str:
    """A message on one line: its non-blank lines joined."""
    return "; ".join(line.strip() for line in message.splitlines() if line.strip())


def _fail(message: str, code: int = 1) -> None:
    click.echo(f"error: {_one_line(message)}", err=True)
    sys.exit(code)


def main(argv: Optional[list[str]] = None) -> Any:
    """Run the CLI (``argv`` None: the ``sleeper`` program's own arguments, and the process
    ends after). A failure prints one ``error: ...`` line on stderr and exits non-zero."""
    try:
        return _main(argv)
    finally:
        if argv is None:  # the ``sleeper`` program: the process ends now
            # The command's resources are closed by now. The interpreter's collections at exit
            # traverse every object of every module loaded (pyarrow, NumPy, psycopg): ~60 ms of
            # a lookup process, measured (docs/adr/0009-lookup-process.md); frozen ones are skipped.
            freeze_objects()


def _main(argv: Optional[list[str]]) -> Any:
    unknown_outcome_hint(start=True)
    try:
        return cli.main(args=argv, prog_name="sleeper", standalone_mode=False)
    except click.exceptions.Abort:
        _fail("aborted")
    except click.exceptions.NoArgsIsHelpError as e:  # a command given nothing: its help, as written
        click.echo(e.ctx.get_help() if e.ctx is not None else e.format_message(), err=True)
        sys.exit(e.exit_code)
    except click.ClickException as e:
        hint = ""
        if isinstance(e, click.UsageError) and e.ctx is not None:
            hint = f" (see '{e.ctx.command_path} --help')"
        _fail(e.format_message() + hint, e.exit_code)
    except BufferFullError as e:
        _fail(str(e), EXIT_BUFFER_FULL)
    except StateStoreUnavailableError as e:  # a write's outcome may be unknown
        _fail(str(e) + unknown_outcome_hint())
    except SleeperError as e:
        _fail(str(e))
    except (OSError, ValueError) as e:
        _fail(str(e) or type(e).__name__)


if __name__ == "__main__":
    main()
