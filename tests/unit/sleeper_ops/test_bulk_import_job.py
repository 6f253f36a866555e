"""The bulk import job without Spark: a simple in-process runner (read, split by leaf,
sort, write) stands in for the Spark one, so the job's own guarantees are tested fast:
idempotency by import key, outputs named first, failures and races."""

from __future__ import annotations

import threading

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from sleeper_ops import Sleeper
from sleeper_ops.bulk_import.job import ImportPlan, LeafOutput, bulk_import
from sleeper_ops.engine.leaves import leaf_indices
from sleeper_ops.errors import IngestError
from sleeper_ops.io.arrow_schema import sort_keys
from sleeper_ops.io.datafile import write_data_file
from sleeper_ops.io.inputs import read_batches
from statestore.partitions import PartitionTree

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "LongType"}], "valueFields": [{"name": "v", "type": "StringType"}]}


def local_runner(sleeper: Sleeper, pause: threading.Barrier | None = None):
    def run(plan: ImportPlan) -> list[LeafOutput]:
        data = pa.Table.from_batches([b for f in plan.files for b in read_batches(f, plan.table.schema)])
        if pause is not None:
            try:
                pause.wait(5)  # both runs write at once (unless one already gave way to the other)
            except threading.BrokenBarrierError:
                pass
        out = []
        for leaf, idx in leaf_indices(data, PartitionTree(plan.partitions)):
            part = data if idx is None else data.take(pa.array(idx))
            part = part.take(pc.sort_indices(part, sort_keys=sort_keys(plan.table.schema)))
            w = write_data_file(sleeper.objects, plan.output_keys[leaf.id], plan.table.schema, part)
            out.append(LeafOutput(leaf.id, w.key, w.record_count))
        return out
    return run


@pytest.fixture
def inputs(tmp_path):
    d = tmp_path / "raw"
    d.mkdir()
    for i in range(3):
        pq.write_table(pa.table({"key": pa.array(range(i * 1000, i * 1000 + 1000), pa.int64()),
                                 "v": [f"v{i}"] * 1000}), d / f"p{i}.parquet")
    return d


def _keys(t) -> list[int]:
    return t.query(ranges=[(-(2**63), None)]).column("key").to_pylist()


def test_a_key_imports_once_and_its_outputs_were_named_before_they_were_written(sleeper, inputs):
    t = sleeper.create_table("t", SCHEMA, properties={"sleeper.table.bulk.import.min.leaf.partitions": "4",
                                                      "sleeper.table.bulk.import.min.rows.per.leaf": "1"})
    named: list[tuple[str, ...]] = []
    runner = local_runner(sleeper)

    def run(plan: ImportPlan) -> list[LeafOutput]:
        rec = sleeper.state_store.get_job(t.info.table_id, plan.job_id)
        named.append(rec.outputs)  # what the record names as the run starts
        return runner(plan)

    r = bulk_import(sleeper.state_store, sleeper.objects, t.info, [str(inputs)], run=run, import_key="k")
    assert r.status == "committed" and r.records == 3000 and r.presplits == 3
    assert set(t.state().files) <= set(named[0])
    again = bulk_import(sleeper.state_store, sleeper.objects, t.info, [str(inputs)], run=run, import_key="k")
    assert again.status == "already imported" and len(named) == 1, "no second run"
    assert _keys(t) == list(range(3000))  # 3,000 records, each once


def test_a_repeated_import_key_is_answered_before_spark_starts(sleeper, inputs, monkeypatch, capsys):
    from sleeper_ops.bulk_import import runners
    from tests.unit.sleeper_ops.cli_runner import run_cli

    t = sleeper.create_table("t", SCHEMA)
    r = bulk_import(sleeper.state_store, sleeper.objects, t.info, [str(inputs)], run=local_runner(sleeper),
                    import_key="day-1")
    assert r.status == "committed"

    def no_spark(name: str = "spark"):  # type: ignore[no-untyped-def]
        raise AssertionError("Spark was started for an import key already imported")
    monkeypatch.setattr(runners, "load_bulk_import_runner", no_spark)
    code, out, err = run_cli(sleeper, monkeypatch, capsys, "bulk-import", "t", str(inputs), "--import-key", "day-1")
    assert code == 0 and out.strip() == "t: import key 'day-1' was already imported; nothing added"
    assert "spark-submit" not in err
    assert sleeper.table("t").already_imported("day-2") is None
    assert len(_keys(t)) == 3000


def test_a_failed_run_deletes_what_it_wrote_and_commits_nothing(sleeper, inputs):
    t = sleeper.create_table("t", SCHEMA, properties={"sleeper.table.bulk.import.min.leaf.partitions": "2",
                                                      "sleeper.table.bulk.import.min.rows.per.leaf": "1"})
    runner = local_runner(sleeper)

    def run_then_fail(plan: ImportPlan) -> list[LeafOutput]:
        runner(plan)
        raise IngestError("the cluster went away")

    with pytest.raises(IngestError):
        bulk_import(sleeper.state_store, sleeper.objects, t.info, [str(inputs)], run=run_then_fail, import_key="k")
    assert t.state().files == {}
    assert not [o.key for o in sleeper.objects.list(f"{t.info.table_id}/data")]
    (job,) = t.jobs(kind="bulk_import")
    assert job.status == "failed" and "cluster went away" in (job.reason or "")
    r = bulk_import(sleeper.state_store, sleeper.objects, t.info, [str(inputs)], run=runner, import_key="k")
    assert r.status == "committed" and _keys(t) == list(range(3000))


