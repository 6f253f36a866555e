"""PostgreSQL state store: seed 001, option 3.

Tables (``include/sql/``): ``tables`` (the catalog), ``partitions``,
``file_references`` (one row per file per partition) and ``files`` (one row per
tracked file, referenced or not). There is no reference-count column; counts come
from ``file_references``, so concurrent commits do not all update the same rows.

A commit runs inside one SERIALIZABLE database transaction:

1. ``txn.touches()`` names the partitions and files the transaction reads or writes;
2. only those rows are loaded into a :class:`TableState` fragment (partitions by id;
   for each named file its ``files`` row and all its references), or the whole table
   when ``whole_table``;
3. ``before = fragment.copy()``, ``txn.validate(fragment)``, ``txn.apply(fragment)``;
4. the difference between ``before`` and the fragment is written with a handful of
   set-based statements (``unnest`` arrays; binary COPY for large inserts).

So a commit costs O(size of the change), never O(size of the table). BEGIN and the
reads go to the server in one pipeline, the writes and COMMIT in another: a small
commit takes two round trips. Serialization
failures and deadlocks are retried with jittered backoff; :class:`CommitConflictError`
is raised when attempts run out. A :class:`TransactionError` is never retried: the
database transaction has written nothing; it is committed read-only, so PostgreSQL
confirms the refusal was based on a serializable view (a serialization failure there
retries the whole commit, like any other).

Connections come from a small pool opened on first use; :meth:`close` closes it.
Migrations (``include/sql/NNN_*.sql``) are applied on first use under an advisory
lock, recorded in ``schema_migrations``.

Modules, one per role: :mod:`~statestore.postgres.connections` (:class:`PostgresConnection`:
connections and the retry loop, the one object every role shares),
:mod:`~statestore.postgres.migrate`, :mod:`~statestore.postgres.rows` (reads),
:mod:`~statestore.postgres.table_commits` (the table commits role; one commit attempt in
:mod:`~statestore.postgres.commits`, the difference written by
:mod:`~statestore.postgres.diff`, incremental reads in :mod:`~statestore.postgres.changes`,
pages and overviews in :mod:`~statestore.postgres.overview`),
:mod:`~statestore.postgres.catalog`, :mod:`~statestore.postgres.jobs`,
:mod:`~statestore.postgres.leases`, :mod:`~statestore.postgres.ingest_queue`,
:mod:`~statestore.postgres.buffer`, :mod:`~statestore.postgres.client_writes`,
:mod:`~statestore.postgres.history`, :mod:`~statestore.postgres.store`
(:class:`PostgresStateStore`: the role objects over one connection, and
:func:`open_postgres`) and :mod:`~statestore.postgres.embedded` (the embedded server).
psycopg is imported only in this package.
"""

from statestore.postgres.migrate import MIGRATIONS_DIR, create_database_if_missing, migrate, migrations
from statestore.postgres.store import PostgresStateStore, open_postgres

__all__ = ["MIGRATIONS_DIR", "PostgresStateStore", "create_database_if_missing", "migrate", "migrations",
           "open_postgres"]
