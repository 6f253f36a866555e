"""Standard ingest takes an idempotency key (issue 33 finding 7; DESIGN.md section 12):
``Table.ingest(..., request_id=)`` keeps the key with a digest of its input (the input
files' names and sizes, or an Arrow table's content) in the ingest's own commit, so a
retry after an unknown outcome or a killed worker stores every record once and a key
reused for other input is refused; and the ingest's job record is saved, started and
naming no outputs, before its first input is read (Deliver item 1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Optional

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sleeper_ops import Sleeper
from sleeper_ops.errors import IngestError
from sleeper_ops.io.storage import ObjectStore
from statestore.client_writes import ClientWriteRecord, IdempotencyKeyReusedError
from statestore.errors import CommitOutcomeUnknownError
from statestore.memory import InMemoryStateStore
from statestore.transactions import AddFiles

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "StringType"}], "sortKeyFields": [],
          "valueFields": [{"name": "v", "type": "StringType"}]}


class LostReply(InMemoryStateStore):
    """Loses the reply of the next add-files commit after it applied; ``forget_key``:
    the next look-up of a key finds nothing (a second ingest racing the first)."""

    lose_next = False
    forget_key = False

    def commit(self, table_id, txn, **kw):  # type: ignore[no-untyped-def]
        applied = super().commit(table_id, txn, **kw)
        if isinstance(txn, AddFiles) and self.lose_next:
            self.lose_next = False
            raise CommitOutcomeUnknownError("state store lost after COMMIT (injected; it applied)")
        return applied

    def client_write(self, table_id: str, request_id: str) -> Optional[ClientWriteRecord]:
        if self.forget_key:
            self.forget_key = False
            return None
        return super().client_write(table_id, request_id)


@pytest.fixture
def store() -> LostReply:
    return LostReply()


@pytest.fixture
def sleeper(store: LostReply, tmp_path: Path) -> Iterator[Sleeper]:
    s = Sleeper(state_store=store, objects=ObjectStore(str(tmp_path / "data")))
    yield s
    s.close()


@pytest.fixture
def t(sleeper: Sleeper) -> Any:
    return sleeper.create_table("t", SCHEMA, split_points=["m"])


def _file(path: Path, keys: list[str]) -> str:
    pq.write_table(pa.table({"key": keys, "v": [k.upper() for k in keys]}), path)
    return str(path)


def _all(t: Any) -> list[str]:
    return sorted(t.query(ranges=[("", None)])["key"].to_pylist())


def _objects(sleeper: Sleeper, t: Any) -> set[str]:
    return {o.key for o in sleeper.objects.list(t.info.table_id)}


def _committed(t: Any) -> set[str]:
    names = set(t.state().files)
    return names | {n.replace(".parquet", ".sketches") for n in names}


def test_an_ingest_retried_with_its_request_id_after_a_lost_reply_stores_every_record_once(
        t: Any, store: LostReply, sleeper: Sleeper, tmp_path: Path) -> None:
    path = _file(tmp_path / "in.parquet", ["a", "b", "c", "x", "y"])
    store.lose_next = True
    with pytest.raises(CommitOutcomeUnknownError):
        t.ingest([path], request_id="airflow-retry-1")
    again = t.ingest([path], request_id="airflow-retry-1")  # the task retry
    assert again.repeat and again.records == 5 and again.files == []
    assert _all(t) == ["a", "b", "c", "x", "y"]  # every record exactly once
    assert len(t.state().files) == 1 and len(t.state().references) == 2 and _objects(sleeper, t) <= _committed(t)


def test_an_ingest_key_reused_for_other_input_is_refused_in_one_line_naming_the_key(
        t: Any, tmp_path: Path) -> None:
    a = _file(tmp_path / "a.parquet", ["a", "b"])
    first = t.ingest([a], request_id="load-7")
    assert not first.repeat and first.records == 2
    b = _file(tmp_path / "b.parquet", ["c"])
    with pytest.raises(IdempotencyKeyReusedError, match="idempotency key 'load-7' was already used") as e:
        t.ingest([b], request_id="load-7")
    assert "\n" not in str(e.value)
    _file(tmp_path / "a.parquet", ["a", "b", "zzz"])  # the same name, rewritten: another request
    with pytest.raises(IdempotencyKeyReusedError):
        t.ingest([a], request_id="load-7")
    assert _all(t) == ["a", "b"]


def test_an_ingest_racing_its_own_repeat_answers_the_first_and_deletes_its_own_outputs(
        t: Any, store: LostReply, sleeper: Sleeper, tmp_path: Path) -> None:
    path = _file(tmp_path / "in.parquet", ["a", "n", "z"])
    first = t.ingest([path], request_id="k")
    store.forget_key = True  # the repeat's look-up misses the first: it reads, writes and then commits
    again = t.ingest([path], request_id="k")
    assert again.repeat and again.job_id == first.job_id and again.records == 3
    assert _all(t) == ["a", "n", "z"]
    assert _objects(sleeper, t) == _committed(t)  # the repeat's outputs are gone
    assert [j.status for j in t.jobs("ingest") if j.job_id != first.job_id] == ["failed"]


def test_an_arrow_table_ingest_is_keyed_by_its_content(t: Any) -> None:
    data = pa.table({"key": ["a", "q"], "v": ["1", "2"]})
    t.ingest(data, request_id="arrow-1")
    assert t.ingest(pa.table({"key": ["a", "q"], "v": ["1", "2"]}), request_id="arrow-1").repeat
    with pytest.raises(IdempotencyKeyReusedError):
        t.ingest(pa.table({"key": ["a", "q"], "v": ["1", "3"]}), request_id="arrow-1")
    assert _all(t) == ["a", "q"]


def test_a_request_id_on_a_stream_of_batches_is_refused_in_one_line(t: Any) -> None:
    batches = iter(pa.table({"key": ["a"], "v": ["1"]}).to_batches())
    with pytest.raises(IngestError, match="table t: an ingest's request_id needs files or an Arrow table"):
        t.ingest(batches, request_id="s-1")
    assert _all(t) == [] and t.jobs("ingest") == []


def test_an_ingest_saves_its_job_record_before_it_reads_its_first_input(t: Any, sleeper: Sleeper) -> None:
    seen: list[Any] = []

    def batches() -> Iterator[pa.RecordBatch]:
        seen.extend(sleeper.state_store.list_jobs(t.info.table_id, kind="ingest"))
        yield from pa.table({"key": ["a"], "v": ["1"]}).to_batches()

    t.ingest(batches())
    assert [(j.status, j.outputs) for j in seen] == [("started", ())]
    assert [j.status for j in t.jobs("ingest")] == ["committed"]


def test_an_ingest_of_no_records_leaves_no_unfinished_job(t: Any) -> None:
    """Its record, saved before the input was read, ends final (an unfinished one would
    hold every later tombstone)."""
    result = t.ingest(pa.table({"key": pa.array([], pa.string()), "v": pa.array([], pa.string())}))
    assert result.records == 0 and result.files == []
    assert [(j.status, j.rows_written, j.outputs) for j in t.jobs("ingest")] == [("committed", 0, ())]
    assert t.state().files == {}


def test_an_ingest_is_on_record_before_it_reads_the_delete_count_its_files_carry(
        t: Any, sleeper: Sleeper, monkeypatch: pytest.MonkeyPatch) -> None:
    """A delete committed after the ingest read the count covers the ingest's files; one
    committed before the record existed would be dropped by GC as covering no running
    job, and its records would come back with the ingest's commit."""
    store = sleeper.state_store
    real = store.tombstones
    seen: list[list[str]] = []

    def tombstones(table_id: str) -> Any:
        seen.append([j.status for j in store.list_jobs(table_id, kind="ingest")])
        return real(table_id)

    monkeypatch.setattr(store, "tombstones", tombstones)
    t.ingest(pa.table({"key": ["a"], "v": ["1"]}))
    assert seen and seen[0] == ["started"]
