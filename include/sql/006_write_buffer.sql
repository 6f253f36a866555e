-- 006: the write buffer (statestore.buffer; DESIGN.md section 3, seed 004).
--
-- write_buffer: one row per write, the records as Arrow IPC stream bytes. A write is one
-- INSERT in its own transaction, so it is durable once the call returns. Sequence
-- numbers come from one sequence for all tables (no row every writer of a table must
-- lock), so they increase per table but are not dense, and concurrent writes may commit
-- out of order: a flush names the entries it read and deletes exactly those, in the
-- same transaction as its add-files commit, refused when any is gone.
--
-- The bytes are stored uncompressed out of line (STORAGE EXTERNAL): Arrow IPC of
-- mixed records compresses poorly, and pglz would cost every write CPU time.
--
-- A foreign key to tables (as for ingest_requests, 003): delete_table removes the
-- buffer by ON DELETE CASCADE, and a write to a table deleted concurrently is refused.
CREATE SEQUENCE write_buffer_seq AS bigint;

CREATE TABLE write_buffer (
    table_id   text COLLATE "C" NOT NULL REFERENCES tables (table_id) ON DELETE CASCADE,
    seq        bigint NOT NULL,
    rows       integer NOT NULL CHECK (rows > 0),
    written_ms bigint NOT NULL,
    data       bytea NOT NULL,
    PRIMARY KEY (table_id, seq)
);
ALTER TABLE write_buffer ALTER COLUMN data SET STORAGE EXTERNAL;
-- The backpressure check and the stats sum rows without reading the heap rows' bytes.
CREATE INDEX write_buffer_rows ON write_buffer (table_id, seq) INCLUDE (rows, written_ms);

-- How many flushes have committed per table, bumped by each flush's commit: a query
-- that sees the same count before reading files and after reading the buffer knows no
-- entry moved from one to the other in between. Writers never touch it.
CREATE TABLE write_buffer_flushes (
    table_id text COLLATE "C" PRIMARY KEY REFERENCES tables (table_id) ON DELETE CASCADE,
    flushes  bigint NOT NULL
);
