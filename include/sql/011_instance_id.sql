-- 011: the state store's own identity (StateStore.instance_id): one row holding a UUID,
-- made once by this migration (under the migration lock, so two processes migrating a
-- fresh database at once make one id), never updated or deleted. Lineage names the
-- store's tables sleeper://<instance id>, the same whichever address reaches the
-- database (a socket path or host and port). Idempotent: safe to run twice; a database
-- written by a previous release gets its id on its first open, when this migration runs.
CREATE TABLE IF NOT EXISTS sleeper_instance (
    singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    instance_id text NOT NULL
);
INSERT INTO sleeper_instance (singleton, instance_id)
VALUES (true, gen_random_uuid()::text)  -- built in since PostgreSQL 13
ON CONFLICT (singleton) DO NOTHING;
