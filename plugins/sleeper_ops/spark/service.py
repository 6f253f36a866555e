"""The standing Spark driver service: one SparkSession, many jobs, no JVM start per job.

A long-lived process (``python -m sleeper_ops.spark.service --master spark://...``, or
``sleeper cluster``) holds one SparkSession on a Spark master and runs the jobs clients
send over a small local HTTP API (the client: :mod:`sleeper_ops.spark.service_client`):

* ``POST /jobs`` with ``{"id", "kind": "bulk_import" | "compaction" | "export", "table",
  "config", ...}`` queues a job (202), or answers the job already submitted under that id (200), so
  a client may repeat a submission whose reply it lost;
* ``GET /jobs/<id>?wait=S`` answers the job's status (``queued``, ``running``,
  ``succeeded``, ``failed``), waiting up to ``S`` seconds for it to end; 404 for a job
  this service does not know (never submitted here, or submitted before a restart);
* ``GET /health``: the master, the application, the executors' cores, the jobs.

Every answer names the service's ``instance`` (new at each start), so a client sees a
restart.

Guarantees:

* **The commit rules are the drivers'.** A bulk import runs
  :func:`~sleeper_ops.spark.bulk_driver.import_on`, a compaction batch
  :func:`~sleeper_ops.spark.driver.run_compaction_batch` and an export
  :meth:`~sleeper_ops.table.Table.export` with the ``spark`` runner
  (:mod:`sleeper_ops.spark.service_jobs`), exactly as under spark-submit:
  job records naming their outputs before the work, import keys, attempt-unique keys,
  one commit in the driver (here). The service holds no state of its own that a
  commit depends on, so a restart loses only the jobs in flight, which end as an
  interrupted spark-submit does: nothing of theirs is committed unless their commit
  landed, which the state store says (the client asks it, see its module).
* **Jobs run in Spark job groups of their own** (the drivers set them, per thread), at
  most ``max_jobs`` at a time (Spark's FAIR scheduler shares the executors between
  them), and one at a time per table and kind: a second bulk import into a table, or
  a second compaction batch of it, waits for the first.
* **A job that fails says why**: a SleeperError's message, or Spark's failure cut to
  the Python error that caused it (:func:`failure_reason`).
* The configuration of each job (with the state store's and object store's
  credentials) comes in its request, as spark-submit's configuration file does; the
  service listens on the loopback address unless told otherwise, and keeps nothing.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Optional, Sequence
from urllib.parse import parse_qs, urlsplit

from sleeper_ops.spark.service_jobs import KINDS, ServiceRequestError, execute_job
from statestore.errors import SleeperError

logger = logging.getLogger(__name__)

#: how many ended jobs the service remembers (the oldest are forgotten first)
KEEP_ENDED = 500
#: the longest a status request waits for its job to end
MAX_WAIT_SECONDS = 30.0
MAX_BODY_BYTES = 16 * 1024 * 1024
ERROR_CHARS = 2000
DEFAULT_SPARK_CONF = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false", "spark.log.level": "WARN",
                      "spark.scheduler.mode": "FAIR"}


def failure_reason(e: BaseException) -> str:
    """Why a job failed, in a line or two: a SleeperError's message; for Spark's
    failures (a Py4J error quoting a Python traceback from an executor) the first line
    of Spark's message and the Python error that failed the task."""
    text = str(e)
    if isinstance(e, SleeperError) or "Traceback (most recent call last)" not in text:
        return f"{type(e).__name__}: {text}"[:ERROR_CHARS]
    aborted = re.search(r"Job aborted due to stage failure: (.*?)(?:, most recent failure|\n|$)", text)
    head = aborted.group(1) if aborted is not None else text.splitlines()[0]
    tb = text.split("Traceback (most recent call last)", 1)[1].splitlines()
    python_error = ""
    for line in tb[1:]:
        if re.match(r"^\s+at |^\s*$", line):
            if python_error:
                break
            continue
        if not line.startswith(" "):
            python_error = line.strip()
    return f"{python_error} (Spark: {head[:ERROR_CHARS // 2]})"[:ERROR_CHARS]


@dataclass
class ServiceJob:
    """One job sent to the service, and what became of it."""

    id: str
    kind: str
    table: str
    request: dict[str, Any]
    state: str = "queued"
    submitted: float = field(default_factory=time.time)
    started: Optional[float] = None
    ended: Optional[float] = None
    outcome: Optional[dict[str, Any]] = None
    error: Optional[str] = None
    done: threading.Event = field(default_factory=threading.Event)

    def status(self, instance: str) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "table": self.table, "state": self.state, "instance": instance,
                "submitted": self.submitted, "started": self.started, "ended": self.ended,
                "outcome": self.outcome, "error": self.error}


Executor = Callable[[ServiceJob], dict[str, Any]]


