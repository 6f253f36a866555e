"""The independent oracle of issue 33 (Deliver 7): Hypothesis runs random sequences of a
table's operations -- buffered write, ingest, bulk import (on Spark, PostgreSQL only: one a
run, or one a sequence with ``SLEEPER_ORACLE_SPARK=1``), delete (keys, a range, a range with
``where``), export, flush, compaction, split, GC, and a writer process killed with
SIGKILL (a buffered write, a standard ingest) -- with faults injected (DynamoDB, through
:class:`~tests.faults.aws_proxy.FaultProxy`: lost replies, 500s, throttling, and outages --
500s or throttling of every transaction until the client gives up -- and lost S3 replies;
PostgreSQL, through :class:`~tests.faults.commit_proxy.CommitDroppingProxy`: the connection
cut before or after COMMIT, or the server out of reach from then on), on PostgreSQL (the
embedded pool) and DynamoDB (moto, data and blobs in S3).

A plain-Python model, sharing no code with Sleeper, keeps every record by its unique key:
acknowledged, "maybe" (its write's outcome stayed unknown), deleted. A failed command is
retried as a user (or Airflow's task retry) would: with its request id where the product
takes one (buffered writes, deletes; ingest once it takes ``request_id``), as is
otherwise, once the fault has passed. A killed writer's command is sent again the same way
(unless it finished first). A definite refusal (the product's own error, not a lost store)
applied nothing; a command still failing after its fault passed is wedged.

At the end of each sequence, read through a fresh store without faults:

* every acknowledged record not deleted is there exactly once, a "maybe" one at most
  once, no deleted one is readable, and nothing the model never wrote is; no command
  was wedged;
* then the erasure report (``sleeper report erasure``) for the erased keys, asked at
  once and again after each piece of maintenance -- flush, compaction, GC (delays at
  their floors; judged 10 minutes ahead, inside the orphan grace, then days ahead), a
  DynamoDB snapshot, the owner removing each export
  file the report names -- until it says clean; and the first time it does,
  :func:`tests.oracle.raw_scan.raw_scan` -- every byte the home stores, decoded, written
  without the product's code -- finds none of the erased keys anywhere.

Size: ``SLEEPER_ORACLE_EXAMPLES`` random sequences (default 5 on PostgreSQL, 3 on DynamoDB:
with the known ones, about 60-90 s a backend on 2 cores),
after the known ones (:data:`KNOWN`), of up to
``SLEEPER_ORACLE_STEPS`` steps (default 12); the seed is printed and
``SLEEPER_ORACLE_SEED`` replays it (a failure also prints ``@reproduce_failure``, and its
plan); ``SLEEPER_ORACLE_SHRINK=0`` reports a failure unshrunk, ``SLEEPER_ORACLE_EXPLICIT=0``
leaves out the known sequences that run first (each reaching a finding of issue 33). The
size, the faults fired per kind and the raw scan's result are printed at the end.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, Phase, example, given, note, seed, settings
from hypothesis import strategies as st

from tests.faults.aws_proxy import FaultProxy
from tests.integration.statestore.conftest import MOTO_CREDENTIALS, serial_moto_server
from tests.oracle.raw_scan import DynamoPlace, Places, S3Place, ScanResult, raw_scan
from tests.oracle.stores import CREDENTIALS, ingest_options, open_sleeper

pytestmark = pytest.mark.integration

#: random sequences a backend (besides the known ones): PostgreSQL's steps take a fraction of DynamoDB's (moto)
EXAMPLES = {b: int(os.environ.get("SLEEPER_ORACLE_EXAMPLES", n)) for b, n in (("postgres", "5"), ("dynamodb", "3"))}
STEPS = int(os.environ.get("SLEEPER_ORACLE_STEPS", "12"))
SEED = int(os.environ.get("SLEEPER_ORACLE_SEED") or random.randrange(1 << 32))
#: "0": report the first failing sequence as found, without shrinking it (minutes of runs)
SHRINK = os.environ.get("SLEEPER_ORACLE_SHRINK", "1") != "0"
#: "0": random sequences only, without the known ones (:data:`KNOWN`) first
EXPLICIT = os.environ.get("SLEEPER_ORACLE_EXPLICIT", "1") != "0"
BUCKET = "sleeper-erasure-oracle"
SCHEMA = {"rowKeyFields": [{"name": "key", "type": "StringType"}],
          "valueFields": [{"name": "v", "type": "StringType"}, {"name": "payload", "type": "StringType"}]}
#: compaction purges every delete at once; GC judged :data:`SOON` ahead deletes replaced files (GC delay and
#: history retention passed) but no orphan (its grace not passed: the window where the report must list them);
#: judged days ahead, it removes all it may
PROPERTIES = {"sleeper.table.delete.purge.hours": "0", "sleeper.table.gc.delay.minutes": "1",
              "sleeper.table.history.retention.minutes": "5", "sleeper.table.gc.orphan.grace.minutes": "60",
              "sleeper.table.compaction.job.retry.minutes": "1", "sleeper.table.partition.splitting.threshold": "40"}
SOON = 10 * 60 * 1000
DAY_MS = 24 * 3600 * 1000
#: a buffered write this big keeps its bytes in the blob store on DynamoDB (over 350 KB)
BIG_ROWS, BIG_PAYLOAD = 2000, 200
#: faults a step may carry, per backend
FAULTS = {"postgres": ["lost", "cut", "dark", "dark-before"],
          "dynamodb": ["lost", "error", "throttle", "s3-lost", "outage", "lost-commit", "outage-commit",
                       "throttle-commit"]}
#: DynamoDB: the request body of a commit (a transaction naming the log table)
DYNAMO_COMMIT = b'-log"'
#: PostgreSQL: what a step's commit sends before COMMIT (the commit proxy's marker)
PG_MARKER = {"write": b"INSERT INTO write_buffer", "kill_write": b"INSERT INTO write_buffer",
             "delete": b"INSERT INTO table_deletes", "split": b"INSERT INTO partitions", "gc": b"DELETE FROM files"}

print(f"erasure oracle: seed {SEED} (SLEEPER_ORACLE_SEED={SEED} replays it)", file=sys.stderr)


# ----- steps: pure data, so Hypothesis shrinks and replays them ---------------------------
@dataclasses.dataclass(frozen=True)
class Step:
    op: str
    n: int = 0  # records (write, ingest, kill) / first key index (deletes)
    width: int = 0  # keys in a range delete / ms before the kill
    value: str = "a"  # the records' v / the where-delete's v
    big: bool = False
    export_key: Optional[str] = None
    fault: Optional[str] = None


#: sequences every run tries first, each reaching a finding of issue 33 in a few steps
KNOWN: dict[str, list[Step]] = {
    # 5: an export key reused for a second destination writes a copy the report never lists
    "export key reused": [Step("ingest", 6), Step("export", export_key="daily"), Step("export", export_key="daily"),
                          Step("delete_range", 0, 6)],
    # 7: a standard ingest whose outcome is unknown, retried (as Airflow does): every record twice
    "ingest retried": [Step("ingest", 5, fault="outage-commit")],  # (PostgreSQL: "dark")
    # 3: a flush's reply lost: the retry finds it applied and leaves the buffered records' blob
    "flush reply lost": [Step("write", 1, big=True), Step("flush", fault="lost-commit"),
                         Step("delete_range", 0, 5000)],
    # 2: a delete of ~4,400 keys: its log summary is over DynamoDB's item size
    "large delete": [Step("ingest", 5), Step("delete_many", 0, 5), Step("write", 3)],
    # 4: a compaction's commit of unknown outcome (not applied): its output, kept for the orphan sweep, holds
    # records erased next, and the report does not look at untracked objects (PostgreSQL: "dark-before")
    "orphan kept": [Step("ingest", 4), Step("delete_keys", 0, 1), Step("compact", fault="throttle-commit"),
                    Step("delete_range", 1, 3), Step("compact")],
}
#: one bulk import on Spark (slow: one a run, unless SLEEPER_ORACLE_SPARK=1 lets random sequences have one too)
BULK_IMPORT = [Step("bulk_import", 20), Step("ingest", 3), Step("delete_range", 5, 10), Step("compact")]
SPARK = os.environ.get("SLEEPER_ORACLE_SPARK", "0") == "1"
#: not named by issue 33: a split point is a record's key, kept in the partition tree after the record is erased
SPLIT_POINT = [Step("ingest", 60), Step("split"), Step("delete_range", 0, 1000)]
PG_KNOWN = {"ingest retried": [Step("ingest", 5, fault="dark")],
            "orphan kept": [dataclasses.replace(x, fault="dark-before") if x.fault else x
                            for x in KNOWN["orphan kept"]],
            "export key reused": KNOWN["export key reused"]}
#: keys a large delete names that no record has
PAD_KEYS = [f"{uuid.UUID(int=i * 7919 + 12345)}" for i in range(4400)]


def steps(backend: str) -> st.SearchStrategy[list[Step]]:
    fault = st.one_of(st.none(), st.none(), st.sampled_from(FAULTS[backend]))
    vs = st.sampled_from(["a", "b"])
    one = st.one_of(
        st.builds(Step, st.just("write"), st.integers(1, 20), st.just(0), vs, st.sampled_from([False, False, True]),
                  st.none(), fault),
        st.builds(Step, st.just("ingest"), st.integers(1, 20), st.just(0), vs, st.just(False), st.none(), fault),
        st.builds(Step, st.just("delete_keys"), st.integers(0, 400), st.integers(1, 3), vs, st.just(False),
                  st.none(), fault),
        st.builds(Step, st.just("delete_range"), st.integers(0, 400), st.integers(1, 12), vs, st.just(False),
                  st.none(), fault),
        st.builds(Step, st.just("delete_where"), st.integers(0, 400), st.integers(1, 20), vs, st.just(False),
                  st.none(), fault),
        st.builds(Step, st.just("export"), export_key=st.sampled_from([None, "daily"]), fault=fault),
        st.builds(Step, st.sampled_from(["flush", "compact", "split", "gc"]), fault=fault),
        st.builds(Step, st.sampled_from(["kill_write", "kill_ingest"]), st.integers(1, 20), st.integers(300, 4000),
                  vs),
    )
    if SPARK and backend == "postgres":
        bulk = st.builds(Step, st.just("bulk_import"), st.integers(1, 20), fault=fault)
        return st.tuples(st.lists(one, min_size=1, max_size=STEPS - 1), bulk, st.integers(0, STEPS)).map(
            lambda t: [*t[0][:t[2]], t[1], *t[0][t[2]:]])
    return st.lists(one, min_size=2, max_size=STEPS)


# ----- the model ------------------------------------------------------------------------
@dataclasses.dataclass
class Model:
    """Records by their unique key: their v; where each one stands."""

    values: dict[str, str] = dataclasses.field(default_factory=dict)  # every key ever written
    acked: set[str] = dataclasses.field(default_factory=set)
    maybe: set[str] = dataclasses.field(default_factory=set)  # outcome unknown: there at most once
    deleted: set[str] = dataclasses.field(default_factory=set)  # an acknowledged delete covered it
    maybe_deleted: set[str] = dataclasses.field(default_factory=set)  # a delete of unknown outcome did

    def live(self) -> list[str]:
        return sorted(k for k in self.values if k not in self.deleted)

    def covered(self, lo: str, hi: Optional[str], only: Optional[str]) -> set[str]:
        return {k for k in self.live()
                if lo <= k and (hi is None or k < hi) and (only is None or self.values[k] == only)}

    def apply_delete(self, keys: set[str], applied: bool) -> None:
        """A delete of ``keys``: an acknowledged record it covered is gone for good once
        the delete is acknowledged; a "maybe" one may yet be committed after it (a
        pending group commit), so it stays there at most once, as does any record the
        delete of unknown outcome covered."""
        for k in keys:
            sure = applied and k in self.acked
            self.acked.discard(k)
            self.maybe.discard(k)
            (self.deleted if sure else self.maybe_deleted).add(k)


@dataclasses.dataclass
class Tally:
    """The size of a run, printed at the end of each backend's test."""

    sequences: int = 0
    steps: Counter[str] = dataclasses.field(default_factory=Counter)
    fired: Counter[str] = dataclasses.field(default_factory=Counter)
    retried: int = 0
    unknown: int = 0
    failures: Counter[str] = dataclasses.field(default_factory=Counter)
    seconds: Counter[str] = dataclasses.field(default_factory=Counter)  # per operation, and "end" (the checks)
    wedged: list[str] = dataclasses.field(default_factory=list)  # commands failing after their fault passed
    records: int = 0
    erased: int = 0
    scans: int = 0
    scanned: list[str] = dataclasses.field(default_factory=list)

    def render(self, backend: str) -> str:
        return (f"erasure oracle on {backend}: seed {SEED}: {self.sequences} sequences, {sum(self.steps.values())} "
                f"steps {dict(sorted(self.steps.items()))}; faults fired {dict(sorted(self.fired.items()))}; "
                f"{self.retried} commands retried ({dict(self.failures)}), {self.unknown} left unknown; "
                f"{self.records} records written, "
                f"{self.erased} erased keys; {self.scans} raw scans clean; seconds "
                f"{ {k: round(v, 1) for k, v in sorted(self.seconds.items())} }"
                + "".join(f"\n  {s}" for s in self.scanned[-3:]))


