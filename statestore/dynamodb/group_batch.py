"""The leader's half of a group commit (:mod:`statestore.dynamodb.group_commit`):
pending requests as items, the verdicts, and the choice of a batch.

A pending request ``p#<commit id>`` (in the ``requests`` table) holds everything a
leader needs to validate and log it: the encoded transaction (its body inline, or the
key of the blob holding it), the bookkeeping (commit id, whether to look the id up, the
job record's item attributes, the ingest job id), the owner's ``nonce`` (one per call: a
verdict names it, so an owner never takes another call's verdict for its own) and the
owner's clock ``t_ms`` (the order of the batch).

:func:`choose` walks the requests oldest first and sorts each into one of:

* **stale**: a verdict naming its nonce exists already (the item is a botocore retry's
  re-creation of a request already decided): its item is deleted, nothing else;
* **before**: its commit id was applied before (the ``c#`` item exists, or the job's
  record is committed with this attempt's outputs): verdict ``before`` (the owner's
  call returns False);
* **refused**: its bookkeeping or its transaction does not hold against the state, its
  item cannot be read (a malformed body), or its log item with its summary would be
  over DynamoDB's item limit (:mod:`statestore.dynamodb.sizes`): verdict ``refused``
  with the error's type and message (at most :data:`MESSAGE_LIMIT` characters);
* **accepted**: logged at the next free number;
* **deferred** (left pending for the next batch): it names an item (commit id, job
  record, ingest job) an earlier request of this batch names, it touches the whole
  table and is not first, or the batch is full.

Each request is validated against the state as the batch's earlier accepted requests
leave it, as if each were committed alone in turn: the leader keeps a working copy of
only the rows the batch touches (:meth:`Transaction.touches`, as
:func:`statestore.history.fragment_of` does for one transaction), validates each request
against it and applies each accepted one to it -- never to its cached state, which
changes only once the batch's transaction succeeded.
"""

from __future__ import annotations

import builtins
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from statestore.bookkeeping import Bookkeeping
from statestore.client_writes import ClientWrite
from statestore.dynamodb.blobs import BlobStore
from statestore.dynamodb.connection import Dynamo, b, get_n, get_s, n, s
from statestore.dynamodb.history import SUMMARY_LIMIT, summary_attribute
from statestore.dynamodb.jobs import EncodedJob, StoredJob, job_from_item
from statestore.dynamodb.log import EncodedTransaction, decode
from statestore.dynamodb.sizes import too_large
from statestore.errors import StateStoreUnavailableError, TransactionError
from statestore.state import TableState
from statestore.transactions import Touches, Transaction

PENDING = "p#"
VERDICT = "x#"
#: the DynamoDB table (role) of pending requests and verdicts: one of their own, so
#: reading the pending requests costs their number, not that of every job and commit
#: id item (moto's Query reads the whole table; its TransactWriteItems copies each
#: table a transaction names)
REQUESTS = "requests"
#: the most requests a leader reads at once (3 keys each in one BatchGetItem of at most 100)
MAX_REQUESTS = 25
#: TransactWriteItems limits, with a margin for the attribute names and the catalog check
MAX_ITEMS = 99
MAX_BYTES = 3_500_000
#: a request whose pending item would be larger goes the single-commit way (items hold 400 KB)
MAX_PENDING_BYTES = 350_000
#: the most characters of a refusal's message a verdict item keeps
MESSAGE_LIMIT = 10_000


def pending_key(table_id: str, commit_id: str) -> dict[str, Any]:
    return {"table_id": s(table_id), "sk": s(f"{PENDING}{commit_id}")}


def verdict_key(table_id: str, commit_id: str) -> dict[str, Any]:
    return {"table_id": s(table_id), "sk": s(f"{VERDICT}{commit_id}")}


def pending_size(encoded: EncodedTransaction, job: Optional[EncodedJob]) -> int:
    size = len(encoded.body or b"") + 200
    if job is not None:
        size += sum(len(v.get("S", "")) for v in job.attrs.values())
    return size