class SparkService:
    """The jobs of one SparkSession (see the module docstring). ``execute`` runs a job
    and returns its outcome (``{"error": None | reason, ...}``); by default
    :func:`execute_job` on ``spark``."""

    def __init__(self, spark: Any, *, max_jobs: int = 2, execute: Optional[Executor] = None) -> None:
        self.spark = spark
        self.instance = uuid.uuid4().hex
        self._execute = execute or (lambda job: execute_job(spark, job))
        self._jobs: dict[str, ServiceJob] = {}
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max(1, max_jobs))
        self._per_table: dict[tuple[str, str, str], threading.Lock] = {}

    def submit(self, request: Any) -> tuple[ServiceJob, bool]:
        """Queue the job ``request`` describes; (the job, whether it is new). A request
        with the id of a known job answers that job (the request is not run again)."""
        if not isinstance(request, dict):
            raise ServiceRequestError("a job request must be a JSON object")
        job_id, kind, table = request.get("id"), request.get("kind"), request.get("table")
        if not isinstance(job_id, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,100}", job_id):
            raise ServiceRequestError(f"a job request needs an id of letters, digits, '_', '.' or '-', got {job_id!r}")
        if kind not in KINDS:
            raise ServiceRequestError(f"unknown job kind {kind!r}; expected one of {', '.join(KINDS)}")
        if not isinstance(table, str) or not table:
            raise ServiceRequestError("a job request needs the table's name")
        config = request.get("config")
        if not isinstance(config, dict) or not isinstance(config.get("home"), str):
            raise ServiceRequestError("a job request needs the Sleeper configuration, with its home")
        with self._lock:
            known = self._jobs.get(job_id)
            if known is not None:
                return known, False
            job = ServiceJob(job_id, kind, table, request)
            self._jobs[job_id] = job
            self._forget_old()
            key = (kind, str(config.get("object_store")), table)
            table_lock = self._per_table.setdefault(key, threading.Lock())
        logger.info("job %s: %s of %s queued", job_id, kind, table)
        threading.Thread(target=self._run, args=(job, table_lock), name=f"sleeper-service-{job_id}",
                         daemon=True).start()
        return job, True

    def get(self, job_id: str) -> Optional[ServiceJob]:
        with self._lock:
            return self._jobs.get(job_id)

    def counts(self) -> dict[str, int]:
        with self._lock:
            out: dict[str, int] = {}
            for j in self._jobs.values():
                out[j.state] = out.get(j.state, 0) + 1
            return out

    def _forget_old(self) -> None:
        ended = [j for j in self._jobs.values() if j.done.is_set()]
        for j in sorted(ended, key=lambda j: j.ended or 0)[:max(0, len(ended) - KEEP_ENDED)]:
            del self._jobs[j.id]

    def _run(self, job: ServiceJob, table_lock: threading.Lock) -> None:
        with table_lock, self._slots:  # a job waiting for its table holds no slot
            job.state, job.started = "running", time.time()
            logger.info("job %s: %s of %s running", job.id, job.kind, job.table)
            try:
                outcome = self._execute(job)
                job.outcome, job.error = outcome, outcome.get("error")
            except Exception as e:
                logger.exception("job %s failed", job.id)
                job.error = failure_reason(e)
            job.state = "failed" if job.error else "succeeded"
            job.ended = time.time()
            logger.info("job %s: %s in %.1f s%s", job.id, job.state, job.ended - job.started,
                        f": {job.error}" if job.error else "")
            job.done.set()


# ----- HTTP -------------------------------------------------------------------------------------

class _Handler(BaseHTTPRequestHandler):
    service: SparkService
    describe: Callable[[], dict[str, Any]]

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s " + format, self.address_string(), *args)

    def _answer(self, status: HTTPStatus, doc: dict[str, Any]) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: HTTPStatus, message: str) -> None:
        self._answer(status, {"error": message, "instance": self.service.instance})

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/health":
            self._answer(HTTPStatus.OK, {**self.describe(), "instance": self.service.instance,
                                         "jobs": self.service.counts()})
            return
        m = re.fullmatch(r"/jobs/([^/]+)", url.path)
        if m is None:
            self._error(HTTPStatus.NOT_FOUND, f"no such resource {url.path}")
            return
        job = self.service.get(m.group(1))
        if job is None:
            self._error(HTTPStatus.NOT_FOUND, f"no job {m.group(1)} on this service (instance "
                                              f"{self.service.instance}): never submitted here, or lost by a restart")
            return
        try:
            wait = min(MAX_WAIT_SECONDS, max(0.0, float(parse_qs(url.query).get("wait", ["0"])[0])))
        except ValueError:
            self._error(HTTPStatus.BAD_REQUEST, "wait must be a number of seconds")
            return
        job.done.wait(wait)
        self._answer(HTTPStatus.OK, job.status(self.service.instance))

    def do_POST(self) -> None:
        if urlsplit(self.path).path != "/jobs":
            self._error(HTTPStatus.NOT_FOUND, f"no such resource {self.path}")
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length <= 0 or length > MAX_BODY_BYTES:
            self._error(HTTPStatus.BAD_REQUEST, f"a job request is a JSON body of 1 to {MAX_BODY_BYTES} bytes")
            return
        try:
            job, new = self.service.submit(json.loads(self.rfile.read(length)))
        except ValueError as e:
            self._error(HTTPStatus.BAD_REQUEST, f"the body is not JSON: {e}")
            return
        except ServiceRequestError as e:
            self._error(HTTPStatus.BAD_REQUEST, str(e))
            return
        self._answer(HTTPStatus.ACCEPTED if new else HTTPStatus.OK, job.status(self.service.instance))