# ----- one home per sequence ------------------------------------------------------------
@dataclasses.dataclass
class Home:
    backend: str
    spec: dict[str, Any]  # the direct way (tests/oracle/stores.py)
    places: Places
    root: Path  # local files of the sequence: exports (and the data on PostgreSQL)
    arm: Callable[[Step], None]
    disarm: Callable[[], dict[str, int]]  # faults fired since arming, by kind
    faulty_endpoint: Optional[str] = None
    faulty_dsn: Optional[str] = None
    reopen: bool = False  # set by ``disarm`` when the faulty way to the store was replaced

    def open_faulty(self) -> Any:
        if self.backend == "postgres":
            return open_sleeper({**self.spec, "dsn": self.faulty_dsn, "connect_timeout": 3, "outcome_timeout": 3})
        return open_sleeper({**self.spec, "outcome_timeout": 3}, self.faulty_endpoint)

    def open_fresh(self) -> Any:
        return open_sleeper(self.spec)


APPLIED, REFUSED, UNKNOWN = "applied", "refused", "unknown"


def _definite(e: BaseException) -> bool:
    """Whether ``e`` is a definite no: the product's own refusal (not a lost store, whose
    answer may have been a yes)."""
    from statestore.errors import SleeperError, StateStoreUnavailableError

    return isinstance(e, SleeperError) and not isinstance(e, StateStoreUnavailableError)


