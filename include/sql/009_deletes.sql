-- 009: record deletes (issue 22; statestore.deletes).
--
-- A delete is a tombstone: table_deletes holds each live one as its JSON
-- (Tombstone.to_dict) under its number; tables.delete_count is the last number given
-- (it never goes down when a purged tombstone is dropped). A file reference's
-- delete_horizon is the delete count its writer had seen: tombstones numbered above it
-- apply to the file. Existing references get 0: every delete applies to them.
ALTER TABLE tables ADD COLUMN delete_count bigint NOT NULL DEFAULT 0;
ALTER TABLE file_references ADD COLUMN delete_horizon bigint NOT NULL DEFAULT 0;

CREATE TABLE table_deletes (
    table_id text COLLATE "C" NOT NULL,
    number   bigint NOT NULL,
    body     json NOT NULL,  -- json, not jsonb: a string key's bound may hold U+0000
    PRIMARY KEY (table_id, number)
);
