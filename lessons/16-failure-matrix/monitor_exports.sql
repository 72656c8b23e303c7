-- Lesson 16, step 2: read-only backlog, lease and failure queries.  How many, how old, and why.
-- Run them in a read-only session of their own, in UTC:
--   mysql -h 127.0.0.1 -P 3307 -u app_user -p shop_lab < monitor_exports.sql
-- Write the numbers down as they come back: an age of NULL means "nothing is waiting", which is
-- not the same fact as "waited 0 seconds" — never turn it into 0 (no COALESCE/IFNULL on ages).
-- Ages are computed in microseconds and divided, so sub-second waits are not rounded away.
-- Runs unchanged on MySQL 8.4 and MariaDB 10.11.

SET time_zone = '+00:00';

-- 1. Every job by state: the size of each pile.
SELECT status, COUNT(*) AS total
FROM export_jobs
GROUP BY status;

-- 2. Accepted but not yet handed to the broker: how many, and the oldest one's age.
SELECT COUNT(*) AS unpublished,
       TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(6)) / 1000000 AS oldest_unpublished_seconds
FROM export_outbox
WHERE sent_at IS NULL;

-- 3. Running jobs whose lease has run out: their executor is gone or stuck; recovery will requeue them.
SELECT COUNT(*) AS expired_leases
FROM export_jobs
WHERE status = 'running' AND lease_until < NOW(6);

-- 4. Why jobs were taken out of automatic processing.
SELECT reason, COUNT(*) AS failed
FROM export_dead_letters
GROUP BY reason;

-- 5. Queued jobs with no unsent event: dispatched, yet nobody has claimed them.  Not lost by
--    itself — compare the age with the 60 s unclaimed threshold, next_attempt_at and the deadline.
SELECT COUNT(*) AS queued_without_pending,
       TIMESTAMPDIFF(MICROSECOND, MIN(COALESCE(j.last_dispatched_at, j.created_at)), NOW(6)) / 1000000
         AS oldest_dispatch_age
FROM export_jobs AS j
WHERE j.status = 'queued'
  AND NOT EXISTS (SELECT 1 FROM export_outbox AS o WHERE o.job_id = j.id AND o.sent_at IS NULL);

-- 6. The oldest unfinished jobs, to follow up by id in the phase logs.
SELECT id, status, attempts, next_attempt_at, last_dispatched_at
FROM export_jobs
WHERE status IN ('queued', 'running')
ORDER BY created_at
LIMIT 20;