def _retrying(tally: Tally, calm: Callable[[], None], what: str, command: Callable[[], Any],
              tries: int = 3) -> str:
    """Run ``command``; after a failure of unknown outcome, once the fault has passed
    (``calm``), run it again, up to ``tries`` times, as a client would (with the same
    request id: ``command`` carries it). Returns APPLIED; REFUSED (a definite no to the
    first try: nothing applied); or UNKNOWN (then, with no fault left, it is wedged)."""
    for attempt in range(tries):
        try:
            command()
            return APPLIED
        except Exception as e:
            tally.failures[type(e).__name__] += 1
            calm()
            if attempt == 0 and _definite(e):
                return REFUSED
            last = f"{type(e).__name__}: {str(e)[:200]}"
            if attempt + 1 < tries:
                tally.retried += 1
    tally.unknown += 1
    tally.wedged.append(f"{what}: {last}")
    return UNKNOWN


def _records(keys: list[str], value: str, big: bool) -> list[dict[str, str]]:
    payload = "p" * BIG_PAYLOAD if big else ""
    return [{"key": k, "v": value, "payload": payload} for k in keys]


class Session:
    """The sequence's faulty Sleeper and table; opened again when a fault left the old
    one no way to its store (a PostgreSQL server gone dark: its proxy is replaced)."""

    def __init__(self, home: Home, name: str, tally: Tally) -> None:
        self.home, self.name, self.tally = home, name, tally
        self.sleeper = home.open_faulty()

    def table(self) -> Any:
        return self.sleeper.table(self.name)

    def calm(self) -> None:
        """The fault passes."""
        self.tally.fired.update(self.home.disarm())
        if self.home.reopen:
            self.home.reopen = False
            self.sleeper.close()
            self.sleeper = self.home.open_faulty()

    def retrying(self, what: str, command: Callable[[Any], Any]) -> str:
        return _retrying(self.tally, self.calm, what, lambda: command(self.table()))


