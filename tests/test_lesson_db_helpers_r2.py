"""Shared helpers lessons 13-16 call instead of writing their own: lesson_db's dead letters, first product, cancel
request, "marked sent, never sent", leftovers closed, times set or moved back by UPDATE; i18n.listed;
HelperGroup's folder named by a str.  The statements each sends (no server needed)."""

import re

import pytest

from shared import handshake, i18n, lesson_celery, lesson_db


MARKED = "UPDATE export_outbox SET sent_at=DATE_SUB(NOW(6), INTERVAL %s SECOND), claim_until=NULL WHERE sent_at IS NULL"


@pytest.fixture
def sent(monkeypatch):
    """Every statement lesson_db.sql / changed_rows would send, whitespace folded, with its arguments."""
    log = []

    def record(query, args=()):
        log.append((" ".join(query.split()), list(args)))
        return []

    monkeypatch.setattr(lesson_db, "sql", record)
    monkeypatch.setattr(lesson_db, "changed_rows", lambda query, args=(): record(query, args) or 1)
    return log


def test_dead_letters_reads_the_columns_asked_for(sent):
    lesson_db.dead_letters("j1")
    lesson_db.dead_letters("j2", "job_id, reason, quarantined_at")
    assert sent == [("SELECT job_id, reason FROM export_dead_letters WHERE job_id=%s", ["j1"]),
                    ("SELECT job_id, reason, quarantined_at FROM export_dead_letters WHERE job_id=%s", ["j2"])]


def test_first_product_is_the_lowest_id_and_an_empty_table_is_said(monkeypatch):
    monkeypatch.setattr(lesson_db, "sql", lambda query, args=(): [{"id": 4}])
    assert lesson_db.first_product() == 4
    monkeypatch.setattr(lesson_db, "sql", lambda query, args=(): [{"id": None}])
    with pytest.raises(AssertionError, match="the products table is empty"):
        lesson_db.first_product()


def test_request_cancel_is_lesson_15s_update_and_says_the_rows_changed(sent):
    assert lesson_db.request_cancel("j1") == 1
    assert sent == [("UPDATE export_jobs SET cancel_requested=TRUE, updated_at=NOW(6) "
                     "WHERE id=%s AND status IN ('queued','running')", ["j1"])]


def test_mark_sent_for_some_jobs_or_all(sent):
    lesson_db.mark_sent(["a", "b"], 61)
    lesson_db.mark_sent()
    marked = MARKED
    assert sent == [(marked + " AND job_id IN (%s,%s)", [61, "a", "b"]), (marked, [0])]


def test_dispatched_unclaimed_marks_the_events_and_sets_the_jobs_columns(sent):
    lesson_db.dispatched_unclaimed("j1")
    lesson_db.dispatched_unclaimed("j2", 20, ("last_dispatched_at", "updated_at"))
    assert sent[0] == (MARKED + " AND job_id IN (%s)", [0, "j1"])
    assert sent[2] == (MARKED + " AND job_id IN (%s)", [20, "j2"])
    assert sent[1] == ("UPDATE export_jobs SET last_dispatched_at=DATE_SUB(NOW(6), INTERVAL %s SECOND) "
                       "WHERE id IN (%s)", [0, "j1"])
    assert sent[3] == ("UPDATE export_jobs SET last_dispatched_at=DATE_SUB(NOW(6), INTERVAL %s SECOND), "
                       "updated_at=DATE_SUB(NOW(6), INTERVAL %s SECOND) WHERE id IN (%s)", [20, 20, "j2"])


def test_set_ago_sets_the_columns_of_these_rows_before_the_servers_now(sent):
    lesson_db.set_ago("export_jobs", "id", ["a", "b"], 1, "deadline_at", "lease_until")
    assert sent == [("UPDATE export_jobs SET deadline_at=DATE_SUB(NOW(6), INTERVAL %s SECOND), "
                     "lease_until=DATE_SUB(NOW(6), INTERVAL %s SECOND) WHERE id IN (%s,%s)", [1, 1, "a", "b"])]


def test_close_open_jobs_marks_events_sent_then_closes_only_open_jobs(sent):
    lesson_db.close_open_jobs([], "status='failed'")
    assert sent == []  # no jobs given: nothing touched (never every job)
    lesson_db.close_open_jobs(["a"], "status='failed', error_code='x'")
    lesson_db.close_open_jobs(None, "status='cancelled'")
    marked = MARKED
    assert len(sent) == 4 and sent[0] == (marked + " AND job_id IN (%s)", [0, "a"]) and sent[2] == (marked, [0])
    assert sent[1] == ("UPDATE export_jobs SET status='failed', error_code='x' WHERE status IN ('queued','running') "
                       "AND id IN (%s)", ["a"])
    assert sent[3] == ("UPDATE export_jobs SET status='cancelled' WHERE status IN ('queued','running')", [])


def test_move_back_shifts_the_columns_of_these_rows_to_the_microsecond(sent):
    lesson_db.move_back("export_outbox", "job_id", ["a", "b"], 1.5, "created_at", "sent_at")
    assert sent == [("UPDATE export_outbox SET created_at=DATE_SUB(created_at, INTERVAL %s MICROSECOND), "
                     "sent_at=DATE_SUB(sent_at, INTERVAL %s MICROSECOND) WHERE job_id IN (%s,%s)",
                     [1500000, 1500000, "a", "b"])]


@pytest.mark.parametrize("language, plain, semicolons", [("en", "a, b, c", "a; b; c"), ("zh", "a，b，c", "a；b；c")])
def test_listed_joins_in_the_learners_language(monkeypatch, language, plain, semicolons):
    monkeypatch.setenv("LAB_LANG", language)
    assert i18n.listed(["a", "b", "c"]) == plain
    assert i18n.listed(["a", "b", "c"], semicolons=True) == semicolons
    assert i18n.listed(["{x}"]) == "{x}" and i18n.listed([]) == ""


def test_helper_group_folder_named_by_a_str_is_new_under_the_log_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(lesson_celery, "LOG_DIR", tmp_path)
    script = tmp_path / "dies.py"
    script.write_text("raise SystemExit(3)\n")
    with pytest.raises(AssertionError):
        handshake.HelperGroup([str(script)], ["A"], "lx-scan", "scan", env={"PATH": "/usr/bin:/bin"})
    made = [p.name for p in tmp_path.iterdir() if p.is_dir()]
    assert len(made) == 1 and re.fullmatch(r"lx-scan-[0-9a-f]{8}", made[0])
