-- 003: ingest requests, the ingest batcher's queue (statestore.ingest_requests).
--
-- One row per file queued for a table. Rows move pending -> assigned -> ingested, or
-- back to pending (attempts + 1) when their job fails, or to failed at an attempt limit.
-- Assignment locks the rows (SELECT ... FOR UPDATE in request id order) and changes
-- them only if all are still pending, so two batchers never take the same request.
--
-- Unlike the state tables (001), this one has a foreign key to tables: queueing is not
-- a hot path, and ON DELETE CASCADE makes delete_table remove a table's requests with
-- no change to its code, and refuses requests for a table deleted concurrently.
CREATE TABLE ingest_requests (
    table_id    text COLLATE "C" NOT NULL REFERENCES tables (table_id) ON DELETE CASCADE,
    request_id  text COLLATE "C" NOT NULL,
    filename    text NOT NULL,
    size_bytes  bigint NOT NULL CHECK (size_bytes >= 0),
    received_ms bigint NOT NULL,
    status      text NOT NULL CHECK (status IN ('pending', 'assigned', 'ingested', 'failed')),
    job_id      text COLLATE "C",
    attempts    integer NOT NULL DEFAULT 0,
    last_error  text,
    PRIMARY KEY (table_id, request_id)
);
-- The batcher reads a table's pending requests oldest first; reports filter by status.
CREATE INDEX ingest_requests_by_status ON ingest_requests (table_id, status, received_ms, request_id);
-- Finishing a job finds its requests.
CREATE INDEX ingest_requests_by_job ON ingest_requests (table_id, job_id) WHERE job_id IS NOT NULL;