def run_sequence(home: Home, plan: list[Step], tally: Tally) -> None:
    """Run ``plan`` on a fresh table of ``home``, then check the model and the erasure."""
    model = Model()
    counter = iter(range(10**6))
    name = f"oracle{uuid.uuid4().hex[:6]}"
    exports: list[Path] = []
    tally.sequences += 1
    tally.wedged = []
    session = Session(home, name, tally)
    try:
        session.sleeper.create_table(name, SCHEMA, properties=PROPERTIES)
        for i, step in enumerate(plan):
            tally.steps[step.op] += 1
            if step.fault:
                home.arm(step)
            started = time.monotonic()
            try:
                _run_step(session, step, f"{name}-{i}", model, counter, exports)
            finally:
                if step.fault:
                    session.calm()
                tally.seconds[step.op] += time.monotonic() - started
    finally:
        session.sleeper.close()
    started = time.monotonic()
    with home.open_fresh() as s:
        _check_model(s.table(name), model)
        assert not tally.wedged, f"commands that failed every try after their fault had passed: {tally.wedged}"
        erased = sorted(model.deleted)
        tally.erased += len(erased)
        try:
            if erased:
                _check_erasure(home, s, s.table(name), erased, tally)
        finally:
            tally.seconds["end"] += time.monotonic() - started


