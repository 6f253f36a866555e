"""Serialisation cost of the state store's transactions and records, this checkout
against another (e.g. the release before the codec), in alternating processes.

    python bench/serialisation.py                       # this checkout, 3 runs
    python bench/serialisation.py --against ../old-checkout --runs 3

Each run is a fresh process that imports ``statestore`` from one checkout and times,
after a warm-up: encoding (``transaction_to_dict``) and decoding
(``transaction_from_dict``) 20,000 mixed transactions, the same for 20,000 mixed
records (job records, ingest requests, tombstones, history summaries), and writing and
loading a DynamoDB snapshot of a table with 10,000 file references, each with the
garbage collector off. Runs alternate
between the checkouts; it prints each figure's median and spread (min-max) per
checkout and the ratio of the medians (this / other). It also checks that both
checkouts wrote the same bytes (a digest of every encoded transaction, record and
snapshot).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
FIGURES = ("transactions_encode_s", "transactions_decode_s", "records_encode_s", "records_decode_s",
           "snapshot_write_s", "snapshot_load_s")


def _workload(n: int, refs: int) -> tuple[list[Any], list[Any], Any]:
    """``n`` mixed transactions, ``n`` mixed records, a state of ``refs`` file references."""
    from statestore import (
        AddFiles,
        AssignJobIds,
        DeleteFiles,
        DeleteRecords,
        DropFileReferences,
        DropTombstones,
        FileReference,
        JobAssignment,
        Partition,
        ReplaceFileReferences,
        Schema,
        SplitFileReference,
        SplitFileReferences,
        SplitPartition,
    )
    from statestore.deletes import Tombstone
    from statestore.files import FileRecord
    from statestore.history import TransactionSummary
    from statestore.ingest_requests import IngestRequest
    from statestore.jobs import JobRecord
    from statestore.partitions import root_region, split_children
    from statestore.state import TableState

    schema = Schema.from_dict({"rowKeyFields": [{"name": "key", "type": "StringType"}]})
    root = Partition("root", root_region(schema))
    parent, left, right = split_children(root, 0, "m", "left", "right")
    region = left.region
    t = 1_700_000_000_000

    def ref(i: int, pid: str = "left", **kw: Any) -> FileReference:
        return FileReference(f"table/data/partition_{pid}/{i:08d}.parquet", pid, 1000 + i, update_time=t, **kw)

    makers = [
        lambda i: AddFiles((ref(i), ref(i + 1, "right", delete_horizon=2)), t),
        lambda i: SplitFileReferences((SplitFileReference(ref(i).filename, "root", (
            ref(i, count_approximate=True, whole_file=False),
            ref(i, "right", count_approximate=True, whole_file=False))),), t),
        lambda i: AssignJobIds((JobAssignment(f"job-{i}", "left", (ref(i).filename, ref(i + 1).filename)),), t),
        lambda i: ReplaceFileReferences(f"job-{i}", "left", (ref(i).filename, ref(i + 1).filename), ref(i + 2), t),
        lambda i: DeleteFiles((ref(i).filename, ref(i + 1).filename)),
        lambda i: DeleteRecords((region,), "count > 3", i, t),
        lambda i: DropFileReferences(((ref(i).filename, "left"),), t),
        lambda i: SplitPartition(parent, left, right),
        lambda i: DropTombstones((i, i + 1)),
    ]
    transactions = [makers[i % len(makers)](i) for i in range(n)]
    record_makers = [
        lambda i: JobRecord("t1", f"job-{i}", "compaction", "committed", "left", 2, t, t + 1, t + 2, t + 3, 30, 28,
                            None, "dag/run", 1, "out.parquet", ("out.parquet", "out.sketches")),
        lambda i: IngestRequest(f"r-{i}", "t1", f"s3://raw/{i}.jsonl", 123, t),
        lambda i: Tombstone(i, (region,), None, i, t),
        lambda i: TransactionSummary(i, t, "add_files", 2, 0, 2000, 0, f"job-{i}"),
    ]
    records = [record_makers[i % len(record_makers)](i) for i in range(n)]
    state = TableState()
    pids = [f"p{i:03d}" for i in range(100)]
    state.partitions = {p: Partition(p, region) for p in pids}
    for i in range(refs):
        r = ref(i, pids[i % 100])
        state.put_reference(r)
        state.files[r.filename] = FileRecord(r.filename, t)
    return transactions, records, state


def _time(fn: Any, arg: Any) -> tuple[float, Any]:
    """Seconds ``fn(arg)`` took, with the garbage collector off (as timeit does: its
    passes over everything alive here cost as much as the work timed)."""
    import gc
    import time

    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        out = fn(arg)
        return time.perf_counter() - start, out
    finally:
        gc.enable()


def child(n: int, refs: int) -> dict[str, Any]:
    """One run of this process's ``statestore`` (see the module docstring)."""
    import hashlib

    import statestore
    from statestore.dynamodb.snapshots import decode_state, encode_state
    from statestore.transactions import transaction_from_dict, transaction_to_dict

    transactions, records, state = _workload(n, refs)
    digest = hashlib.sha256()
    for round_ in range(2):  # the first round warms up (and writes the digest)
        out: dict[str, Any] = {"statestore": str(Path(statestore.__file__).parent.parent)}
        out["transactions_encode_s"], encoded = _time(lambda xs: [transaction_to_dict(x) for x in xs], transactions)
        raw = json.loads(json.dumps(encoded))
        out["transactions_decode_s"], back = _time(lambda ds: [transaction_from_dict(d) for d in ds], raw)
        assert back == transactions
        out["records_encode_s"], rec = _time(lambda rs: [(type(r), r.to_dict()) for r in rs], records)
        rec_raw = [(cls, json.loads(json.dumps(d))) for cls, d in rec]
        out["records_decode_s"], rec_back = _time(lambda rs: [cls.from_dict(d) for cls, d in rs], rec_raw)
        assert rec_back == records
        out["snapshot_write_s"], blob = _time(encode_state, state)
        out["snapshot_load_s"], loaded = _time(decode_state, blob)
        assert loaded == state
        if round_ == 0:
            digest.update(json.dumps(encoded, separators=(",", ":")).encode())
            digest.update(json.dumps([d for _, d in rec], separators=(",", ":")).encode())
            digest.update(blob)
    out["digest"] = digest.hexdigest()[:16]
    return out