def http_server(service: SparkService, host: str, port: int,
                describe: Callable[[], dict[str, Any]] = dict) -> ThreadingHTTPServer:
    """An HTTP server (not yet serving) answering the API of the module docstring for
    ``service``; ``port`` 0 picks a free one (``server.server_address``)."""
    handler = type("SparkServiceHandler", (_Handler,), {"service": service, "describe": staticmethod(describe)})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


# ----- the process ------------------------------------------------------------------------------

def start_session(master: str, conf: dict[str, str], *, executors: int = 0, wait: float = 120.0) -> Any:
    """A SparkSession on ``master`` named ``sleeper-spark-service``, once ``executors``
    executors have registered (or ``wait`` seconds passed), with every executor's Python
    workers started and the job modules imported (so the first job pays neither)."""
    from pyspark.sql import SparkSession

    _import_job_modules()
    builder = SparkSession.builder.master(master).appName("sleeper-spark-service")
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    sc = spark.sparkContext
    deadline = time.monotonic() + wait
    while executors and len(sc.statusTracker().getExecutorInfos()) - 1 < executors and time.monotonic() < deadline:
        time.sleep(0.2)
    width = max(1, int(sc.defaultParallelism))
    sc.setJobGroup("sleeper-service-warm-up", "start the Python workers")
    sc.parallelize(range(width * 2), width * 2).mapPartitions(_warm_up).collect()
    return spark


def _import_job_modules() -> None:
    """Import what a job's driver side uses (seconds of imports, paid before serving)."""
    import sleeper_ops.api
    import sleeper_ops.compaction.jobs
    import sleeper_ops.spark.bulk_driver
    import sleeper_ops.spark.driver  # noqa: F401

    for name in ("statestore.postgres.store", "statestore.postgres.embedded"):
        try:
            importlib.import_module(name)
        except ImportError:  # that backend's packages are not installed: its jobs would say so
            pass


def _warm_up(_: Any) -> list[int]:
    import pyarrow.parquet  # noqa: F401

    from sleeper_ops.io.pandas_free import load_datafusion

    load_datafusion()  # the merge's engine (without pandas)

    import sleeper_ops.spark.bulk_executor
    import sleeper_ops.spark.executor  # noqa: F401

    return [1]


def _parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m sleeper_ops.spark.service",
                                description="A standing Spark driver: runs Sleeper bulk imports and compaction "
                                            "batches sent over HTTP, in one SparkSession.")
    p.add_argument("--master", required=True, help="the Spark master, e.g. spark://127.0.0.1:7077")
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (default loopback)")
    p.add_argument("--port", type=int, default=8998, help="the port (0: any free one)")
    p.add_argument("--max-jobs", type=int, default=2, help="jobs run at once (others queue)")
    p.add_argument("--executors", type=int, default=0, help="wait for this many executors before serving")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting (repeatable)")
    p.add_argument("--ready-file", default=None, help="write the service's URL here once it serves")
    return p.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Start the session, serve until SIGINT or SIGTERM (then stop the session)."""
    import signal

    args = _parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    conf = dict(DEFAULT_SPARK_CONF)
    if args.master.startswith("local") or "127.0.0.1" in args.master or "localhost" in args.master:
        conf["spark.driver.host"] = "127.0.0.1"
    conf.update(kv.split("=", 1) for kv in args.conf)
    started = time.perf_counter()
    spark = start_session(args.master, conf, executors=args.executors)
    sc = spark.sparkContext
    service = SparkService(spark, max_jobs=args.max_jobs)

    def describe() -> dict[str, Any]:
        return {"master": args.master, "application_id": sc.applicationId, "cores": sc.defaultParallelism}

    server = http_server(service, args.host, args.port, describe)
    url = f"http://{args.host}:{server.server_address[1]}"
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    logger.info("Spark service at %s on %s (application %s, %d cores), ready in %.1f s", url, args.master,
                sc.applicationId, sc.defaultParallelism, time.perf_counter() - started)
    if args.ready_file:
        tmp = f"{args.ready_file}.tmp"
        Path(tmp).write_text(url + "\n")
        Path(tmp).replace(args.ready_file)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
