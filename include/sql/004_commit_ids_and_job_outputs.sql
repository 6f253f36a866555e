-- 004: idempotent commits and the outputs jobs name before writing (DESIGN.md section 10).
--
-- commit_ids: the id of every applied commit, inserted in the commit's own database
-- transaction. A commit retried after its reply was lost (a connection dropped during
-- COMMIT) finds its id here and applies nothing a second time. Rows older than the
-- retention (statestore.store.COMMIT_ID_RETENTION_MS) are pruned by garbage collection.
CREATE TABLE commit_ids (
    table_id   text COLLATE "C" NOT NULL,
    commit_id  text COLLATE "C" NOT NULL,
    applied_ms bigint NOT NULL,
    PRIMARY KEY (table_id, commit_id)
);
CREATE INDEX commit_ids_by_time ON commit_ids (table_id, applied_ms);

-- jobs.outputs: the objects an attempt of a job writes, saved before it writes them.
-- The orphan sweep keeps every object a job not yet final names.
ALTER TABLE jobs ADD COLUMN outputs text[] NOT NULL DEFAULT '{}';
CREATE INDEX jobs_in_flight ON jobs (table_id) WHERE status IN ('created', 'started', 'finished');
