-- Lesson 15: quarantine for jobs that will not run again, and a link from a replay to its source.
-- Run once, on its own, after schema_jobs.sql, schema_outbox.sql and schema_capacity.sql:
--   mysql -h 127.0.0.1 -P 3307 -u app_user -p shop_lab < schema_recovery.sql
-- The ALTER is a one-time migration: if replay_of already exists, read SHOW CREATE TABLE export_jobs\G
-- and stop there instead of running it again.
-- Runs unchanged on MySQL 8.4 and MariaDB 10.11.

SET time_zone = '+00:00';

-- One row per job the recovery scan gave up on (attempts used up, deadline passed).  The job row stays
-- 'failed' and this row says why; a replay is a NEW job, so neither of these rows is ever rewritten.
CREATE TABLE IF NOT EXISTS export_dead_letters (
  job_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin PRIMARY KEY,
  reason VARCHAR(64) NOT NULL,
  quarantined_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  CONSTRAINT export_dead_letter_job_fk FOREIGN KEY (job_id) REFERENCES export_jobs(id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

ALTER TABLE export_jobs
  -- set only on a replay: the failed job whose payload it re-runs
  ADD COLUMN replay_of CHAR(36) CHARACTER SET ascii COLLATE ascii_bin,
  ADD CONSTRAINT export_jobs_replay_fk FOREIGN KEY (replay_of) REFERENCES export_jobs(id),
  -- The recovery scan reads  FROM export_jobs FORCE INDEX (export_jobs_recovery_scan)
  --                          WHERE (status='running' AND ...) OR (status='queued' AND ...)
  --                          ORDER BY status, updated_at, id LIMIT 50 FOR UPDATE SKIP LOCKED.
  -- This index returns the rows of both statuses already in that order, so the server walks it and
  -- stops after 50 matches: only those rows stay locked and a second scanner takes the next ones.
  -- Ordered by updated_at alone (no status first), or planned as a table scan, the server has to read
  -- and sort every candidate, and FOR UPDATE keeps all of them locked: a second scanner finds nothing.
  ADD KEY export_jobs_recovery_scan (status, updated_at, id);

-- Cancelling is not part of this file: the application runs, in one short transaction,
--   UPDATE export_jobs SET cancel_requested=TRUE, updated_at=NOW(6)
--   WHERE id=%s AND status IN ('queued','running')
-- and then reads the row back (state_store.request_cancel).  A repeated cancel may change no row at
-- all, so rowcount 0 does not mean "no such job".
