-- 007: idempotency keys of client writes (statestore.client_writes; DESIGN.md section 10).
--
-- One row per key a client sent with a write to the buffer or a batch of ingest
-- requests, inserted in the same transaction (the same statement, for the buffer) as
-- the write: a repeat of the key fails on the primary key, stores nothing, and reads
-- this row for the first answer (seq: the buffer entry's sequence number; answer: the
-- text the caller chose, e.g. the ingest request ids). digest tells a repeat from a
-- different request reusing the key. Garbage collection deletes rows older than the
-- table's sleeper.table.write.idempotency.hours.
CREATE TABLE client_writes (
    table_id   text COLLATE "C" NOT NULL REFERENCES tables (table_id) ON DELETE CASCADE,
    request_id text COLLATE "C" NOT NULL,
    digest     text NOT NULL,
    seq        bigint NOT NULL DEFAULT 0,
    answer     text NOT NULL DEFAULT '',
    written_ms bigint NOT NULL,
    PRIMARY KEY (table_id, request_id)
);
CREATE INDEX client_writes_age ON client_writes (table_id, written_ms);
