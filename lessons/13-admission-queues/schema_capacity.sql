-- Lesson 13: the admission gate and the event's route.
-- Run once, on its own (DDL commits implicitly, so never inside an application transaction),
-- after schema_jobs.sql and schema_outbox.sql, in the shop_lab database:
--   mysql -h 127.0.0.1 -P 3307 -u app_user -p shop_lab < schema_capacity.sql
-- This is a migration, not a script to re-run blindly: on a second run CREATE TABLE and ADD COLUMN
-- fail on purpose.  Look first:  SHOW CREATE TABLE export_admission_gate\G  and  SHOW CREATE TABLE export_outbox\G
-- Runs unchanged on MySQL 8.4 and MariaDB 10.11.

SET time_zone = '+00:00';

-- One row, id=1, and never another: every job-creating transaction locks it (SELECT … FOR UPDATE)
-- before it counts queued+running and inserts.  A real InnoDB row lock, released by COMMIT/ROLLBACK,
-- unlike a session-level GET_LOCK that would outlive a rolled-back transaction.
CREATE TABLE export_admission_gate (
  id TINYINT PRIMARY KEY,
  CONSTRAINT export_admission_singleton CHECK (id = 1)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

INSERT INTO export_admission_gate (id) VALUES (1);
COMMIT;

-- Where the publisher sends each event.  Events written before this lesson default to bulk: the
-- safe guess for a job whose size nobody recorded.  Only the two consumed queues are allowed, so a
-- typo cannot send an event to a queue no worker listens on.
ALTER TABLE export_outbox
  ADD COLUMN queue_name VARCHAR(32) NOT NULL DEFAULT 'exports.bulk',
  ADD CONSTRAINT export_outbox_queue_check
    CHECK (queue_name IN ('exports.fast', 'exports.bulk'));
