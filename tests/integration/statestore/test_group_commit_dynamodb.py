"""Group commit on DynamoDB (:mod:`statestore.dynamodb.group_commit`) on moto: committers
with stores of their own (as processes would be) hand their compaction commits to a
leader; every valid commit applies exactly once, every invalid one is refused with the
error a single commit raises, a lost reply mid-batch loses and doubles nothing, and an
owner giving up while a leader commits gets exactly one outcome."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

from statestore import (
    AddFiles,
    AssignJobIds,
    FileReference,
    FileReferenceError,
    JobAssignment,
    ReplaceFileReferences,
    Schema,
    partitions_from_split_points,
)
from statestore.dynamodb import group_commit as group_commit_module
from statestore.dynamodb import open_dynamodb
from statestore.dynamodb.connection import s
from statestore.dynamodb.contention import Contention
from statestore.errors import BookkeepingError, CommitConflictError
from statestore.jobs import JobRecord
from tests.faults.aws_proxy import FaultProxy
from tests.integration.statestore.conftest import dynamodb_options

pytestmark = pytest.mark.integration

SCHEMA = Schema.from_dict({"rowKeyFields": [{"name": "key", "type": "StringType"}]})
COMMITTERS = 4


@pytest.fixture
def options(moto_endpoint_url: str, tmp_path: Path) -> dict[str, Any]:
    return {**dynamodb_options(moto_endpoint_url, tmp_path / "blobs"), "group_commit": True}


@pytest.fixture(autouse=True)
def always_grouped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every commit of a group-commit store goes through the request protocol, as when
    other committers were seen lately (test_group_commit_adaptive_dynamodb.py tests the
    choice itself)."""
    monkeypatch.setattr(Contention, "active", lambda self, table_id: True)


@pytest.fixture
def proxy(moto_endpoint_url: str) -> Iterator[FaultProxy]:
    with FaultProxy(moto_endpoint_url, seed=24) as p:
        yield p