def _run_step(session: Session, step: Step, rid: str, model: Model, counter: Iterator[int],
              exports: list[Path]) -> None:
    home, tally, retrying = session.home, session.tally, session.retrying
    if step.op in ("write", "ingest", "kill_write", "kill_ingest", "bulk_import"):
        rows = BIG_ROWS if step.big else step.n
        keys = [f"u{next(counter):06d}@erase.example" for _ in range(rows)]
        model.values.update((k, step.value) for k in keys)
        tally.records += len(keys)
        records = _records(keys, step.value, step.big)
        if step.op.startswith("kill") and _kill_a_writer(home, session.name, step.op[len("kill_"):], rid, records,
                                                         step.width / 1000):
            tally.steps["kill too late"] += 1
            outcome = APPLIED
        elif step.op.endswith("write"):  # after a kill: the user sends it again
            outcome = retrying(str(step), lambda t: t.write(records, request_id=rid))
        elif step.op == "bulk_import":  # its source: one Parquet file of the user's, outside the home
            source = home.root.parent / f"{home.root.name}-sources" / rid
            source.mkdir(parents=True)
            pq.write_table(pa.Table.from_pylist(records), source / "part-0.parquet")
            outcome = retrying(str(step), lambda t: t.bulk_import([str(source)], import_key=rid))
        else:
            data = pa.Table.from_pylist(records)
            outcome = retrying(str(step), lambda t: t.ingest(data, **ingest_options(rid)))
        if outcome == REFUSED:
            for k in keys:
                del model.values[k]
        else:
            (model.acked if outcome == APPLIED else model.maybe).update(keys)
        return
    if step.op.startswith("delete"):
        everything = sorted(model.values)
        if not everything:
            return
        lo = everything[step.n % len(everything)]
        if step.op in ("delete_keys", "delete_many"):
            picked = everything[step.n % len(everything):][:step.width]
            covered = {k for k in picked if k not in model.deleted}
            named = picked + (PAD_KEYS if step.op == "delete_many" else [])
            command = lambda t: t.delete(keys=named, request_id=rid)  # noqa: E731
        else:
            at = step.n % len(everything) + step.width
            hi = everything[at] if at < len(everything) else None
            only = step.value if step.op == "delete_where" else None
            covered = model.covered(lo, hi, only)
            where = None if only is None else f"v = '{only}'"
            command = lambda t: t.delete(ranges=[(lo, hi)], where=where, request_id=rid)  # noqa: E731
        outcome = retrying(str(step), command)
        if outcome != REFUSED:
            model.apply_delete(covered, outcome == APPLIED)
        return
    if step.op == "export":
        dest = home.root / "exports" / f"e{len(exports)}"
        exports.append(dest)
        retrying(str(step), lambda t: t.export(str(dest), export_key=step.export_key))
        return
    now = int(time.time() * 1000)
    maintenance: dict[str, Callable[[Any], Any]] = {
        "flush": lambda t: t.flush(), "compact": lambda t: t.compact(runner="local"), "split": lambda t: t.split(),
        "gc": lambda t: t.gc(now_ms=now + 3 * DAY_MS)}
    retrying(str(step), maintenance[step.op])


