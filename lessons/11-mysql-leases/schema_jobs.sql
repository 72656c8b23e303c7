-- Lesson 11: the export job table.  MySQL is the record of every export; Celery only wakes a worker.
-- Run once, on its own (not inside an application transaction), in the shop_lab database:
--   mysql -h 127.0.0.1 -P 3307 -u app_user -p shop_lab < schema_jobs.sql
-- Then look at what it made:  SHOW CREATE TABLE export_jobs\G
-- Runs unchanged on MySQL 8.4 and MariaDB 10.11 (see the lesson guide for the differences).

SET time_zone = '+00:00';

CREATE TABLE IF NOT EXISTS export_jobs (
  id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin PRIMARY KEY,
  status VARCHAR(16) NOT NULL DEFAULT 'queued',
  -- the product rows as they were at submit time: retries export this, never today's products
  payload JSON NOT NULL,
  -- real claims so far; recovery never resets it
  attempts INT NOT NULL DEFAULT 0,
  -- who may publish, and until when
  lease_token CHAR(36) CHARACTER SET ascii COLLATE ascii_bin,
  lease_until DATETIME(6),
  -- durable backoff: no claim before this moment, however many messages arrive
  next_attempt_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  last_dispatched_at DATETIME(6),
  cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
  deadline_at DATETIME(6) NOT NULL,
  result_ref TEXT,
  error_code VARCHAR(64),
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  CONSTRAINT export_jobs_status_check
    CHECK (status IN ('queued','running','succeeded','failed','cancelled')),
  CONSTRAINT export_jobs_attempts_check CHECK (attempts >= 0),
  -- listing and backlog queries: WHERE status=? ORDER BY created_at
  KEY export_jobs_status_created (status, created_at),
  -- due queued jobs: WHERE status='queued' AND next_attempt_at<=NOW(6) ORDER BY next_attempt_at
  KEY export_jobs_recovery (status, next_attempt_at, updated_at),
  -- expired leases: WHERE status='running' AND lease_until<NOW(6) ORDER BY lease_until
  -- FOR UPDATE SKIP LOCKED.  Without an index in this order the server sorts, and locks every row it read
  KEY export_jobs_lease_expiry (status, lease_until)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
