-- 008: job heartbeats (DESIGN.md section 10: a running job refreshes its progress).
--
-- A running job sets heartbeat_ms now and then (StateStore.heartbeat_jobs); it never
-- goes back (a save of the whole record keeps the later of the two). The orphan sweep
-- counts it as the job's last update, so a job alive longer than
-- sleeper.table.gc.job.abandon.minutes keeps its outputs, and one silent that long
-- loses them.
ALTER TABLE jobs ADD COLUMN heartbeat_ms bigint;
