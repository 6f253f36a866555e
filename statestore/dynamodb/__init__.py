"""DynamoDB state store: a transaction log per table, snapshots in an object store,
and the catalog, job records, leases and the ingest queue in DynamoDB too -- so the
product runs on S3 + DynamoDB with no PostgreSQL.

Each table's state is the fold of its transaction log (the ``statestore.transactions``
objects, serialised with ``to_dict``) over its newest snapshot:

* **Commit** (:mod:`~statestore.dynamodb.commits`): validate against the state after
  transaction ``n`` and write log item ``n + 1`` conditionally, with the commit id and
  the bookkeeping (job record, ended ingest job) in the same TransactWriteItems. A
  lost race (the number was taken) reads the new transactions, validates again and
  retries with full-jitter backoff; :class:`CommitConflictError` when attempts run out
  (:class:`CommitOutcomeUnknownError` instead when a try's reply was lost).
  Transaction bodies over ~350 KB compressed, and job records over ~300 KB, go to the
  object store behind a pointer.
* **Group commit** (:mod:`~statestore.dynamodb.group_commit`, the store option
  ``group_commit``, on by default): while other committers commit to the table
  (:mod:`~statestore.dynamodb.contention`), committers put pending requests in the
  ``requests`` table and one of them, the leader, validates a batch in order and logs
  it in one TransactWriteItems (log items ``n + 1 .. n + k``, each with its
  bookkeeping, and a verdict for each refused request); owners poll for their
  verdict. No lost races, and one transaction for many commits. A committer alone
  makes single commits, which cost fewer round trips. A request DynamoDB rejects, or
  no leader can read, gets a refused verdict of its own; the rest of the batch commits.
* **Sizes** (:mod:`~statestore.dynamodb.sizes`): every attribute of an item counts
  toward DynamoDB's 400 KB; a log item's summary is capped
  (:mod:`~statestore.dynamodb.history`), and a commit whose items would not fit, or
  that DynamoDB rejects, is refused once with a :class:`TransactionError` naming the
  table, never blocked or retried at run time.
* **Blobs** (:mod:`~statestore.dynamodb.blob_sweep`): a commit deletes the blobs it no
  longer needs once it is known applied, also when a retry finds it applied;
  ``sweep_blobs`` (run by garbage collection after the orphan grace) deletes the blobs
  that no item names, left by an unknown outcome or a failed delete.
* **Lost replies** (:mod:`~statestore.dynamodb.writes`, the one rule every writer
  calls): botocore retries a request whose reply was lost, and the retry of a
  conditional write fails on the first try's own write; so a failed condition is
  checked against our own earlier write (by a key or write id of its own) before
  anything is cleaned up, and a blob is deleted only after a definite no.
* **Read** (:mod:`~statestore.dynamodb.cache`): a store object keeps each table's state
  and the number it is at; it catches up by reading only the transactions after that
  number. The first read loads the newest snapshot (:mod:`~statestore.dynamodb.snapshots`)
  plus the tail.
* **Snapshots**: written by the committer that crosses ``snapshot_every`` transactions
  or ``snapshot_seconds`` since the last; :meth:`DynamoDBStateStore.expire` (also run by
  ``prune_commit_ids``, i.e. by garbage collection) deletes transactions older than the
  newest snapshot minus a margin, and superseded snapshots, once older than
  ``retention_seconds``.

Commits of one table are serialised through the log, so their rate is bounded by
DynamoDB's round trip, and a commit costs O(size of the change) in writes; a
process's first read of a table costs a snapshot load. Modules, one per role:
:mod:`~statestore.dynamodb.connection` (client, tables, errors),
:mod:`~statestore.dynamodb.writes` (lost replies),
:mod:`~statestore.dynamodb.blobs` (object store), :mod:`~statestore.dynamodb.log`,
:mod:`~statestore.dynamodb.snapshots`, :mod:`~statestore.dynamodb.cache`,
:mod:`~statestore.dynamodb.commits`, :mod:`~statestore.dynamodb.group_commit`,
:mod:`~statestore.dynamodb.group_requests`, :mod:`~statestore.dynamodb.group_batch`,
:mod:`~statestore.dynamodb.sizes`, :mod:`~statestore.dynamodb.blob_sweep`,
:mod:`~statestore.dynamodb.catalog`,
:mod:`~statestore.dynamodb.jobs`, :mod:`~statestore.dynamodb.leases`,
:mod:`~statestore.dynamodb.ingest_queue`, :mod:`~statestore.dynamodb.history`,
:mod:`~statestore.dynamodb.retention`, :mod:`~statestore.dynamodb.client_writes`,
:mod:`~statestore.dynamodb.buffer`, :mod:`~statestore.dynamodb.snapshot_policy`,
:mod:`~statestore.dynamodb.erasure`, :mod:`~statestore.dynamodb.table_commits` (the
object a commit goes through, built over the roles whose items its one transaction
carries), :mod:`~statestore.dynamodb.context`
(what every role object shares) and :mod:`~statestore.dynamodb.store`
(:class:`DynamoDBStateStore`, a :class:`~statestore.composed.ComposedStateStore` of
those role objects, and :func:`open_dynamodb`). boto3 is imported only in this
package.
"""

from statestore.dynamodb.blobs import LocalBlobStore, S3BlobStore, open_blob_store
from statestore.dynamodb.connection import DynamoOptions, load_client_models
from statestore.dynamodb.store import DynamoDBStateStore, open_dynamodb

__all__ = ["DynamoDBStateStore", "DynamoOptions", "LocalBlobStore", "S3BlobStore", "load_client_models",
           "open_blob_store", "open_dynamodb"]