def pending_item(table_id: str, encoded: EncodedTransaction, books: Bookkeeping, job: Optional[EncodedJob],
                 nonce: str, t_ms: int) -> dict[str, Any]:
    """The pending item of a request (see the module docstring)."""
    item: dict[str, Any] = {**pending_key(table_id, books.commit_id), "nonce": s(nonce), "t_ms": n(t_ms),
                            "type": s(encoded.type), "check_id": {"BOOL": books.check_id}}
    if encoded.body is not None:
        item["body"] = b(encoded.body)
    else:
        assert encoded.blob_key is not None
        item["body_key"] = s(encoded.blob_key)
    if job is not None:
        item["job"] = {"M": job.attrs}
    if books.ingest_job_id is not None:
        item["ingest_job_id"] = s(books.ingest_job_id)
    if books.client_write is not None:  # the client's key: checked and written by the leader
        w = books.client_write
        item["client_write"] = {"M": {"id": s(w.request_id), "digest": s(w.digest),
                                      **({"answer": s(w.answer)} if w.answer else {})}}
    return item


@dataclass
class Request:
    """A pending request as a leader reads it."""

    commit_id: str
    nonce: str
    t_ms: int
    item: dict[str, Any]

    @classmethod
    def of(cls, item: dict[str, Any]) -> Request:
        return cls((get_s(item, "sk") or "")[len(PENDING):], get_s(item, "nonce") or "", get_n(item, "t_ms") or 0,
                   item)

    def transaction(self, blobs: BlobStore) -> Transaction:
        return decode(self.item, blobs)

    def encoded(self) -> EncodedTransaction:
        it = self.item
        return EncodedTransaction(get_s(it, "type") or "", it["body"]["B"] if "body" in it else None,
                                  get_s(it, "body_key"))

    def job(self, blobs: BlobStore) -> Optional[tuple[EncodedJob, Any]]:
        """The job's encoded attributes and record (None: no job)."""
        if "job" not in self.item:
            return None
        attrs = self.item["job"]["M"]
        return EncodedJob(attrs, get_s(attrs, "record_key")), job_from_item(attrs, blobs)

    def client_write(self) -> Optional[ClientWrite]:
        """The client's key and request digest (None: an unkeyed commit)."""
        if "client_write" not in self.item:
            return None
        w = self.item["client_write"]["M"]
        return ClientWrite(get_s(w, "id") or "", get_s(w, "digest") or "", get_s(w, "answer") or "")

    def size(self) -> int:
        return sum(len(str(v)) for v in self.item.values())


@dataclass(frozen=True)
class Verdict:
    """What became of a request: ``applied`` (logged by this batch), ``before`` (its
    commit id was applied before) or ``refused`` (``error``/``message``)."""

    kind: str
    nonce: str
    error: str = ""
    message: str = ""

    def item(self, table_id: str, commit_id: str, now_ms: int) -> dict[str, Any]:
        out = {**verdict_key(table_id, commit_id), "kind": s(self.kind), "nonce": s(self.nonce),
               "time_ms": n(now_ms)}
        if self.error:
            out["error"] = s(self.error)
            out["message"] = s(self.message[:MESSAGE_LIMIT])  # a verdict item always fits
        return out

    @classmethod
    def of(cls, item: dict[str, Any]) -> Verdict:
        return cls(get_s(item, "kind") or "", get_s(item, "nonce") or "", get_s(item, "error") or "",
                   get_s(item, "message") or "")

    def exception(self) -> BaseException:
        """The error the owner raises for a refusal: the refusing error's own type (a
        statestore error, or a builtin one), TransactionError when it is neither."""
        from statestore import client_writes, errors

        cls = (getattr(errors, self.error, None) or getattr(client_writes, self.error, None)
               or getattr(builtins, self.error, None))
        if not (isinstance(cls, type) and issubclass(cls, Exception)):
            cls = errors.TransactionError
        try:
            return cls(self.message)
        except Exception:  # an error type that takes other arguments
            return errors.TransactionError(f"{self.error}: {self.message}")


def refusal(e: BaseException, nonce: str) -> Verdict:
    return Verdict("refused", nonce, type(e).__name__, str(e))


