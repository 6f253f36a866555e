-- 002: job status records and exclusive leases.
--
-- jobs: one row per job, upserted as the job moves on (statestore.jobs.JobRecord).
-- Reports read a table's newest jobs through (table_id, created_ms).
CREATE TABLE jobs (
    table_id     text COLLATE "C" NOT NULL,
    job_id       text COLLATE "C" NOT NULL,
    kind         text NOT NULL,
    status       text NOT NULL,
    partition_id text COLLATE "C",
    input_files  integer NOT NULL DEFAULT 0,
    created_ms   bigint NOT NULL,
    started_ms   bigint,
    finished_ms  bigint,
    committed_ms bigint,
    rows_read    bigint NOT NULL DEFAULT 0,
    rows_written bigint NOT NULL DEFAULT 0,
    reason       text,
    run_id       text,
    attempts     integer NOT NULL DEFAULT 0,
    output       text,
    PRIMARY KEY (table_id, job_id)
);
CREATE INDEX jobs_by_created ON jobs (table_id, created_ms DESC);

-- leases: an exclusive, expiring lock per name (e.g. '<table_id>/compaction'),
-- taken with one INSERT ... ON CONFLICT that succeeds only when free, expired or
-- already ours. Expiry uses the database clock so holders' clocks do not matter.
CREATE TABLE leases (
    name       text COLLATE "C" PRIMARY KEY,
    holder     text NOT NULL,
    expires_at timestamptz NOT NULL
);
