-- 001: the table catalog and each table's state (seed 001, option 3).
--
-- Applied by statestore.postgres under a transaction-scoped advisory lock, recorded in
-- schema_migrations. Every text key is COLLATE "C", so ORDER BY sorts by code point
-- (the order of the in-memory store) and the indexes compare bytes.
--
-- There is no reference-count column: concurrent commits would all update the same
-- counts. A file's references are counted from file_references when needed, through
-- its primary key, whose prefix (table_id, filename) finds all references of a file.
-- No foreign keys on the state tables: the commit algorithm keeps them consistent
-- (every reference's file has a files row) and each FK check would add an index probe
-- per inserted row; delete_table removes a table's rows explicitly.

CREATE TABLE tables (
    table_id   text COLLATE "C" PRIMARY KEY,
    name       text COLLATE "C" NOT NULL UNIQUE,
    schema     json NOT NULL,                     -- Sleeper's schema JSON
    properties jsonb NOT NULL DEFAULT '{}'::jsonb, -- only the properties set explicitly
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE partitions (
    table_id     text COLLATE "C" NOT NULL,
    partition_id text COLLATE "C" NOT NULL,
    parent_id    text COLLATE "C",
    child_ids    text[] NOT NULL DEFAULT '{}',
    is_leaf      boolean NOT NULL,
    dimension    integer NOT NULL,
    region       json NOT NULL,                   -- Region.to_dict(): bytes as {"b64": ...}
    PRIMARY KEY (table_id, partition_id)
);

CREATE TABLE file_references (
    table_id          text COLLATE "C" NOT NULL,
    filename          text COLLATE "C" NOT NULL,
    partition_id      text COLLATE "C" NOT NULL,
    record_count      bigint NOT NULL,
    count_approximate boolean NOT NULL,
    whole_file        boolean NOT NULL,
    job_id            text COLLATE "C",
    update_time       bigint NOT NULL,            -- ms since the epoch
    PRIMARY KEY (table_id, filename, partition_id)
) WITH (fillfactor = 85);  -- room for HOT updates of job_id and update_time

-- Tracked files: a file stays here, with or without references, until garbage
-- collection deletes it. update_time (ms) is when its references last changed.
CREATE TABLE files (
    table_id    text COLLATE "C" NOT NULL,
    filename    text COLLATE "C" NOT NULL,
    update_time bigint NOT NULL,
    PRIMARY KEY (table_id, filename)
) WITH (fillfactor = 85);  -- room for HOT updates of update_time

-- Garbage collection finds files with no references through the primary keys alone: it
-- walks files (table_id, filename) in filename order and probes file_references
-- (table_id, filename, ...) with NOT EXISTS. There is deliberately no index on
-- files.update_time: every commit that changes a file's references rewrites its
-- update_time, and without an index on it that is a HOT update that touches no index
-- (cheaper, and fewer index pages for concurrent serializable commits to conflict on).