class Working:
    """The rows of ``state`` the batch's requests touch, copied as they are first
    touched, and changed only by applying the batch's accepted transactions."""

    def __init__(self, state: TableState) -> None:
        self.state = state
        self.rows = TableState()
        self.rows.tombstones, self.rows.delete_count = dict(state.tombstones), state.delete_count
        self._pids: set[str] = set()
        self._names: set[str] = set()

    def cover(self, touches: Touches) -> TableState:
        """The working rows, with those ``touches`` names added (from ``state``) if new."""
        st, out = self.state, self.rows
        for pid in touches.partition_ids - self._pids:
            if pid in st.partitions:
                out.partitions[pid] = st.partitions[pid]
        for name in touches.filenames - self._names:
            if name in st.files:
                out.files[name] = st.files[name]
            for pid in st.refs_by_file.get(name, ()):
                out.put_reference(st.references[(name, pid)])
        self._pids |= touches.partition_ids
        self._names |= touches.filenames
        return out


@dataclass
class Accepted:
    """A request the batch logs: its transaction, bookkeeping, and what its job check read."""

    request: Request
    transaction: Transaction
    books: Bookkeeping
    stored_job: StoredJob
    job_encoded: Optional[EncodedJob]
    #: the log item's summary (statestore.dynamodb.history), from the working rows
    summary: dict[str, Any]
    #: what the transaction numbers (a delete's tombstone), kept with a client's key
    number: int = 0


@dataclass
class Batch:
    """The leader's choice: requests accepted in order, verdicts of the others by commit
    id, the stale items to delete, and the item keys and rows the batch touches."""

    accepted: list[Accepted] = field(default_factory=list)
    verdicts: dict[str, tuple[Request, Verdict]] = field(default_factory=dict)
    stale: list[Request] = field(default_factory=list)
    keys: set[str] = field(default_factory=set)

    def __len__(self) -> int:
        return len(self.accepted) + len(self.verdicts) + len(self.stale)


def choose(requests: list[Request], got: dict[str, dict[str, Any]], blobs: BlobStore, state: TableState,
           decide: Callable[[Request, Bookkeeping, Transaction, StoredJob, TableState], Optional[Verdict]],
           stored_job: Callable[[dict[str, Any]], StoredJob], budget_items: int = MAX_ITEMS) -> Batch:
    """Sort ``requests`` (oldest first) into a batch (see the module docstring). ``got``:
    the ``c#``, ``x#`` and ``j#`` items read for them, by sort key; ``state``: the
    leader's (not changed). ``decide``: the verdict of a request against the rows it
    is validated on (None: accepted). Stops when the items or bytes of one
    TransactWriteItems would run out, or after a request touching the whole table."""
    batch = Batch()
    working = Working(state)
    items = 1  # the catalog check
    size = 0
    for r in sorted(requests, key=lambda r: (r.t_ms, r.commit_id)):
        applied = got.get(f"c#{r.commit_id}")
        told = got.get(f"{VERDICT}{r.commit_id}")
        if (applied is not None and get_s(applied, "by") == r.nonce) or (
                told is not None and get_s(told, "nonce") == r.nonce):
            if items + 1 > budget_items:
                break
            batch.stale.append(r)
            items += 1
            continue
        try:
            job = r.job(blobs)
            txn = r.transaction(blobs) if applied is None else None
        except StateStoreUnavailableError:
            raise  # the blob store may answer the next leader
        except Exception as e:  # a request no leader can read: refused alone, the others go on
            if items + 2 > budget_items:
                break
            batch.verdicts[r.commit_id] = (r, refusal(unreadable(r, e), r.nonce))
            items += 2
            continue
        job_id = None if job is None else job[1].job_id
        keyed = r.client_write()
        keys = {f"c#{r.commit_id}", *([f"j#{job_id}"] if job_id else []),
                *([f"e#{r.item['ingest_job_id']['S']}"] if "ingest_job_id" in r.item else []),
                *([f"w#{keyed.request_id}"] if keyed is not None else [])}
        if keys & batch.keys:
            continue  # deferred: an item of this batch's
        need = 2 if applied is not None else 3 + (job is not None) + ("ingest_job_id" in r.item) + (keyed is not None)
        if items + need > budget_items or size + 2 * r.size() + SUMMARY_LIMIT > MAX_BYTES:
            break
        books = Bookkeeping(r.commit_id, None if job is None else job[1],
                            get_s(r.item, "ingest_job_id"),
                            check_id=bool(r.item.get("check_id", {}).get("BOOL", True)), client_write=keyed)
        if applied is not None:
            batch.verdicts[r.commit_id] = (r, Verdict("before", r.nonce))
            batch.keys |= keys
            items += 2
            continue
        assert txn is not None
        touched = txn.touches()
        if touched.whole_table and len(batch):
            break  # deferred: it goes first in a batch of its own
        rows = state if touched.whole_table else working.cover(touched)
        job_item = got.get(f"j#{job_id}") if job_id else None
        stored = stored_job(job_item) if job_item is not None else StoredJob(None, None, None)
        verdict = decide(r, books, txn, stored, rows)
        batch.keys |= keys
        if verdict is not None:
            batch.verdicts[r.commit_id] = (r, verdict)
            items += 2
            continue
        summary = summary_attribute(txn, rows, job_id)
        too_big = log_item_too_large(r, summary)  # every attribute counts (statestore.dynamodb.sizes)
        if too_big is not None:
            batch.verdicts[r.commit_id] = (r, refusal(too_big, r.nonce))
            items += 2
            continue
        batch.accepted.append(Accepted(r, txn, books, stored, None if job is None else job[0], summary,
                                       txn.number_in(rows)))
        items += need
        size += 2 * r.size() + SUMMARY_LIMIT
        if touched.whole_table:
            break
        txn.apply(rows)
    return batch