def test_two_runs_of_one_key_racing_add_every_record_once_and_lose_none(sleeper, inputs):
    """Both read the job's record before either saves its attempt: they get the same
    attempt number, but their output keys differ, so the loser's clean-up cannot delete
    the winner's files."""
    t = sleeper.create_table("t", SCHEMA, properties={"sleeper.table.bulk.import.min.leaf.partitions": "2",
                                                      "sleeper.table.bulk.import.min.rows.per.leaf": "1"})
    barrier = threading.Barrier(2)
    results, errors = [], []

    def go() -> None:
        try:
            results.append(bulk_import(sleeper.state_store, sleeper.objects, t.info, [str(inputs)],
                                       run=local_runner(sleeper, barrier), import_key="k"))
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=go) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    statuses = sorted([r.status for r in results] + ["error"] * len(errors))
    assert statuses.count("committed") <= 1, (statuses, errors)
    # whichever way the race went, the key now imports at most once more, then never again
    again = bulk_import(sleeper.state_store, sleeper.objects, t.info, [str(inputs)], run=local_runner(sleeper),
                        import_key="k")
    assert again.status == ("already imported" if "committed" in statuses else "committed")
    state = t.state()
    assert all(sleeper.objects.head(f) is not None for f in state.files), "a committed file was deleted"
    assert _keys(t) == list(range(3000))  # 3,000 records, each once


def test_an_import_key_reused_for_other_sources_is_refused_in_one_line_naming_the_key(
        sleeper, inputs, tmp_path, monkeypatch, capsys):
    """Issue 33 (Deliver 5): the import key is kept with a digest of its sources."""
    from statestore.client_writes import IdempotencyKeyReusedError
    from tests.unit.sleeper_ops.cli_runner import run_cli

    t = sleeper.create_table("t", SCHEMA)
    r = bulk_import(sleeper.state_store, sleeper.objects, t.info, [str(inputs)], run=local_runner(sleeper),
                    import_key="day-1")
    assert r.status == "committed"
    other = tmp_path / "other"
    other.mkdir()
    pq.write_table(pa.table({"key": pa.array([5000], pa.int64()), "v": ["x"]}), other / "q.parquet")
    with pytest.raises(IdempotencyKeyReusedError, match="idempotency key 'day-1' was already used"):
        bulk_import(sleeper.state_store, sleeper.objects, t.info, [str(other)], run=local_runner(sleeper),
                    import_key="day-1")
    code, out, err = run_cli(sleeper, monkeypatch, capsys, "bulk-import", "t", str(other), "--import-key", "day-1")
    assert code != 0 and len(err.strip().splitlines()) == 1 and "'day-1'" in err
    assert len(_keys(t)) == 3000  # nothing of the other sources


def test_an_import_racing_another_of_its_key_with_other_sources_is_refused_at_its_commit(sleeper, inputs, tmp_path):
    """The second passed the check before the first committed: its commit refuses it
    (the key and digest are kept in the first one's commit) and its files go."""
    from statestore.client_writes import IdempotencyKeyReusedError

    t = sleeper.create_table("t", SCHEMA)
    other = tmp_path / "other"
    other.mkdir()
    pq.write_table(pa.table({"key": pa.array([5000], pa.int64()), "v": ["x"]}), other / "q.parquet")
    runner = local_runner(sleeper)

    def first_commits_meanwhile(plan: ImportPlan) -> list[LeafOutput]:
        out = runner(plan)
        bulk_import(sleeper.state_store, sleeper.objects, t.info, [str(inputs)], run=runner, import_key="k")
        return out

    with pytest.raises(IdempotencyKeyReusedError):
        bulk_import(sleeper.state_store, sleeper.objects, t.info, [str(other)], run=first_commits_meanwhile,
                    import_key="k")
    assert _keys(t) == list(range(3000))
    assert {o.key for o in sleeper.objects.list(t.info.table_id) if o.key.endswith(".parquet")} == set(t.state().files)


def test_a_cli_bulk_import_without_a_key_imports_under_a_key_of_its_invocation(sleeper, inputs, monkeypatch, capsys):
    """The key reaches the job (and every resubmission of it: a Spark service or EMR
    retry imports once), and an invocation's key is its own."""
    import types

    from sleeper_ops.table import Table
    from tests.unit.sleeper_ops.cli_runner import run_cli

    sleeper.create_table("t", SCHEMA)
    keys: list[object] = []

    def fake_import(self, sources, *, import_key=None, **kw):  # type: ignore[no-untyped-def]
        keys.append(import_key)
        return types.SimpleNamespace(summary=lambda: "imported")

    monkeypatch.setattr(Table, "bulk_import", fake_import)
    for _ in range(2):
        code, out, err = run_cli(sleeper, monkeypatch, capsys, "bulk-import", "t", str(inputs))
        assert code == 0, err
    assert all(isinstance(k, str) and k.startswith("cli-bulk-import-") for k in keys), keys
    assert len(set(keys)) == 2
