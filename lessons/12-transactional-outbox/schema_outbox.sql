-- Lesson 12: the outbox — "this job still has to be announced", stored in the same database as the job.
-- Run once, on its own, after schema_jobs.sql (the foreign key needs export_jobs):
--   mysql -h 127.0.0.1 -P 3307 -u app_user -p shop_lab < schema_outbox.sql
-- Then look at it:  SHOW CREATE TABLE export_outbox\G
-- Runs unchanged on MySQL 8.4 and MariaDB 10.11.

SET time_zone = '+00:00';

CREATE TABLE IF NOT EXISTS export_outbox (
  -- the event's own id (it doubles as the Celery task id); one job may get more events later
  id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin PRIMARY KEY,
  job_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  -- not before this moment (a publisher may push an event back after a failure)
  available_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  -- NULL until a publisher has handed the message to the broker AND confirmed it with its token
  sent_at DATETIME(6),
  -- which publisher is sending it right now, and until when that claim holds
  claim_token CHAR(36) CHARACTER SET ascii COLLATE ascii_bin,
  claim_until DATETIME(6),
  attempts INT NOT NULL DEFAULT 0,
  CONSTRAINT export_outbox_job_fk FOREIGN KEY (job_id) REFERENCES export_jobs(id),
  -- The claim reads:  WHERE sent_at IS NULL AND ... ORDER BY created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED
  -- This index gives exactly that order after the equality on sent_at, so the server walks it and
  -- stops at the first free row: it locks one row.  An index the ORDER BY cannot use, such as
  -- (sent_at, available_at, created_at), makes the server read and sort every pending row first —
  -- and FOR UPDATE locks every row it read, so a second publisher finds all of them locked.
  KEY export_outbox_pending (sent_at, created_at, id),
  -- "what happened to the events of this job?"
  KEY export_outbox_job_sent (job_id, sent_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
