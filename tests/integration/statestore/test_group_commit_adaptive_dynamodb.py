"""A DynamoDB store with ``group_commit=True`` chooses per commit (on moto;
:mod:`statestore.dynamodb.contention`): alone, it commits by itself and writes no
request; once a try loses the race for the next log number, that commit and the
following ones go through group commit; alone again for the contention time, it
commits by itself again. Whichever way, each commit applies exactly once."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from statestore.dynamodb import open_dynamodb
from statestore.dynamodb.contention import Contention
from tests.faults.aws_proxy import FaultProxy
from tests.integration.statestore.conftest import dynamodb_options
from tests.integration.statestore.test_group_commit_dynamodb import (
    COMMITTERS,
    _compaction,
    _leftovers,
    _run,
    _table_with_jobs,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def options(moto_endpoint_url: str, tmp_path: Path) -> dict[str, Any]:
    return {**dynamodb_options(moto_endpoint_url, tmp_path / "blobs"), "group_commit": True}


def _requests_calls(store: Any) -> Counter[str]:
    """A count, by operation, of the store's DynamoDB calls naming its ``requests``
    table (group commit's pending requests and verdicts), kept up to date."""
    calls: Counter[str] = Counter()
    table = store._dynamo.options.table_prefix + "requests"

    def count(params: Any, model: Any, **_: Any) -> None:
        named = {params.get("TableName"), *(params.get("RequestItems") or {}),
                 *(next(iter(it.values())).get("TableName") for it in params.get("TransactItems") or [])}
        if table in named:
            calls[model.name] += 1

    store._dynamo.client.meta.events.register("provide-client-params.dynamodb.*", count)
    return calls


def test_a_lone_committer_commits_by_itself_and_writes_no_request(options):
    setup = open_dynamodb(**options)
    tid, jobs, records = _table_with_jobs(setup, 8)
    store = open_dynamodb(**options)
    calls = _requests_calls(store)
    assert [store.commit(tid, _compaction(a, f"out/{a.job_id}"), job=records[a.job_id]) for a in jobs] == [True] * 8
    assert set(calls) <= {"Query", "DescribeTable"}  # no request put, no verdict read: a look for others' requests
    assert not store.commits.contention.active(tid)
    state = open_dynamodb(**options).load_state(tid)
    assert sorted(r.filename for r in state.references.values()) == sorted(f"out/{a.job_id}" for a in jobs)
    assert sum(r.record_count for r in state.references.values()) == 8 * 20
    assert open_dynamodb(**options).transaction_number(tid) == 3 + 8
    assert all(setup.get_job(tid, a.job_id).status == "committed" for a in jobs)


def test_a_try_that_loses_the_race_goes_through_group_commit_until_the_committer_is_alone_again(options):
    setup = open_dynamodb(**options)
    tid, jobs, records = _table_with_jobs(setup, 4)
    store = open_dynamodb(**options)
    store.commits.group.contention = Contention(seconds=0.5)
    other = open_dynamodb(**{**options, "group_commit": False})
    calls = _requests_calls(store)
    client = store._dynamo.client
    real_transact = client.transact_write_items
    raced: list[bool] = []

    def transact(**kwargs: Any) -> Any:
        if not raced:  # the other store takes the next log number just before this store's first try
            raced.append(other.commit(tid, _compaction(jobs[3], "out/other"), job=records[jobs[3].job_id]))
        return real_transact(**kwargs)

    client.transact_write_items = transact  # type: ignore[method-assign]
    assert store.commit(tid, _compaction(jobs[0], "out/0"), job=records[jobs[0].job_id]) is True
    assert raced == [True]
    assert calls["PutItem"] == 1  # its request: the commit went through group commit
    assert store.commits.contention.active(tid)
    assert store.commit(tid, _compaction(jobs[1], "out/1"), job=records[jobs[1].job_id]) is True
    assert calls["PutItem"] == 2  # still grouped within the contention time
    time.sleep(0.6)
    assert store.commit(tid, _compaction(jobs[2], "out/2"), job=records[jobs[2].job_id]) is True
    assert calls["PutItem"] == 2  # alone for the contention time: by itself again
    state = open_dynamodb(**options).load_state(tid)
    assert sorted(r.filename for r in state.references.values()) == ["out/0", "out/1", "out/2", "out/other"]
    assert sum(r.record_count for r in state.references.values()) == 4 * 20
    assert open_dynamodb(**options).transaction_number(tid) == 3 + 4  # each commit logged once
    assert _leftovers(setup, tid) == []


def test_committers_choosing_for_themselves_apply_each_commit_once(options):
    setup = open_dynamodb(**options)
    tid, jobs, records = _table_with_jobs(setup, 32)
    stores = [open_dynamodb(**options) for _ in range(COMMITTERS)]

    def commit_all(i: int) -> list[bool]:
        return [stores[i].commit(tid, _compaction(a, f"out/{a.job_id}"), job=records[a.job_id])
                for a in jobs[i::COMMITTERS]]

    assert [r for per in _run(COMMITTERS, commit_all) for r in per] == [True] * len(jobs)
    state = open_dynamodb(**options).load_state(tid)
    assert sorted(r.filename for r in state.references.values()) == sorted(f"out/{a.job_id}" for a in jobs)
    assert sum(r.record_count for r in state.references.values()) == len(jobs) * 20
    assert open_dynamodb(**options).transaction_number(tid) == 3 + len(jobs)
    assert all(setup.get_job(tid, a.job_id).status == "committed" for a in jobs)
    assert _leftovers(setup, tid) == []


def test_a_committer_alone_in_the_log_joins_the_group_when_others_requests_are_pending(options, monkeypatch):
    """Requests another committer left pending cannot land while a single committer
    takes every log number first: the single committer must look for them (here at
    every commit) and lead them in its batch. The other committer never leads, so only
    that look decides its request."""
    setup = open_dynamodb(**options)
    tid, jobs, records = _table_with_jobs(setup, 2)
    alone = open_dynamodb(**options)
    alone.commits.group.contention = Contention(check_seconds=0.0)
    waiting = open_dynamodb(**options)
    waiting.commits.contention.seen(tid)  # it has met others: its commit is a request
    waiting.outcome_timeout_seconds = 15.0
    monkeypatch.setattr(waiting.commits.group, "_lead", lambda *a: (None, False))  # ...which it never leads itself
    calls = _requests_calls(alone)
    outcome: list[Any] = []
    thread = threading.Thread(target=lambda: outcome.append(
        waiting.commit(tid, _compaction(jobs[1], "out/1"), job=records[jobs[1].job_id])))
    thread.start()
    deadline = time.monotonic() + 30
    while not _leftovers(setup, tid):
        assert time.monotonic() < deadline, "the waiting committer's request never appeared"
        time.sleep(0.01)
    assert alone.commit(tid, _compaction(jobs[0], "out/0"), job=records[jobs[0].job_id]) is True
    thread.join(timeout=60)
    assert outcome == [True]  # decided in the batch the single committer led
    assert calls["PutItem"] == 1  # the single committer's own commit went through group commit
    state = open_dynamodb(**options).load_state(tid)
    assert sorted(r.filename for r in state.references.values()) == ["out/0", "out/1"]
    assert sum(r.record_count for r in state.references.values()) == 2 * 20
    assert open_dynamodb(**options).transaction_number(tid) == 3 + 2
    assert _leftovers(setup, tid) == []


def test_a_failed_look_for_others_requests_leaves_the_commit_to_its_single_try(options, moto_endpoint_url):
    """The look for other committers' pending requests is a read before any write: when
    DynamoDB fails it (here every try botocore makes answers 500), the commit goes on as
    a single commit, which applies once."""
    setup = open_dynamodb(**options)
    tid, jobs, records = _table_with_jobs(setup, 1)
    with FaultProxy(moto_endpoint_url, seed=3) as proxy:
        store = open_dynamodb(**{**options, "endpoint_url": proxy.url})
        store.commits.group.contention = Contention(check_seconds=0.0)
        store.load_state(tid)  # the table's tables exist and its state is read, so the next Query is the look
        rule = proxy.inject("error", operation="Query", body=b'requests"', times=None)
        assert store.commit(tid, _compaction(jobs[0], "out/0"), job=records[jobs[0].job_id]) is True
        assert rule.fired >= 1
    state = open_dynamodb(**options).load_state(tid)
    assert sorted(r.filename for r in state.references.values()) == ["out/0"]
    assert sum(r.record_count for r in state.references.values()) == 20
    assert open_dynamodb(**options).transaction_number(tid) == 3 + 1
    assert setup.get_job(tid, jobs[0].job_id).status == "committed"
