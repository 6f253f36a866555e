"""Peak memory of the REST server while it serves a whole-table read (DESIGN.md section 10:
"memory is bounded by the work, not the table").

Builds a table of Sleeper's system-test schema (16 leaf partitions) with the project's API
under a temporary ``SLEEPER_HOME`` (the embedded PostgreSQL), starts the REST app
(:func:`sleeper_ops.web.rest.create_app`) with uvicorn in a child process over the same
home, warms it with one key lookup, takes the server's resident memory at idle
(``VmRSS``), then reads the whole table over HTTP (``GET /tables/t/records?min=""``),
streaming the body to nowhere, and takes the server's peak resident memory (``VmHWM``
from ``/proc/<pid>/status``). The figure of merit is peak / idle, both taken in this run.

The read asks for every row (``limit`` = the table's row count); a server whose
``limit`` has a lower maximum is asked for that maximum, and the run says so.

    .venv/bin/python bench/rest_read_rss.py [--rows 10000000]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Iterator

import _common  # noqa: F401
from _common import parse_args, stop_embedded

TABLE = "t"


def proc_status_kib(pid: int, field: str) -> int:
    """A ``kB`` field of ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(port: int, path: str, params: dict[str, str]) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("GET", path + "?" + urllib.parse.urlencode(params))
    return conn.getresponse()


def build(home: Path, rows: int):  # type: ignore[no-untyped-def]
    from sleeper_ops.api import Sleeper
    from sleeper_ops.demo import SYSTEM_TEST_SCHEMA, generate_rows, split_points

    (home / "sleeper.toml").write_text('[object_store]\nuri = "data"\n')
    s = Sleeper(home=home)
    t = s.create_table(TABLE, SYSTEM_TEST_SCHEMA, split_points=split_points(15))
    step = 1_000_000

    def batches() -> Iterator:  # type: ignore[type-arg]
        for i in range(0, rows, step):
            yield from generate_rows(min(step, rows - i), seed=7 + i).to_batches()
    t0 = time.perf_counter()
    t.ingest(batches(), max_chunk_rows=4_000_000)
    print(f"built {rows:,} rows in {time.perf_counter() - t0:.1f}s ({len(t.state().references)} files)", flush=True)
    return s


def serve(home: str, port: int) -> None:
    """The child: the REST app over ``home`` on 127.0.0.1:``port``."""
    import uvicorn

    from sleeper_ops.web.rest import LazySleeper, create_app

    uvicorn.run(create_app(LazySleeper(home)), host="127.0.0.1", port=port, log_level="warning")


def wait_ready(port: int, server: subprocess.Popen[bytes]) -> None:
    """Until the REST server on ``port`` answers ``GET /tables`` (exits if it dies or
    takes over 120 s)."""
    deadline = time.monotonic() + 120
    while True:
        try:
            r = get(port, "/tables", {})
            r.read()
            if r.status == 200:
                return
        except OSError:
            pass
        if time.monotonic() > deadline or server.poll() is not None:
            raise SystemExit("the REST server did not start")
        time.sleep(0.2)


def measure(rows: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="sleeper-bench-rss-") as d:
        home = Path(d)
        sleeper = build(home, rows)
        port = free_port()
        env = {**os.environ, "SLEEPER_HOME": str(home)}
        server = subprocess.Popen([sys.executable, __file__, "--serve", str(home), str(port)], env=env)
        try:
            wait_ready(port, server)
            r = get(port, f"/tables/{TABLE}/records", {"key": '"key-000000001"'})
            r.read()
            assert r.status == 200, r.status
            time.sleep(1.0)
            idle = proc_status_kib(server.pid, "VmRSS")
            limit = rows
            t0 = time.perf_counter()
            r = get(port, f"/tables/{TABLE}/records", {"min": '""', "limit": str(limit)})
            if r.status == 422:  # the server caps limit below the table's size
                detail = r.read()
                m = re.search(rb'(?:"le":\s*|less than or equal to )(\d+)', detail)
                limit = int(m.group(1)) if m else 1_000_000
                print(f"the server caps limit at {limit:,}: reading that many rows", flush=True)
                t0 = time.perf_counter()
                r = get(port, f"/tables/{TABLE}/records", {"min": '""', "limit": str(limit)})
            assert r.status == 200, (r.status, r.read()[:500])
            size, tail = 0, b""
            with open(os.devnull, "wb") as sink:
                while chunk := r.read(1 << 20):
                    size += len(chunk)
                    tail = (tail + chunk)[-4096:]
                    sink.write(chunk)
            seconds = time.perf_counter() - t0
            peak = proc_status_kib(server.pid, "VmHWM")
        finally:
            server.terminate()
            server.wait(30)
            sleeper.close()
            stop_embedded(home)
    counts = re.findall(rb'"count":\s*(\d+)', tail)
    got = int(counts[-1]) if counts else tail.count(b"\n")
    return {"rows_asked": limit, "rows_read": got, "bytes": size, "seconds": seconds,
            "idle_rss_mib": idle / 1024, "peak_rss_mib": peak / 1024, "peak_over_idle": peak / idle}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--serve", nargs=2, metavar=("HOME", "PORT"), help=argparse.SUPPRESS)
    args = parse_args(ap, rows=20_000)
    if args.serve:
        serve(args.serve[0], int(args.serve[1]))
        return
    out = measure(args.rows)
    print(f"read {out['rows_read']:,} rows ({out['bytes'] / 2**20:,.0f} MiB of JSON) in {out['seconds']:.1f}s; "
          f"server RSS idle {out['idle_rss_mib']:,.0f} MiB, peak {out['peak_rss_mib']:,.0f} MiB: "
          f"peak/idle = {out['peak_over_idle']:.2f}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