def _kill_a_writer(home: Home, table: str, how: str, rid: str, records: list[dict[str, str]], after_s: float) -> bool:
    """A writer process of these records under ``rid`` (``how``: ``write`` or ``ingest``),
    killed with SIGKILL after ``after_s`` seconds (before, during or after its commit).
    Returns whether it finished first, and succeeded (then its user knows)."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.oracle.stores", json.dumps(home.spec), table, how, rid,
                             json.dumps(records)], cwd=Path(__file__).resolve().parents[2],
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(["plugins", "."])},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return proc.wait(timeout=after_s) == 0
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        return False


def _check_model(table: Any, model: Model) -> None:
    got = Counter(r["key"] for r in table.query(ranges=[("", None)]).to_pylist())
    doubled = sorted(k for k, c in got.items() if c > 1)
    lost = sorted(k for k in model.acked if not got[k])
    back = sorted(k for k in model.deleted if got[k])
    strangers = sorted(k for k in got if k not in model.values)
    assert not (doubled or lost or back or strangers), (
        f"{len(lost)} acknowledged records lost (e.g. {lost[:3]}), {len(doubled)} doubled (e.g. {doubled[:3]}), "
        f"{len(back)} deleted readable (e.g. {back[:3]}), {len(strangers)} never written; "
        f"{len(model.acked)} acknowledged, {len(model.maybe)} maybe")


def _check_erasure(home: Home, s: Any, table: Any, erased: list[str], tally: Tally) -> None:
    """The report, at once and after each piece of maintenance (now, 10 minutes ahead,
    then days ahead), until it is clean; the first time it is, the raw scan must find
    none of the erased keys."""
    start = now = int(time.time() * 1000)
    tid = table.info.table_id
    maintenance: list[tuple[str, Callable[[int], Any]]] = [
        ("nothing", lambda _: None), ("flush", lambda _: table.flush()),
        # judged ahead, a job whose commit's outcome stayed unknown is past its retry time: its inputs are free
        ("compaction", lambda at: table.compact(runner="local", retry_after_minutes=0 if at > start else None)),
        ("gc", lambda at: table.gc(now_ms=at))]
    if home.backend == "dynamodb":  # what the snapshot DAG does; GC then expires the log before it
        maintenance += [("snapshot", lambda _: s.state_store.snapshot(tid)), ("gc", lambda at: table.gc(now_ms=at))]
    report, done = None, []
    for round_, ahead in enumerate([0, SOON, 3 * DAY_MS, 3 * DAY_MS, 3 * DAY_MS]):
        now += ahead
        for what, run in maintenance[(1 if round_ else 0):]:
            run(now)
            done.append(f"{what} at +{(now - start) // 60_000} min" if what == "gc" else what)
            report = table.erasure_report(keys=erased)
            if report.clean:
                result = raw_scan(home.places, erased)
                tally.scanned.append(f"after {', '.join(done)}: {result.summary()}")
                assert not result.hits, (
                    f"the erasure report says clean (exit 0) for {len(erased)} erased keys after {', '.join(done)}, "
                    f"but the raw scan finds {len(result.places())} of them:\n{_by_place(result)}")
                tally.scans += 1
                return
            for held in report.held:  # the owner removes the export copies the report names
                if held.kind == "export file" and os.path.exists(held.name):
                    os.remove(held.name)
                    done.append("an export file removed")
    raise AssertionError(f"the erasure report never came clean after {', '.join(done)}:\n"
                         f"{report.render() if report else ''}")


def _by_place(result: ScanResult) -> str:
    """The hits grouped by the kind of place (the path without its unique parts)."""
    import re

    groups: dict[str, set[str]] = {}
    for h in result.hits:
        kind = re.sub(r"[0-9a-f]{8,}|\d+", "#", h.where)
        groups.setdefault(f"{kind} ({h.how})", set()).add(h.needle)
    return "\n".join(f"  {k}: {len(v)} keys, e.g. {sorted(v)[0]}" for k, v in sorted(groups.items()))


# ----- the tests ------------------------------------------------------------------------
def _settings(examples: int) -> settings:
    phases = [p for p in Phase
              if (SHRINK or p not in (Phase.shrink, Phase.explain)) and (EXPLICIT or p != Phase.explicit)]
    return settings(max_examples=examples, deadline=None, derandomize=False, database=None, print_blob=True,
                    suppress_health_check=list(HealthCheck), phases=phases)


def test_the_oracle_on_postgresql(pg_pool: Any, pg_admin_dsn: str, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    from psycopg.conninfo import make_conninfo

    from tests.faults.commit_proxy import CommitDroppingProxy

    tally = Tally()

    @seed(SEED)
    @_settings(EXAMPLES["postgres"])
    @given(plan=steps("postgres"))
    @example(plan=BULK_IMPORT)
    @example(plan=SPLIT_POINT)
    @example(plan=PG_KNOWN["orphan kept"])
    @example(plan=PG_KNOWN["ingest retried"])
    @example(plan=PG_KNOWN["export key reused"])
    def oracle(plan: list[Step]) -> None:
        note(f"plan: {plan}")
        db = pg_pool.take()
        dsn = make_conninfo(pg_admin_dsn, dbname=db)
        root = tmp_path / uuid.uuid4().hex[:8]
        proxy, faulty = CommitDroppingProxy.for_dsn(dsn)
        proxies = [proxy]
        drops = [0, ""]

        def arm(step: Step) -> None:
            marker = PG_MARKER.get(step.op.split("_")[0] if step.op.startswith("delete") else step.op,
                                   b"INSERT INTO file")
            drops[:] = [proxies[-1].drops, step.fault or ""]
            autocommit = step.op in ("write", "kill_write")  # a buffered write is one INSERT that commits itself
            proxies[-1].arm(after=step.fault in ("lost", "dark"), dark=step.fault in ("dark", "dark-before"),
                            marker=marker, commit=marker if autocommit else b"COMMIT")

        def disarm() -> dict[str, int]:
            """The fault passes: a server gone dark is reachable again, through a new proxy."""
            p = proxies[-1]
            p.disarm()
            fired = p.drops - int(drops[0])
            drops[0] = p.drops
            if fired and drops[1].startswith("dark"):
                fresh, home.faulty_dsn = CommitDroppingProxy.for_dsn(dsn)
                proxies.append(fresh)
                drops[0], home.reopen = 0, True
            return {f"pg-{drops[1]}": fired} if fired else {}

        home = Home("postgres", {"backend": "postgres", "dsn": dsn, "data": str(root / "data"), "spark": "local[2]"},
                    Places(directories=[root], postgres_dsn=dsn), root, arm, disarm, faulty_dsn=faulty)
        try:
            run_sequence(home, plan, tally)
        finally:
            for p in proxies:
                p.close()
            pg_pool.give_back(db)

    try:
        oracle()
    finally:
        with capsys.disabled():
            print("\n" + tally.render("postgres"))


@pytest.fixture(scope="module")
def moto() -> Iterator[str]:
    boto3 = pytest.importorskip("boto3")
    with serial_moto_server() as url:
        boto3.client("s3", endpoint_url=url, aws_access_key_id="test", aws_secret_access_key="test",
                     region_name="us-east-1").create_bucket(Bucket=BUCKET)
        yield url


def test_the_oracle_on_dynamodb(moto: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    tally = Tally()

    @seed(SEED)
    @_settings(EXAMPLES["dynamodb"])
    @given(plan=steps("dynamodb"))
    @example(plan=SPLIT_POINT)
    @example(plan=KNOWN["export key reused"])
    @example(plan=KNOWN["ingest retried"])
    @example(plan=KNOWN["flush reply lost"])
    @example(plan=KNOWN["large delete"])
    @example(plan=KNOWN["orphan kept"])
    def oracle(plan: list[Step]) -> None:
        note(f"plan: {plan}")
        prefix = f"o{uuid.uuid4().hex[:10]}"
        root = tmp_path / prefix
        root.mkdir()
        spec = {"backend": "dynamodb", "endpoint": moto, "table_prefix": f"{prefix}-", "bucket": BUCKET,
                "prefix": prefix}
        creds = {"region": CREDENTIALS["region"], "access_key": MOTO_CREDENTIALS["access_key"],
                 "secret_key": MOTO_CREDENTIALS["secret_key"]}
        with FaultProxy(moto, seed=SEED) as proxy:
            rules: list[tuple[str, Any]] = []

            def arm(step: Step) -> None:
                if step.fault == "s3-lost":
                    rule = proxy.inject("lost", method="PUT", path="*", times=1)
                elif step.fault == "throttle":
                    rule = proxy.inject("throttle", operation="*", times=2)
                elif step.fault in ("outage", "outage-commit"):  # each applies, none answers, until it passes
                    rule = proxy.inject("error", operation="TransactWriteItems", times=None,
                                        body=DYNAMO_COMMIT if step.fault == "outage-commit" else None)
                elif step.fault == "throttle-commit":  # refused, none applied, until it passes
                    rule = proxy.inject("throttle", operation="TransactWriteItems", times=None, body=DYNAMO_COMMIT)
                elif step.fault == "lost-commit":
                    rule = proxy.inject("lost", operation="TransactWriteItems", body=DYNAMO_COMMIT)
                else:
                    rule = proxy.inject(step.fault or "lost", operation="TransactWriteItems",
                                        times=1 if step.fault == "lost" else 2)
                rules.append((f"ddb-{step.fault}", rule))

            def disarm() -> dict[str, int]:
                proxy.clear()
                fired = {label: r.fired for label, r in rules if r.fired}
                rules.clear()
                return fired

            home = Home("dynamodb", spec, Places(directories=[root], s3=[S3Place(BUCKET, f"{prefix}/", moto, **creds)],
                                                 dynamodb=[DynamoPlace(f"{prefix}-", moto, **creds)]),
                        root, arm, disarm, faulty_endpoint=proxy.url)
            run_sequence(home, plan, tally)

    try:
        oracle()
    finally:
        with capsys.disabled():
            print("\n" + tally.render("dynamodb"))
