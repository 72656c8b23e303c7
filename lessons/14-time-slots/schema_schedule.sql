-- Lesson 14: one row per time slot that already has its export job.
-- Run once, on its own, after schema_jobs.sql, schema_outbox.sql and schema_capacity.sql:
--   mysql -h 127.0.0.1 -P 3307 -u app_user -p shop_lab < schema_schedule.sql
-- Then look at it:  SHOW CREATE TABLE export_schedule_slots\G
-- Runs unchanged on MySQL 8.4 and MariaDB 10.11.

SET time_zone = '+00:00';

CREATE TABLE IF NOT EXISTS export_schedule_slots (
  -- the slot's name, e.g. shop-export:20260101T1000 (a UTC minute).  ascii_bin: byte-for-byte,
  -- so 'A' and 'a' are two slots and no collation quietly folds two names into one.
  -- PRIMARY KEY = the last word on "this slot already has a job", whatever the code above it does.
  slot_key VARCHAR(160) CHARACTER SET ascii COLLATE ascii_bin PRIMARY KEY,
  -- the job this slot created; UNIQUE: one job never serves two slots
  job_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL UNIQUE,
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  -- Checked at once, statement by statement (MySQL has no deferred constraints): the job row must
  -- already exist when the slot row is inserted.  So the order inside the transaction is job → slot.
  CONSTRAINT export_schedule_job_fk FOREIGN KEY (job_id) REFERENCES export_jobs(id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
