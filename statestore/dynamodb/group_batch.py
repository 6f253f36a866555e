"""The leader's half of a group commit (:mod:`statestore.dynamodb.group_commit`):
pending requests as items, the verdicts, and the choice of a batch.

A pending request ``p#<commit id>`` holds everything a leader needs to validate and
log it: the encoded transaction (its body inline, or the key of the blob holding it),
the bookkeeping (commit id, whether to look the id up, the job record's item
attributes, the ingest job id), the owner's ``nonce`` (one per call: a verdict names
it, so an owner never takes another call's verdict for its own) and the owner's clock
``t_ms`` (the order of the batch).

:func:`choose` walks the requests oldest first and sorts each into one of:

* **stale**: a verdict naming its nonce exists already (the item is a botocore retry's
  re-creation of a request already decided): its item is deleted, nothing else;
* **before**: its commit id was applied before (the ``c#`` item exists, or the job's
  record is committed with this attempt's outputs): verdict ``before`` (the owner's
  call returns False);
* **refused**: its bookkeeping or its transaction does not hold against the state:
  verdict ``refused`` with the error's type and message;
* **accepted**: logged at the next free number;
* **deferred** (left pending for the next batch): it touches rows (partitions, files,
  tombstones; :meth:`Transaction.touches`) or items (commit id, job record, ingest
  job) an accepted request of this batch touches, or the batch is full. So every
  request is validated against a state no earlier request of its batch changed what
  it reads: validating all against the leader's state is the same as validating each
  after the ones before it.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from statestore.bookkeeping import Bookkeeping
from statestore.dynamodb.blobs import BlobStore
from statestore.dynamodb.connection import b, get_n, get_s, n, s
from statestore.dynamodb.jobs import EncodedJob, StoredJob, job_from_item
from statestore.dynamodb.log import EncodedTransaction, decode
from statestore.transactions import Touches, Transaction

PENDING = "p#"
VERDICT = "x#"
#: the most requests a leader reads at once (3 keys each in one BatchGetItem of at most 100)
MAX_REQUESTS = 25
#: TransactWriteItems limits, with a margin for the attribute names and the catalog check
MAX_ITEMS = 99
MAX_BYTES = 3_500_000
#: a request whose pending item would be larger goes the single-commit way (items hold 400 KB)
MAX_PENDING_BYTES = 350_000


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
            out["message"] = s(self.message)
        return out

    @classmethod
    def of(cls, item: dict[str, Any]) -> Verdict:
        return cls(get_s(item, "kind") or "", get_s(item, "nonce") or "", get_s(item, "error") or "",
                   get_s(item, "message") or "")

    def exception(self) -> BaseException:
        """The error the owner raises for a refusal: the refusing error's own type (a
        statestore error, or a builtin one), TransactionError when it is neither."""
        from statestore import errors

        cls = getattr(errors, self.error, None) or getattr(builtins, self.error, None)
        if not (isinstance(cls, type) and issubclass(cls, Exception)):
            cls = errors.TransactionError
        try:
            return cls(self.message)
        except Exception:  # an error type that takes other arguments
            return errors.TransactionError(f"{self.error}: {self.message}")


def refusal(e: BaseException, nonce: str) -> Verdict:
    return Verdict("refused", nonce, type(e).__name__, str(e))


def overlaps(a: Touches, b: Touches) -> bool:
    return (a.whole_table or b.whole_table or (a.tombstones and b.tombstones)
            or bool(a.partition_ids & b.partition_ids) or bool(a.filenames & b.filenames))


@dataclass
class Accepted:
    """A request the batch logs: its transaction, bookkeeping, and what its job check read."""

    request: Request
    transaction: Transaction
    books: Bookkeeping
    stored_job: StoredJob
    job_encoded: Optional[EncodedJob]


@dataclass
class Batch:
    """The leader's choice: requests accepted in order, verdicts of the others by commit
    id, the stale items to delete, and the item keys and rows the batch touches."""

    accepted: list[Accepted] = field(default_factory=list)
    verdicts: dict[str, tuple[Request, Verdict]] = field(default_factory=dict)
    stale: list[Request] = field(default_factory=list)
    keys: set[str] = field(default_factory=set)
    touches: list[Touches] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.accepted) + len(self.verdicts) + len(self.stale)


def choose(requests: list[Request], got: dict[str, dict[str, Any]], blobs: BlobStore,
           decide: Callable[[Request, Bookkeeping, Transaction, StoredJob], Optional[Verdict]],
           stored_job: Callable[[dict[str, Any]], StoredJob], budget_items: int = MAX_ITEMS) -> Batch:
    """Sort ``requests`` (oldest first) into a batch (see the module docstring). ``got``:
    the ``c#``, ``x#`` and ``j#`` items read for them, by sort key. ``decide``: the
    verdict of a request against the state (None: accepted). Stops when the items or
    bytes of one TransactWriteItems would run out."""
    batch = Batch()
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
        job = r.job(blobs)
        job_id = None if job is None else job[1].job_id
        keys = {f"c#{r.commit_id}", *([f"j#{job_id}"] if job_id else []),
                *([f"e#{r.item['ingest_job_id']['S']}"] if "ingest_job_id" in r.item else [])}
        if keys & batch.keys:
            continue  # deferred: an item of this batch's
        need = 2 if applied is not None else 3 + (job is not None) + ("ingest_job_id" in r.item)
        if items + need > budget_items or size + 2 * r.size() > MAX_BYTES:
            break
        books = Bookkeeping(r.commit_id, None if job is None else job[1],
                            get_s(r.item, "ingest_job_id"),
                            check_id=bool(r.item.get("check_id", {}).get("BOOL", True)))
        if applied is not None:
            batch.verdicts[r.commit_id] = (r, Verdict("before", r.nonce))
            batch.keys |= keys
            items += 2
            continue
        txn = r.transaction(blobs)
        touched = txn.touches()
        if any(overlaps(touched, t) for t in batch.touches):
            continue  # deferred: validated after the accepted one it overlaps is applied
        job_item = got.get(f"j#{job_id}") if job_id else None
        stored = stored_job(job_item) if job_item is not None else StoredJob(None, None, None)
        verdict = decide(r, books, txn, stored)
        batch.keys |= keys
        if verdict is not None:
            batch.verdicts[r.commit_id] = (r, verdict)
            items += 2
            continue
        batch.accepted.append(Accepted(r, txn, books, stored, None if job is None else job[0]))
        batch.touches.append(touched)
        items += need
        size += 2 * r.size()
    return batch
