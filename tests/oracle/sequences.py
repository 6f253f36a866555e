"""Running one sequence of the erasure oracle (tests/integration/test_erasure_oracle.py)
on a home of its own: the faults armed per step, the retries a client would make, a
writer killed with SIGKILL, and the checks at the end (the model; the erasure report
until clean, then the raw scan)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
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

from tests.oracle.plans import BIG_PAYLOAD, BIG_ROWS, DAY_MS, PAD_KEYS, PROPERTIES, SCHEMA, SEED, SOON, Model, Step
from tests.oracle.raw_scan import Places, ScanResult, raw_scan
from tests.oracle.stores import ingest_options, open_sleeper


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
    groups: dict[str, set[str]] = {}
    for h in result.hits:
        kind = re.sub(r"[0-9a-f]{8,}|\d+", "#", h.where)
        groups.setdefault(f"{kind} ({h.how})", set()).add(h.needle)
    return "\n".join(f"  {k}: {len(v)} keys, e.g. {sorted(v)[0]}" for k, v in sorted(groups.items()))

