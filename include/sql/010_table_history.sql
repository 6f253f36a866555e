-- 010: each table's history, for `sleeper history` and as-of reads (issue 22;
-- statestore.history, docs/adr/0007-time-travel.md).
--
-- Every commit that changes a table's partitions, references, files or tombstones
-- inserts one row in its own database transaction: its number (the PostgreSQL
-- transaction id, pg_current_xact_id(), as bigint: the number transaction_number
-- gives), when it applied, a summary (statestore.history.TransactionSummary without
-- number and time, as JSON) and an undo record: the before-images of the rows it
-- deleted or updated and the keys of the rows it inserted (zlib-compressed JSON,
-- statestore.postgres.history). The state as of transaction N is the current state
-- with the undo records of the rows numbered above N applied, newest first.
--
-- Rows are only inserted (no update contends with concurrent commits) and are pruned
-- from the old end by garbage collection once older than the table's
-- sleeper.table.history.retention.minutes. Idempotent: safe to run twice.
CREATE TABLE IF NOT EXISTS table_history (
    table_id   text COLLATE "C" NOT NULL,
    number     bigint NOT NULL,
    applied_ms bigint NOT NULL,
    summary    json NOT NULL,
    undo       bytea NOT NULL,
    PRIMARY KEY (table_id, number)
);
CREATE INDEX IF NOT EXISTS table_history_by_time ON table_history (table_id, applied_ms);
