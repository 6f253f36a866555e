-- 005: a change log of each table's partitions and references, for incremental reads
-- (statestore.changes; the query path keeps a copy of a table's metadata and catches up
-- before every query).
--
-- Every commit that changes a table inserts one row, in its own database transaction:
-- the id of that transaction (pg_current_xact_id()) and the partitions and files whose
-- rows it changed (all = true and no names when it changed more than
-- statestore.postgres.changes.MAX_LISTED names: readers then load the whole state).
--
-- A reader remembers the snapshot (pg_current_snapshot()) its copy is exact at. The
-- rows it has not seen are those of transactions not visible in that snapshot, and
-- every such transaction's id is at least the snapshot's xmin, so the next read is an
-- index range scan from xmin filtered by pg_visible_in_snapshot. This is exact however
-- commits interleave (a counter bumped by every commit would make all the commits of a
-- table update one row: under SERIALIZABLE, concurrent commits would fail on it).
--
-- Rows are pruned by age with the commit ids (prune_commit_ids); state_change_horizon
-- keeps, per table, the largest transaction id pruned, so a reader whose snapshot does
-- not cover it knows it missed rows and loads the whole state.
CREATE TABLE state_changes (
    table_id      text COLLATE "C" NOT NULL,
    xid           xid8 NOT NULL,
    applied_ms    bigint NOT NULL,
    all_rows      boolean NOT NULL DEFAULT false,
    partition_ids text[] NOT NULL DEFAULT '{}',
    filenames     text[] NOT NULL DEFAULT '{}'
);
CREATE INDEX state_changes_by_xid ON state_changes (table_id, xid);
CREATE INDEX state_changes_by_time ON state_changes (table_id, applied_ms);

CREATE TABLE state_change_horizon (
    table_id   text COLLATE "C" PRIMARY KEY,
    pruned_xid xid8 NOT NULL
);