def _table_with_jobs(store: Any, jobs: int) -> tuple[str, list[JobAssignment], dict[str, JobRecord]]:
    """A table with ``jobs`` compaction jobs of 2 inputs each, assigned, their started
    records saved; returns the records each commit saves (committed)."""
    parts = partitions_from_split_points(SCHEMA, ["g", "p"])
    tid = store.create_table(f"t{uuid.uuid4().hex[:6]}", SCHEMA, parts).table_id
    leaves = sorted(p.id for p in parts if p.is_leaf)
    refs = [FileReference(f"in/{i:04d}", leaves[i // 2 % len(leaves)], 10) for i in range(2 * jobs)]
    store.commit(tid, AddFiles(tuple(refs)))
    assigned = [JobAssignment(f"job{k:03d}", refs[2 * k].partition_id, (refs[2 * k].filename, refs[2 * k + 1].filename))
                for k in range(jobs)]
    store.commit(tid, AssignJobIds(tuple(assigned)))
    records = {}
    for a in assigned:
        rec = JobRecord.created(tid, a.job_id, "compaction").started(outputs=[f"out/{a.job_id}"])
        store.put_job(rec)
        records[a.job_id] = rec.finished(20, 20, f"out/{a.job_id}").committed()
    return tid, assigned, records


def _compaction(a: JobAssignment, output: str) -> ReplaceFileReferences:
    return ReplaceFileReferences(a.job_id, a.partition_id, a.filenames, FileReference(output, a.partition_id, 20))


def _leftovers(store: Any, tid: str) -> list[str]:
    """The group commit's pending requests and verdicts still in the items table."""
    d = store._dynamo
    return [it["sk"]["S"] for it in d.query("leftovers", "requests", "table_id = :t", {":t": s(tid)})]


def _run(committers: int, work: Any) -> list[Any]:
    results: list[Any] = [None] * committers
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = work(i)
        except BaseException as e:  # reported by the test
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(committers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    return results


def test_concurrent_committers_apply_each_valid_commit_once_and_refuse_each_invalid_one(options):
    setup = open_dynamodb(**options)
    tid, jobs, records = _table_with_jobs(setup, 24)
    stores = [open_dynamodb(**options) for _ in range(COMMITTERS)]

    def commit_all(i: int) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = []
        for k, a in enumerate(jobs[i::COMMITTERS]):
            out.append(("valid", stores[i].commit(tid, _compaction(a, f"out/{a.job_id}"), job=records[a.job_id])))
            # the same job again, its inputs replaced already: refused, with or without its record
            again = _compaction(a, f"again/{a.job_id}")
            try:
                if k % 2:
                    stores[i].commit(tid, again, job=records[a.job_id])
                else:
                    stores[i].commit(tid, again)
                out.append(("invalid", "applied"))
            except (BookkeepingError, FileReferenceError) as e:
                out.append(("invalid", type(e).__name__))
        return out

    outcomes = [o for per in _run(COMMITTERS, commit_all) for o in per]
    assert [r for kind, r in outcomes if kind == "valid"] == [True] * len(jobs)
    refused = [r for kind, r in outcomes if kind == "invalid"]
    half = len(jobs) // 2
    assert sorted(refused) == ["BookkeepingError"] * half + ["FileReferenceError"] * half

    state = open_dynamodb(**options).load_state(tid)
    assert sorted(r.filename for r in state.references.values()) == sorted(f"out/{a.job_id}" for a in jobs)
    assert len(state.references) == len(jobs)
    assert all(setup.get_job(tid, a.job_id).status == "committed" for a in jobs)
    assert open_dynamodb(**options).transaction_number(tid) == 3 + len(jobs)  # each logged once
    assert _leftovers(setup, tid) == []


def test_a_leaders_lost_reply_mid_batch_leaves_every_commit_applied_once(options, proxy):
    setup = open_dynamodb(**options)
    tid, jobs, records = _table_with_jobs(setup, 16)
    stores = [open_dynamodb(**{**options, "endpoint_url": proxy.url}) for _ in range(COMMITTERS)]
    rule = proxy.inject("lost", operation="TransactWriteItems", body=b'"p#', times=3)
    error = proxy.inject("error", operation="TransactWriteItems", body=b'"p#', times=2)

    def commit_all(i: int) -> list[bool]:
        return [stores[i].commit(tid, _compaction(a, f"out/{a.job_id}"), job=records[a.job_id])
                for a in jobs[i::COMMITTERS]]

    results = [r for per in _run(COMMITTERS, commit_all) for r in per]
    assert rule.fired == 3 and error.fired == 2
    assert len(results) == len(jobs)  # each True, or False when found applied after its own lost reply
    state = open_dynamodb(**options).load_state(tid)
    assert sorted(r.filename for r in state.references.values()) == sorted(f"out/{a.job_id}" for a in jobs)
    assert open_dynamodb(**options).transaction_number(tid) == 3 + len(jobs)  # no commit logged twice
    assert _leftovers(setup, tid) == []


@pytest.mark.parametrize("first", ["owner_withdraws", "leader_commits"])
def test_an_owner_giving_up_while_a_leader_commits_gets_exactly_one_outcome(options, monkeypatch, first):
    setup = open_dynamodb(**options)
    tid, jobs, _ = _table_with_jobs(setup, 2)
    owner, leader = open_dynamodb(**options), open_dynamodb(**options)
    owner.outcome_timeout_seconds = 0.5
    # the owner never leads: it waits, then gives up
    monkeypatch.setattr(owner.commits.group, "_lead", lambda *a: (None, False))
    monkeypatch.setattr(group_commit_module, "TAKEOVER_SECONDS", 0.0)  # the leader leads at once
    withdrawing, committed, withdrawn = threading.Event(), threading.Event(), threading.Event()

    real_delete = owner.commits.group.requests.delete_pending

    def delete_pending(*args: Any) -> None:
        withdrawing.set()
        if first == "leader_commits":
            assert committed.wait(30)
        real_delete(*args)
        withdrawn.set()

    monkeypatch.setattr(owner.commits.group.requests, "delete_pending", delete_pending)
    client = leader._dynamo.client
    real_transact = client.transact_write_items

    def transact(**kwargs: Any) -> Any:
        if first == "owner_withdraws" and b"p#" in repr(kwargs).encode():
            assert withdrawn.wait(30)
        out = real_transact(**kwargs)
        committed.set()
        return out

    monkeypatch.setattr(client, "transact_write_items", transact)
    outcome: list[Any] = []

    def own() -> None:
        try:
            outcome.append(owner.commit(tid, _compaction(jobs[0], "out/owner")))
        except CommitConflictError as e:
            outcome.append(e)

    t = threading.Thread(target=own)
    t.start()
    deadline = time.monotonic() + 30
    while not _leftovers(setup, tid):  # the leader starts once the owner's request is pending
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert leader.commit(tid, _compaction(jobs[1], "out/leader")) is True
    t.join(timeout=60)
    names = sorted(r.filename for r in open_dynamodb(**options).load_state(tid).references.values())
    if first == "owner_withdraws":
        assert isinstance(outcome[0], CommitConflictError)
        assert names == ["in/0000", "in/0001", "out/leader"]
    else:
        assert outcome == [True]
        assert names == ["out/leader", "out/owner"]
    assert _leftovers(setup, tid) == []


@pytest.mark.parametrize("accepted", [True, False], ids=["batch_accepted", "batch_of_verdicts_only"])
def test_a_leader_whose_copy_is_behind_the_log_decides_on_the_log_not_its_copy(options, accepted):
    """A store that keeps leading validates on its own copy of the state, without
    reading the log (statestore.dynamodb.group_commit, step 2). Another store commits
    between two of its batches: the leader's next batch must be decided on the log as
    it is, whether the copy would accept the request (its log item n + 1 is taken) or
    refuse it (a batch holding only a verdict: nothing else ties it to the log)."""
    setup = open_dynamodb(**options)
    tid, jobs, records = _table_with_jobs(setup, 3)
    leader = open_dynamodb(**options)
    other = open_dynamodb(**{**options, "group_commit": False})
    assert leader.commit(tid, _compaction(jobs[0], "out/0"), job=records[jobs[0].job_id]) is True
    assert tid in leader.commits.group._leading  # its next commit validates on its copy
    reads: list[int] = []
    refresh = leader._cache.refresh
    leader._cache.refresh = lambda *a: reads.append(1) or refresh(*a)  # type: ignore[method-assign]
    if accepted:  # the other store takes log item n + 1; the leader's copy would accept jobs[1]'s commit
        assert other.commit(tid, _compaction(jobs[2], "out/2"), job=records[jobs[2].job_id]) is True
        assert leader.commit(tid, _compaction(jobs[1], "out/1"), job=records[jobs[1].job_id]) is True
        expected = ["out/0", "out/1", "out/2"]
    else:  # the other store adds the file the leader's next commit replaces; its copy would refuse it
        other.commit(tid, AddFiles((FileReference("late/a", jobs[1].partition_id, 5),)))
        other.commit(tid, AssignJobIds((JobAssignment("late", jobs[1].partition_id, ("late/a",)),)))
        late = ReplaceFileReferences("late", jobs[1].partition_id, ("late/a",),
                                     FileReference("out/late", jobs[1].partition_id, 5))
        assert leader.commit(tid, late) is True
        expected = ["in/0002", "in/0003", "in/0004", "in/0005", "out/0", "out/late"]
    assert reads, "the leader never read the log again after its batch failed"
    state = open_dynamodb(**options).load_state(tid)
    assert sorted(r.filename for r in state.references.values()) == expected
    assert sum(r.record_count for r in state.references.values()) == (60 if accepted else 4 * 10 + 20 + 5)
    assert open_dynamodb(**options).transaction_number(tid) == 3 + (3 if accepted else 4)
    assert _leftovers(setup, tid) == []


def test_keyed_commits_through_group_commit_apply_once_per_key_and_refuse_another_request(options, monkeypatch):
    """Issue 33: a commit carrying a client's idempotency key goes through the request
    protocol too: the leader checks the key item and writes it with the batch. Per key,
    the first request applies once; its repeats answer False; another request under the
    key is refused with IdempotencyKeyReusedError, whichever committer sends it."""
    from statestore import DeleteRecords, Range, Region
    from statestore.client_writes import ClientWrite, IdempotencyKeyReusedError, digest_of
    from statestore.dynamodb.group_commit import DynamoGroupCommit

    setup = open_dynamodb(**options)
    tid = setup.create_table(f"t{uuid.uuid4().hex[:6]}", SCHEMA, partitions_from_split_points(SCHEMA, [])).table_id
    stores = [open_dynamodb(**options) for _ in range(COMMITTERS)]
    keys = [f"erase-{k}" for k in range(6)]
    grouped: list[bool] = []
    real = DynamoGroupCommit.commit

    def counted(self, table_id, transaction, books, *args, **kwargs):  # type: ignore[no-untyped-def]
        grouped.append(books.client_write is not None)
        return real(self, table_id, transaction, books, *args, **kwargs)

    monkeypatch.setattr(DynamoGroupCommit, "commit", counted)

    def delete(lo: str) -> DeleteRecords:
        return DeleteRecords((Region((Range("key", lo, lo + "~"),)),))

    def send(i: int) -> list[tuple[str, int, Any]]:
        out: list[tuple[str, int, Any]] = []
        for key in keys:  # committers 0 and 2 send request "a", 1 and 3 request "b", of every key at once
            req = "ab"[i % 2]
            try:
                out.append((key, i % 2, stores[i].commit(tid, delete(req), client_write=ClientWrite(
                    key, digest_of("delete", req.encode())))))
            except IdempotencyKeyReusedError:
                out.append((key, i % 2, "refused"))
        return out

    outcomes = [o for per in _run(COMMITTERS, send) for o in per]
    for key in keys:
        mine = [(req, o) for k, req, o in outcomes if k == key]
        (winner,) = {req for req, o in mine if o is True}
        assert sorted(str(o) for req, o in mine if req == winner) == ["False", "True"], (key, mine)
        assert [o for req, o in mine if req != winner] == ["refused", "refused"], (key, mine)
    state = open_dynamodb(**options).load_state(tid)
    assert state.delete_count == len(keys)  # one tombstone a key
    assert sorted(setup.client_write(tid, k).seq for k in keys) == list(range(1, len(keys) + 1))
    assert _leftovers(setup, tid) == []
    assert len(grouped) == COMMITTERS * len(keys) and all(grouped)  # every keyed commit was a request
