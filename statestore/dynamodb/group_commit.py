"""Group commit: committers of one table (in any process) hand their commits to
whichever of them leads, and one TransactWriteItems logs a batch of them.

Why: every commit is one TransactWriteItems racing for log number ``n + 1``; with
several committers most lose the race and retry, and each try costs a round trip
(on moto, a copy of every table it names). Batching lets one transaction log up to
~25 commits at numbers ``n + 1 .. n + k``.

A store with ``group_commit`` on uses it only while it sees other committers on the
table; alone, it commits by itself (:mod:`statestore.dynamodb.contention`).

The protocol, all through DynamoDB (no process talks to another):

1. **Request.** The owner (the caller of :meth:`DynamoGroupCommit.commit`) puts a pending item
   ``p#<commit id>`` in the ``requests`` table (:mod:`statestore.dynamodb.group_batch`), conditional on none
   existing: the encoded transaction (a large body is spilled to the blob store
   first, as today), its bookkeeping and a ``nonce`` of this call.
2. **Lead.** A store whose last batch for the table went through keeps leading: its
   next request reads the pending requests at once. Any other owner polls its own
   verdict (step 3) and, once it has waited :data:`_PATIENCE` or three times its usual
   wait, reads the pending requests too and leads if its request is the oldest -- or
   whoever's is, after :data:`TAKEOVER_SECONDS` (the leader may be gone). A leader
   finding fewer requests than its last batch held waits a few milliseconds for the
   others to come. Then it catches up the log (a store that keeps leading skips that
   query and validates on its own copy at log number ``n``: the batch's first log item
   ``n + 1``, or with no request accepted a check that no item ``n + 1`` exists, makes
   the transaction fail if the log moved on), reads the pending requests' ``c#``/
   ``j#`` items and verdicts (one BatchGetItem), validates each against the state as a
   single commit does (commit id applied before, a client's idempotency key held
   before -- ``before`` for the same request digest, refused with
   IdempotencyKeyReusedError for another --, the job record's revision and
   outputs, the ingest assignment, the transaction itself; see
   :mod:`statestore.dynamodb.group_batch` for the order) and writes ONE
   TransactWriteItems holding, for each accepted request, what a single commit writes
   (log item ``n + i`` conditional on not existing, the commit id item ``c#`` --
   naming the nonce in ``by`` -- the job record conditional on its revision, the
   ingest job's end, the client's key item ``w#``), and for every other request a verdict item ``x#<commit id>``
   (``before`` or ``refused`` with the error's type and message); each request's
   pending item is deleted in the same transaction, conditional on it still holding
   the nonce read. A lost race (another leader, a single committer, a job saved
   meanwhile) cancels the whole transaction: nothing applies, the store stops leading,
   and the next round reads again.
3. **Verdict.** The owner polls (one BatchGetItem, short backoff) until its ``c#``
   (``by`` = its nonce: applied, True) or its ``x#`` (``before``: False; ``refused``:
   the same error the single commit would raise) says what happened, and deletes its
   ``x#`` after reading it.
4. **Give up.** After :attr:`outcome_timeout_seconds` without a verdict the owner
   deletes its pending item, conditional on its nonce, and reads again: deleted by
   it, the request can never apply (a leader's transaction naming it fails its
   condition) -- a definite :class:`CommitConflictError`; decided meanwhile: that
   verdict. When DynamoDB does not answer even that: :class:`CommitOutcomeUnknownError`.

Guarantees: a request is decided only by a transaction that deletes its pending item,
so at most once; an owner reports a failure only after a verdict or its own delete of
the pending item says nothing applied, and deletes its blobs only then (DESIGN.md
section 10); a reply lost anywhere (botocore retries, :mod:`statestore.dynamodb.writes`)
is settled by reading the items again: a retried put that re-creates a request already
decided is found "stale" by the next leader (its verdict names the nonce) and only
deleted. Verdicts of owners that died, and pending items nobody will decide, are removed
by :meth:`~statestore.dynamodb.store.DynamoDBStateStore.prune_commit_ids`.

:class:`DynamoGroupCommit` is the part of the store's table commits
(:class:`~statestore.dynamodb.table_commits.DynamoCommits`) that commits this way; it
takes a commit's items from the same :class:`~statestore.dynamodb.commits.CommitItems`
a single commit does, so a request accepted into a batch writes what its single commit
would.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any, Optional

import botocore.exceptions

from statestore.bookkeeping import Bookkeeping
from statestore.clock import now_ms
from statestore.dynamodb.cache import CachedTable
from statestore.dynamodb.client_writes import key_item, key_record
from statestore.dynamodb.commits import COMMIT_ID, TABLE, CommitItems, commit_id_key
from statestore.dynamodb.connection import cancellation_codes, get_s, n, s
from statestore.dynamodb.contention import Contention
from statestore.dynamodb.context import DynamoContext
from statestore.dynamodb.group_batch import (
    REQUESTS,
    Batch,
    Request,
    Verdict,
    choose,
    pending_item,
    pending_key,
    read_items,
    refusal,
    verdict_key,
)
from statestore.dynamodb.group_requests import POLL_FIRST, GroupRequests
from statestore.dynamodb.ingest_queue import DynamoIngestQueue
from statestore.dynamodb.jobs import DynamoJobs, EncodedJob, StoredJob, job_key
from statestore.dynamodb.log import EncodedTransaction
from statestore.dynamodb.sizes import rejection
from statestore.dynamodb.snapshot_policy import SnapshotPolicy
from statestore.dynamodb.writes import delete_quietly, may_have_applied, outcome_unknown
from statestore.errors import (
    BookkeepingError,
    CommitConflictError,
    StateStoreUnavailableError,
    TableNotFoundError,
)
from statestore.jobs import check_job_bookkeeping
from statestore.retry import COMMIT_RETRIES
from statestore.state import TableState
from statestore.transactions import Transaction

log = logging.getLogger(__name__)

#: an owner that waited this long for a verdict leads, whoever's request is oldest
TAKEOVER_SECONDS = 1.0
#: the owner's polls: growth and cap (the first pause: group_requests.POLL_FIRST)
_POLL_GROWTH, _POLL_CAP = 1.5, 0.01
#: a leader finding fewer requests pending than its last batch held waits this long, at most this often
_GATHER_SECONDS, _GATHERS = 0.003, 4
#: an owner polls its own verdict (one BatchGetItem) for at least this long, or 3 times its usual
#: wait, before it reads the pending requests to see whether it should lead
_PATIENCE = 0.05


class DynamoGroupCommit:
    """Commits through pending requests and leaders (see the module docstring), over the
    store's one :class:`~statestore.dynamodb.context.DynamoContext`: a commit's items
    from ``items``, its job record read through ``jobs``, its ingest assignment checked
    through ``ingest_queue``, a snapshot after a batch when ``snapshots`` says one is due.
    :attr:`outcome_timeout_seconds` (how long an owner waits for a verdict) and
    :attr:`contention` (:mod:`statestore.dynamodb.contention`) are shared with single commits."""

    outcome_timeout_seconds: float = 60.0

    def __init__(self, context: DynamoContext, items: CommitItems, jobs: DynamoJobs, ingest_queue: DynamoIngestQueue,
                 snapshots: SnapshotPolicy) -> None:
        self.context = context
        self.items = items
        self.jobs = jobs
        self.ingest_queue = ingest_queue
        self.snapshots = snapshots
        self.requests = GroupRequests(context)
        self.contention = Contention()
        self._last_batch: dict[str, int] = {}  # the size of the last batch this store wrote (a gathering hint)
        self._wait_hint: dict[str, float] = {}  # how long its commits waited for a verdict lately (a polling hint)
        self._leading: set[str] = set()  # the tables this store leads (its last batch went through)
        self._isolating: dict[str, int] = {}  # tables whose next batches hold one request each (see _rejected)

    # ----- the owner ------------------------------------------------------------------
    def commit(self, table_id: str, txn: Transaction, books: Bookkeeping, encoded: EncodedTransaction,
                      job_encoded: Optional[EncodedJob]) -> bool:
        """Commit through a pending request; True (applied by this call), False (its
        commit id was applied before), or the error a single commit would raise."""
        what = f"commit {txn.TYPE} to table {table_id}"
        nonce = uuid.uuid4().hex
        item = pending_item(table_id, encoded, books, job_encoded, nonce, now_ms())
        verdict, uncertain = self._await_verdict(table_id, item, books.commit_id, nonce, what)
        if verdict.kind == "applied":
            return not uncertain  # as a single commit: False when found applied after a lost reply
        owned = [k for k in (encoded.blob_key, job_encoded.blob_key if job_encoded else None) if k]
        if verdict.kind == "before":
            if books.job is not None and job_encoded is not None and job_encoded.blob_key:
                self.jobs.drop_unsaved_blob(books.job, job_encoded.blob_key, what)
                owned.remove(job_encoded.blob_key)
        if owned:
            delete_quietly(self.context.blobs, owned, what)  # a definite no: nothing logged names them
        if verdict.kind == "before":
            return False
        if verdict.kind == "withdrawn":
            if verdict.error == "TableNotFoundError":
                raise TableNotFoundError(f"no table with id {table_id}")
            raise CommitConflictError(f"{what}: no leader decided it within {self.outcome_timeout_seconds:g}s, "
                                      f"so it was withdrawn (commit id {books.commit_id}){verdict.message}")
        raise verdict.exception()

    def _await_verdict(self, table_id: str, item: dict[str, Any], commit_id: str, nonce: str,
                       what: str) -> tuple[Verdict, bool]:
        """Put the request, lead or poll until its verdict (step 1-4 of the module
        docstring); also whether a write of this call had an unknown outcome."""
        start = time.monotonic()
        deadline = start + self.outcome_timeout_seconds
        put, pause, uncertain, gathers, first = True, POLL_FIRST, False, 0, True
        last: Optional[BaseException] = None
        while True:
            if not put and time.monotonic() >= deadline:
                return self._withdraw(table_id, commit_id, nonce, what, last), uncertain
            try:
                if put:
                    self.requests.put_pending(item, what)
                    put = False
                waited = time.monotonic() - start
                leader = table_id in self._leading
                patient = not leader and waited <= max(_PATIENCE, 3 * self._wait_hint.get(table_id, 0.0))
                if not patient:  # lead, or see whether we should
                    pending = self.requests.pending(table_id)
                    mine = next((r for r in pending if r.commit_id == commit_id), None)
                    if mine is not None and mine.nonce == nonce:
                        oldest = min(pending, key=lambda r: (r.t_ms, r.commit_id))
                        if leader or oldest is mine or waited > TAKEOVER_SECONDS:
                            if len(pending) < self._last_batch.get(table_id, 0) and gathers < _GATHERS:
                                gathers += 1  # fewer pending than the last batch held: let the others catch up
                                time.sleep(_GATHER_SECONDS)
                                continue
                            verdict, maybe = self._lead_round(table_id, pending, commit_id, nonce)
                            uncertain = uncertain or maybe
                            if verdict is not None:
                                return self.requests.settled(table_id, commit_id, verdict, stale=False), uncertain
                            continue
                    else:
                        patient = True  # decided (or never written): read which
                if patient:
                    verdict, there = self.requests.read_verdict(table_id, commit_id, nonce)
                    if verdict is not None:
                        self.contention.seen(table_id)  # another committer led the batch
                        waited = time.monotonic() - start
                        self._wait_hint[table_id] = 0.7 * self._wait_hint.get(table_id, waited) + 0.3 * waited
                        return self.requests.settled(table_id, commit_id, verdict, there), uncertain
                    if not there:  # never written (a lost put), or a call with our id before us finished
                        self.context.require_table_id(table_id)
                        put = True
                        continue
                last = None
            except TableNotFoundError:
                verdict = self._withdraw(table_id, commit_id, nonce, what, None)
                if verdict.kind == "withdrawn":
                    return Verdict("withdrawn", nonce, "TableNotFoundError"), uncertain
                return verdict, uncertain
            except StateStoreUnavailableError as e:
                unknown = outcome_unknown(e)
                if put and not unknown:
                    raise  # the request was refused outright: nothing is pending
                uncertain = uncertain or unknown
                last = e
                if put and time.monotonic() >= deadline:  # never put, as far as we know
                    return self._withdraw(table_id, commit_id, nonce, what, last), uncertain
            if first:  # the first poll comes when verdicts usually do
                time.sleep(max(pause, 0.6 * self._wait_hint.get(table_id, 0.0)))
                first = False
            else:
                time.sleep(pause)
                pause = min(_POLL_CAP, pause * _POLL_GROWTH)

    def _withdraw(self, table_id: str, commit_id: str, nonce: str, what: str,
                  last: Optional[BaseException]) -> Verdict:
        return self.requests.withdraw(table_id, commit_id, nonce, what, last, self.outcome_timeout_seconds)

    def _lead_round(self, table_id: str, pending: list[Request], commit_id: str,
                    nonce: str) -> tuple[Optional[Verdict], bool]:
        """Lead one batch: this call's verdict if the batch decided it, and whether a
        cancelled transaction may have applied. A store whose batch went through keeps
        leading (its next requests lead at once; the others wait); a lost race ends that."""
        if len(pending) > 1:
            self.contention.seen(table_id)  # other committers' requests are pending too
        decided, maybe = self._lead(table_id, pending)
        if decided is None:  # a lost race: read again
            self._leading.discard(table_id)
            COMMIT_RETRIES.add(table_id)
            self.context.backoff.pause(1)
            return None, maybe
        self._leading.add(table_id)
        verdict = decided.get(commit_id)
        return (verdict if verdict is not None and verdict.nonce == nonce else None), maybe

    # ----- the leader -----------------------------------------------------------------
    def _lead(self, table_id: str, pending: list[Request]) -> tuple[Optional[dict[str, Verdict]], bool]:
        """One batch of ``pending`` (step 2 of the module docstring): the verdicts it
        wrote by commit id, or None when its transaction was cancelled (a lost race, or
        a retry of ours that ran into its own first try: the next reads say which); and
        whether that cancellation came after botocore retried (it may have applied)."""
        entry = self.context.cache.entry(table_id)
        with entry.lock:
            if table_id not in self._leading or entry.n < 0:
                # A store whose last batch went through validates on its own copy: a log item
                # written since (by anyone) makes this batch's put of log item n + 1 fail its
                # condition, which cancels the batch, ends the lead and reads the log again.
                self.context.cache.refresh(table_id, entry)
            keys: dict[str, dict[str, Any]] = {}
            told: list[dict[str, Any]] = []
            for r in pending:
                keys[f"c#{r.commit_id}"] = commit_id_key(table_id, r.commit_id)
                told.append(verdict_key(table_id, r.commit_id))
                try:
                    job = r.job(self.context.blobs)
                except Exception:  # unreadable: choose() refuses it (or raises what it meets)
                    job = None
                if job is not None:
                    keys[f"j#{job[1].job_id}"] = job_key(table_id, job[1].job_id)
                keyed = r.client_write()
                if keyed is not None:
                    keys[f"w#{keyed.request_id}"] = key_item(table_id, keyed.request_id)
            got = read_items(self.context.dynamo, table_id, {"items": list(keys.values()), REQUESTS: told})

            def decide(r: Request, books: Bookkeeping, txn: Transaction, stored: StoredJob,
                       rows: TableState) -> Optional[Verdict]:
                try:
                    held = None if books.client_write is None else got.get(f"w#{books.client_write.request_id}")
                    if held is not None and books.client_write is not None:  # the key's first commit
                        key_record(held).answer_for(table_id, books.client_write)  # another request: refused
                        return Verdict("before", r.nonce)
                    if books.job is not None:
                        if (books.check_id and stored.record is not None and stored.record.status == "committed"
                                and stored.record.outputs == books.job.outputs):
                            return Verdict("before", r.nonce)  # the job's record is this commit's ledger entry
                        check_job_bookkeeping(stored.record, books.job)
                    if (books.ingest_job_id is not None
                            and not self.ingest_queue.assigned_to(table_id, books.ingest_job_id)):
                        raise BookkeepingError(f"no ingest request of table {table_id} is assigned to job "
                                               f"{books.ingest_job_id} any more")
                    txn.validate(rows)
                except StateStoreUnavailableError:
                    raise
                except Exception as e:
                    return refusal(e, r.nonce)
                return None

            if self._isolating.get(table_id):  # one request a batch, oldest first (see _rejected)
                pending = sorted(pending, key=lambda r: (r.t_ms, r.commit_id))[:1]
            batch = choose(pending, got, self.context.blobs, entry.state, decide,
                           lambda it: self.jobs.job_of(f"read a job of table {table_id}", it))
            return self._write_batch(table_id, entry, batch)

    def _write_batch(self, table_id: str, entry: CachedTable,
                     batch: Batch) -> tuple[Optional[dict[str, Verdict]], bool]:
        d = self.context.dynamo
        requests_table = d.table(REQUESTS)
        now = now_ms()

        def unpend(r: Request) -> dict[str, Any]:
            return {"Delete": {"TableName": requests_table, "Key": pending_key(table_id, r.commit_id),
                               "ConditionExpression": "nonce = :n", "ExpressionAttributeValues": {":n": s(r.nonce)}}}

        items: list[dict[str, Any]] = []
        for i, a in enumerate(batch.accepted):
            written = self.items.items(table_id, entry.n + 1 + i, a.request.encoded(), a.books, a.stored_job.rev,
                                         now, 0, a.job_encoded, a.summary, a.number)
            written[COMMIT_ID]["Put"]["Item"]["by"] = s(a.request.nonce)
            if i > 0:
                del written[TABLE]  # one catalog check per transaction
            items += [*written, unpend(a.request)]
        for r, v in batch.verdicts.values():
            items += [{"Put": {"TableName": requests_table, "Item": v.item(table_id, r.commit_id, now)}}, unpend(r)]
        items += [unpend(r) for r in batch.stale]
        if not items:
            return {}, False
        if batch.verdicts and not batch.accepted:
            # verdicts alone still hold only on the state they were decided on (the batch's
            # put of log item n + 1 holds that state otherwise): no log item after n yet
            items.append({"ConditionCheck": {"TableName": d.table("log"),
                                             "Key": {"table_id": s(table_id), "n": n(entry.n + 1)},
                                             "ConditionExpression": "attribute_not_exists(n)"}})
        try:
            d.call(f"commit a batch of {len(batch)} to table {table_id}", d.client.transact_write_items,
                   TransactItems=items)
        except (botocore.exceptions.ClientError, StateStoreUnavailableError) as e:
            if rejection(e, "") is not None:  # DynamoDB rejected a request's items: find it, refuse it alone
                return self._rejected(table_id, entry, batch, e)
            codes = cancellation_codes(e)
            if not codes:
                raise
            if batch.accepted and codes[TABLE] not in ("None", ""):
                self.context.cache.forget(table_id)
                raise TableNotFoundError(f"no table with id {table_id}") from None
            return None, may_have_applied(e)
        isolating = self._isolating.pop(table_id, 0)
        if isolating > 1:
            self._isolating[table_id] = isolating - 1
        replaced = [a.stored_job.blob_key for a in batch.accepted if a.stored_job.blob_key]
        for a in batch.accepted:
            entry.apply(entry.n + 1, a.transaction)
        if replaced:  # the job records' replaced revisions: nothing names them any more
            delete_quietly(self.context.blobs, replaced, f"commit a batch to table {table_id}")
        self._last_batch[table_id] = len(batch)
        if batch.accepted:
            self.snapshots.maybe_snapshot(table_id, entry)
        out = {a.request.commit_id: Verdict("applied", a.request.nonce) for a in batch.accepted}
        out.update({cid: v for cid, (_, v) in batch.verdicts.items()})
        return out, False

    def _rejected(self, table_id: str, entry: CachedTable, batch: Batch,
                  e: BaseException) -> tuple[Optional[dict[str, Verdict]], bool]:
        """DynamoDB rejected the batch's items (:func:`statestore.dynamodb.sizes.rejection`):
        nothing of it applied. A batch of one request gets a refused verdict of its own;
        a larger one is not retried whole: the next :data:`len(batch)` batches of this
        leader hold one request each, oldest first, so the one DynamoDB rejects is found
        and refused alone while the others commit."""
        if len(batch) == 1 and batch.accepted:
            r = batch.accepted[0].request
            refused = rejection(e, f"commit {get_s(r.item, 'type')} to table {table_id} (commit id {r.commit_id})")
            assert refused is not None
            self._isolating.pop(table_id, None)
            return self._write_batch(table_id, entry, Batch(verdicts={r.commit_id: (r, refusal(refused, r.nonce))}))
        log.warning("a batch of %d commits to table %s was rejected by DynamoDB; committing them one at a time "
                    "to find the one it rejects: %s", len(batch), table_id, e)
        self._isolating[table_id] = len(batch)
        return None, False