LABELS = {"transactions_encode_s": "transactions encode ({n:,})",
          "transactions_decode_s": "transactions decode ({n:,})",
          "records_encode_s": "records encode ({n:,})", "records_decode_s": "records decode ({n:,})",
          "snapshot_write_s": "snapshot write ({refs:,} references)",
          "snapshot_load_s": "snapshot load ({refs:,} references)"}


def run(checkout: Path, n: int, refs: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    p = subprocess.run([sys.executable, __file__, "--child", str(checkout), "--n", str(n), "--refs", str(refs)],
                       env=env, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(p.stdout.splitlines()[-1])
    return result


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.4f} ({min(values):.4f}\u2013{max(values):.4f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", type=Path, help="another checkout to compare with (its statestore)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--n", type=int, default=20_000, help="transactions, and records")
    ap.add_argument("--refs", type=int, default=10_000, help="file references in the snapshot")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, one run: checks the script runs")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.smoke:
        args.runs, args.n, args.refs = 1, 200, 200
    if args.child is not None:
        sys.path.insert(0, str(args.child))
        print(json.dumps(child(args.n, args.refs)))
        return 0
    checkouts = {"this": HERE} | ({"other": args.against.resolve()} if args.against else {})
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in checkouts}
    for _ in range(args.runs):
        for name, where in checkouts.items():
            results[name].append(run(where, args.n, args.refs))
    for name, runs in results.items():
        print(f"{name}: statestore from {runs[0]['statestore']}, digest of what it wrote {runs[0]['digest']}")
    print(f"median (min\u2013max) of {args.runs} runs, seconds")
    for fig in FIGURES:
        values = {name: [r[fig] for r in runs] for name, runs in results.items()}
        line = f"{LABELS[fig].format(n=args.n, refs=args.refs)}: this {_spread(values['this'])} s"
        if args.against:
            ratio = statistics.median(values["this"]) / statistics.median(values["other"])
            line += f"; other {_spread(values['other'])} s; ratio this/other {ratio:.2f}"
        print(line)
    if args.against:
        same = results["this"][0]["digest"] == results["other"][0]["digest"]
        print("same bytes written: " + ("yes" if same else "NO"))
        return 0 if same else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