def unreadable(r: Request, e: BaseException) -> TransactionError:
    return TransactionError(f"commit {get_s(r.item, 'type')} to table {get_s(r.item, 'table_id')} (commit id "
                            f"{r.commit_id}): its pending request cannot be read, so it was refused: "
                            f"{type(e).__name__}: {e}")


def log_item_too_large(r: Request, summary: dict[str, Any]) -> Optional[BaseException]:
    """The refusal of ``r`` when its log item, with ``summary``, would not fit an item."""
    table_id = get_s(r.item, "table_id") or ""
    item = {**r.encoded().item(table_id, 10**20, r.commit_id, 10**20), "summary": summary}
    return too_large(table_id, get_s(r.item, "type") or "", item)


def read_items(d: Dynamo, table_id: str, keys: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """The items at ``keys`` (by role; at most 100 in all), by sort key, read
    consistently in one BatchGetItem."""
    out: dict[str, dict[str, Any]] = {}
    request: dict[str, Any] = {d.table(role): {"Keys": ks, "ConsistentRead": True} for role, ks in keys.items() if ks}
    for attempt in range(10):
        got = d.call(f"read the commit items of table {table_id}", d.client.batch_get_item, RequestItems=request)
        for items in got.get("Responses", {}).values():
            for it in items:
                out[get_s(it, "sk") or ""] = it
        request = got.get("UnprocessedKeys") or {}
        if not request:
            return out
        time.sleep(0.01 * 2 ** attempt)
    raise StateStoreUnavailableError(f"DynamoDB kept leaving the commit items of table {table_id} unread")


def prune_requests(d: Dynamo, table_id: str, before_ms: int) -> int:
    """Delete verdicts and pending requests older than ``before_ms`` (their owners gave
    up long ago: an owner withdraws its request within its timeout)."""
    old = []
    for prefix, at in ((VERDICT, "time_ms"), (PENDING, "t_ms")):
        old += [{"table_id": it["table_id"], "sk": it["sk"]} for it in d.query(
            f"list the old commit requests of table {table_id}", REQUESTS, "table_id = :t AND begins_with(sk, :p)",
            {":t": s(table_id), ":p": s(prefix)}, projection="table_id, sk, time_ms, t_ms")
            if (get_n(it, at) or 0) < before_ms]
    d.batch_delete(f"prune the old commit requests of table {table_id}", REQUESTS, old)
    return len(old)
