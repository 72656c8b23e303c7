"""shared/lesson_db.py's helpers that several lessons' verifiers share: the parts that need no server
(the SQL they send is recorded instead of run); and the hold gate's wait, HelperGroup's own words and folder,
handshake.error_of and i18n.listed that lessons 11-16 call instead of writing their own."""

import contextlib
import json
import re
import sys
import types

import pymysql
import pytest

from shared import handshake, i18n, lesson_db, logs
from shared.hold_gate import HoldList
from shared.events import append_event
from shared.proc import WaitTimeout


@pytest.fixture
def sent(monkeypatch):
    """Every statement lesson_db.sql() would send, with its arguments; sql() answers `answer[0]`."""
    class Sent(list):
        answer: list = [[]]
    statements = Sent()
    answer = statements.answer

    def fake_sql(query, args=()):
        statements.append((" ".join(query.split()), args))
        return answer[0]
    monkeypatch.setattr(lesson_db, "sql", fake_sql)
    return statements


def test_payload_of_decodes_text_and_keeps_a_decoded_column():
    rows = [{"id": 1, "name": "a"}]
    for value in (json.dumps(rows), json.dumps(rows).encode(), bytearray(json.dumps(rows).encode()), rows):
        assert lesson_db.payload_of({"payload": value}) == rows


def test_lease_token_of():
    assert lesson_db.lease_token_of(None) is None
    assert lesson_db.lease_token_of({"lease_token": 7}) == "7"
    for wrong in ({"lease_token": None}, ("row",), {}):
        with pytest.raises(AssertionError, match="lease_token or None"):
            lesson_db.lease_token_of(wrong)


def test_result_file_is_relative_to_the_work_folder_or_absolute(tmp_path, monkeypatch):
    monkeypatch.setattr(lesson_db, "WORK", tmp_path)
    (tmp_path / "artifacts").mkdir()
    (tmp_path / "artifacts" / "a.json").write_text('[{"id": 1}]', encoding="utf-8")
    assert lesson_db.result_file({"result_ref": "artifacts/a.json"}) == (tmp_path / "artifacts" / "a.json", [{"id": 1}])
    absolute = str(tmp_path / "artifacts" / "a.json")
    assert lesson_db.result_file({"result_ref": absolute})[1] == [{"id": 1}]
    with pytest.raises(AssertionError, match="result_ref is empty"):
        lesson_db.result_file({"result_ref": None})
    with pytest.raises(AssertionError, match="points to no file"):
        lesson_db.result_file({"result_ref": "artifacts/missing.json"})


def test_explained_turns_only_the_mariadb_mismatch_into_the_hint():
    with pytest.raises(AssertionError, match="^see the guide$"):
        with lesson_db.explained("see the guide"):
            raise pymysql.err.OperationalError(1193, "Unknown system variable 'max_execution_time'")
    for other in (pymysql.err.OperationalError(1193, "Unknown system variable 'foo'"),
                  pymysql.err.OperationalError(2003, "max_execution_time"), ValueError("x")):
        with pytest.raises(type(other)):
            with lesson_db.explained("see the guide"):
                raise other
    with lesson_db.explained("see the guide"):
        pass


def test_seconds_until_and_expire_lease(sent):
    sent.answer[0] = [{"us": -1500000}]
    assert lesson_db.seconds_until("j1", "lease_until") == -1.5
    assert sent[-1] == ("SELECT TIMESTAMPDIFF(MICROSECOND, NOW(6), lease_until) AS us FROM export_jobs WHERE id=%s",
                        ("j1",))
    sent.answer[0] = [{"us": None}]
    assert lesson_db.seconds_until("j1", "lease_until") is None
    sent.answer[0] = []
    assert lesson_db.seconds_until("j1", "lease_until") is None
    lesson_db.expire_lease("j1")
    assert sent[-1] == ("UPDATE export_jobs SET lease_until=DATE_SUB(NOW(6), INTERVAL 1 SECOND) WHERE id=%s", ("j1",))
    lesson_db.expire_lease("j1", running_only=True)
    assert sent[-1][0].endswith("WHERE id=%s AND status='running'")


def test_outbox_of(sent):
    lesson_db.outbox_of("j1")
    assert sent[-1] == ("SELECT *, claim_until>NOW(6) AS live, NOW(6) AS now FROM export_outbox WHERE job_id=%s "
                        "ORDER BY created_at, id", ("j1",))
    lesson_db.outbox_of("j1", unsent_only=True)
    assert "WHERE job_id=%s AND sent_at IS NULL ORDER BY" in sent[-1][0]


def test_fault_trigger_marks_the_row_signals_and_clears_the_marks(sent):
    with lesson_db.fault_trigger("kit_fault", "BEFORE UPDATE", "export_outbox", "kit_marks", "no-confirm", "e1",
                                 "drill: lost", when="OLD.sent_at IS NULL", ref_of="OLD.id"):
        inside = list(sent)
    assert ("INSERT INTO kit_marks (kind, ref) VALUES (%s, %s)", ("no-confirm", "e1")) in inside
    assert inside[-1] == ("CREATE TRIGGER kit_fault BEFORE UPDATE ON export_outbox FOR EACH ROW BEGIN IF "
                          "OLD.sent_at IS NULL AND EXISTS (SELECT 1 FROM kit_marks WHERE kind='no-confirm' AND "
                          "ref=OLD.id) THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'drill: lost'; END IF; END", ())
    assert inside.index(("DELETE FROM kit_marks", ())) < inside.index(
        ("INSERT INTO kit_marks (kind, ref) VALUES (%s, %s)", ("no-confirm", "e1")))  # only this mark
    after = sent[len(inside):]
    assert ("DROP TRIGGER IF EXISTS kit_fault", ()) in after and after[-1] == ("DELETE FROM kit_marks", ())


def test_fault_trigger_clears_its_mark_when_the_trigger_cannot_be_made(sent, monkeypatch):
    def refused(query, args=()):
        sent.append((" ".join(query.split()), args))
        if query.lstrip().startswith("CREATE TRIGGER"):
            raise pymysql.err.OperationalError(1142, "TRIGGER command denied")
        return []
    monkeypatch.setattr(lesson_db, "sql", refused)
    with pytest.raises(AssertionError, match="cannot create its trigger"):
        with lesson_db.fault_trigger("kit_fault", "BEFORE INSERT", "export_outbox", "kit_marks", "fail", "all", "x"):
            pass
    assert sent[-1] == ("DELETE FROM kit_marks", ())


def test_marked_trigger_without_condition_or_row_match(sent):
    with lesson_db.marked_trigger("kit_hold", "BEFORE INSERT", "export_jobs", "kit_marks", "hold",
                                  "DO GET_LOCK('g', 60); DO RELEASE_LOCK('g');"):
        pass
    assert ("CREATE TRIGGER kit_hold BEFORE INSERT ON export_jobs FOR EACH ROW BEGIN IF EXISTS (SELECT 1 FROM "
            "kit_marks WHERE kind='hold') THEN DO GET_LOCK('g', 60); DO RELEASE_LOCK('g'); END IF; END", ()) in sent


def test_active_jobs(sent):
    sent.answer[0] = [{"n": 4}]
    assert lesson_db.active_jobs() == 4
    assert sent[-1][0] == "SELECT COUNT(*) AS n FROM export_jobs WHERE status IN ('queued','running')"


def test_job_event_counts(sent):
    sent.answer[0] = [{"jobs": 3, "events": 2}]
    assert lesson_db.job_event_counts() == (3, 2)
    assert sent[-1][0] == ("SELECT (SELECT COUNT(*) FROM export_jobs) AS jobs, (SELECT COUNT(*) FROM export_outbox) "
                           "AS events")


def test_changed_rows_is_the_statements_row_count_on_a_connection_of_its_own(monkeypatch):
    import contextlib
    opened = []

    class Cursor:
        def execute(self, query, args):
            opened.append((query, args))
            return 2

    @contextlib.contextmanager
    def own_connection():
        yield Cursor()
    monkeypatch.setattr(lesson_db, "kit_db", own_connection)
    assert lesson_db.changed_rows("UPDATE t SET a=1 WHERE id=%s", ("x",)) == 2
    assert opened == [("UPDATE t SET a=1 WHERE id=%s", ("x",))]


def test_uuid_re_finds_a_printed_job_id():
    import re
    import uuid
    job_id = str(uuid.uuid4())
    assert re.findall(rf"ready for publisher:\s*({lesson_db.UUID_RE})", f"ready for publisher: {job_id}\n") == [job_id]


def test_connect_reaches_the_slots_database_or_another_of_the_same_server(monkeypatch):
    opened = []
    monkeypatch.setattr(pymysql, "connect", lambda **kwargs: opened.append(kwargs))
    monkeypatch.setattr(lesson_db, "db_settings", lambda: {"host": "127.0.0.1", "database": "shop_lab"})
    lesson_db.connect()
    lesson_db.connect(database=None, io_timeout=15)
    lesson_db.connect(database="shop_lab_m16")
    assert [o["database"] for o in opened] == ["shop_lab", None, "shop_lab_m16"]
    assert [(o["read_timeout"], o["write_timeout"]) for o in opened] == [(10, 10), (15, 15), (10, 10)]
    assert all(o["init_command"] == "SET time_zone = '+00:00'" for o in opened)  # UTC on every one


def test_fill_admission_adds_kit_rows_up_to_the_limit(monkeypatch):
    executed = []

    class Cursor:
        def executemany(self, query, rows):
            executed.append((" ".join(query.split()), rows))

    @contextlib.contextmanager
    def fake_kit_db(autocommit=True):
        yield Cursor()

    monkeypatch.setattr(lesson_db, "kit_db", fake_kit_db)
    monkeypatch.setattr(lesson_db, "active_jobs", lambda: 7)
    fillers = lesson_db.fill_admission(10)
    assert len(fillers) == 3 and len(set(fillers)) == 3
    assert executed == [("INSERT INTO export_jobs (id, payload, deadline_at) VALUES "
                         "(%s, '[]', DATE_ADD(NOW(6), INTERVAL 10 MINUTE))", [(f,) for f in fillers])]
    monkeypatch.setattr(lesson_db, "active_jobs", lambda: 12)  # already past the limit: nothing added
    assert lesson_db.fill_admission(10) == [] and executed[-1][1] == []


@pytest.mark.parametrize("signature, expected", [
    ("def admit_export(cur, limit=7): pass", 7),
    ("def admit_export(cur, limit=None): pass", None),
    ("def admit_export(cur, limit): pass", None),
    ("def admit_export(cur): pass", None),
])
def test_limit_default_reads_the_learners_admit_export(monkeypatch, signature, expected):
    module = types.ModuleType("state_store")
    exec(signature, module.__dict__)
    monkeypatch.setitem(sys.modules, "state_store", module)
    assert lesson_db.limit_default() == expected


def test_wait_status_says_a_lessons_own_words_when_given(monkeypatch):
    monkeypatch.setattr(lesson_db, "job_row", lambda job_id: {"status": "running", "attempts": 1})
    with pytest.raises(AssertionError, match="did not reach"):
        lesson_db.wait_status("j1", lesson_db.TERMINAL, seconds=0.05, interval=0.01)
    with pytest.raises(AssertionError, match="^late: running$"):
        lesson_db.wait_status("j1", lesson_db.TERMINAL, seconds=0.05, interval=0.01,
                              late=lambda row: f"late: {row['status']}")
    monkeypatch.setattr(lesson_db, "job_row", lambda job_id: {"status": "succeeded"})
    assert lesson_db.wait_status("j1", lesson_db.TERMINAL, late=lambda row: "never")["status"] == "succeeded"


def test_result_file_says_a_lessons_own_words_for_a_missing_file(tmp_path, monkeypatch):
    monkeypatch.setattr(lesson_db, "WORK", tmp_path)
    with pytest.raises(AssertionError, match="^no such file here$"):
        lesson_db.result_file({"result_ref": "artifacts/missing.json"}, "no such file here")
    with pytest.raises(AssertionError, match="result_ref is empty"):  # that one keeps the shared words
        lesson_db.result_file({"result_ref": ""}, "no such file here")


@pytest.mark.parametrize("failed", [None, "a racer failed to start:\n"])
def test_helper_group_start_up_failure_in_a_lessons_words(tmp_path, failed):
    script = tmp_path / "dies.py"
    script.write_text("print('cannot import the learner module')\nraise SystemExit(3)\n")
    with pytest.raises(AssertionError) as raised:
        handshake.HelperGroup([str(script)], ["A", "B"], tmp_path / "hs", "racer", env={"PATH": "/usr/bin:/bin"},
                              failed=failed)
    said = str(raised.value)
    assert said.startswith(failed or "racer process ")
    assert "cannot import the learner module" in said


def test_event_sent(monkeypatch):
    answers = {"e1": [{"sent_at": "2026-01-01 10:00:00"}], "e2": [{"sent_at": None}], "e3": []}
    monkeypatch.setattr(lesson_db, "sql", lambda query, args=(): answers[args[0]])
    assert [lesson_db.event_sent(e) for e in ("e1", "e2", "e3")] == [True, False, False]


def test_error_of_is_a_helpers_failed_call_cut_to_its_limit():
    assert handshake.error_of(ValueError("bad key")) == {"error": "ValueError: bad key"}
    assert handshake.error_of(RuntimeError("x" * 400), 200) == {"error": ("RuntimeError: " + "x" * 400)[:200]}
    assert len(handshake.error_of(RuntimeError("x" * 400))["error"]) == 300


def test_wait_held_says_a_lessons_own_words_when_no_worker_is_held(tmp_path):
    gate = HoldList(tmp_path, "lx")
    with pytest.raises(WaitTimeout):
        gate.wait_held(["job-1"], 0.05, "nothing", interval=0.01)
    with pytest.raises(AssertionError, match="^job-1 was never held$"):
        gate.wait_held(["job-1"], 0.05, "nothing", interval=0.01, late=lambda: "job-1 was never held")
    append_event(gate.events, "hold", job="job-1", phase="write")
    assert gate.wait_held(["job-1"], 1, "held", phase="write", late=lambda: "never")["job"] == "job-1"


MARKED = "UPDATE export_outbox SET sent_at=DATE_SUB(NOW(6), INTERVAL %s SECOND), claim_until=NULL WHERE sent_at IS NULL"


@pytest.fixture
def writes(monkeypatch):
    """Like `sent`, for the kit's writes: lesson_db.sql and changed_rows both recorded, arguments as a list."""
    log = []

    def record(query, args=()):
        log.append((" ".join(query.split()), list(args)))
        return []

    monkeypatch.setattr(lesson_db, "sql", record)
    monkeypatch.setattr(lesson_db, "changed_rows", lambda query, args=(): record(query, args) or 1)
    return log


def test_dead_letters_reads_the_columns_asked_for(writes):
    lesson_db.dead_letters("j1")
    lesson_db.dead_letters("j2", "job_id, reason, quarantined_at")
    assert writes == [("SELECT job_id, reason FROM export_dead_letters WHERE job_id=%s", ["j1"]),
                    ("SELECT job_id, reason, quarantined_at FROM export_dead_letters WHERE job_id=%s", ["j2"])]


def test_first_product_is_the_lowest_id_and_an_empty_table_is_said(monkeypatch):
    monkeypatch.setattr(lesson_db, "sql", lambda query, args=(): [{"id": 4}])
    assert lesson_db.first_product() == 4
    monkeypatch.setattr(lesson_db, "sql", lambda query, args=(): [{"id": None}])
    with pytest.raises(AssertionError, match="the products table is empty"):
        lesson_db.first_product()


def test_request_cancel_is_lesson_15s_update_and_says_the_rows_changed(writes):
    assert lesson_db.request_cancel("j1") == 1
    assert writes == [("UPDATE export_jobs SET cancel_requested=TRUE, updated_at=NOW(6) "
                     "WHERE id=%s AND status IN ('queued','running')", ["j1"])]


def test_mark_sent_for_some_jobs_or_all(writes):
    lesson_db.mark_sent(["a", "b"], 61)
    lesson_db.mark_sent()
    marked = MARKED
    assert writes == [(marked + " AND job_id IN (%s,%s)", [61, "a", "b"]), (marked, [0])]


def test_dispatched_unclaimed_marks_the_events_and_sets_the_jobs_columns(writes):
    lesson_db.dispatched_unclaimed("j1")
    lesson_db.dispatched_unclaimed("j2", 20, ("last_dispatched_at", "updated_at"))
    assert writes[0] == (MARKED + " AND job_id IN (%s)", [0, "j1"])
    assert writes[2] == (MARKED + " AND job_id IN (%s)", [20, "j2"])
    assert writes[1] == ("UPDATE export_jobs SET last_dispatched_at=DATE_SUB(NOW(6), INTERVAL %s SECOND) "
                       "WHERE id IN (%s)", [0, "j1"])
    assert writes[3] == ("UPDATE export_jobs SET last_dispatched_at=DATE_SUB(NOW(6), INTERVAL %s SECOND), "
                       "updated_at=DATE_SUB(NOW(6), INTERVAL %s SECOND) WHERE id IN (%s)", [20, 20, "j2"])


def test_set_ago_sets_the_columns_of_these_rows_before_the_servers_now(writes):
    lesson_db.set_ago("export_jobs", "id", ["a", "b"], 1, "deadline_at", "lease_until")
    assert writes == [("UPDATE export_jobs SET deadline_at=DATE_SUB(NOW(6), INTERVAL %s SECOND), "
                     "lease_until=DATE_SUB(NOW(6), INTERVAL %s SECOND) WHERE id IN (%s,%s)", [1, 1, "a", "b"])]


def test_close_open_jobs_marks_events_sent_then_closes_only_open_jobs(writes):
    lesson_db.close_open_jobs([], "status='failed'")
    assert writes == []  # no jobs given: nothing touched (never every job)
    lesson_db.close_open_jobs(["a"], "status='failed', error_code='x'")
    lesson_db.close_open_jobs(None, "status='cancelled'")
    marked = MARKED
    assert len(writes) == 4 and writes[0] == (marked + " AND job_id IN (%s)", [0, "a"]) and writes[2] == (marked, [0])
    assert writes[1] == ("UPDATE export_jobs SET status='failed', error_code='x' WHERE status IN ('queued','running') "
                       "AND id IN (%s)", ["a"])
    assert writes[3] == ("UPDATE export_jobs SET status='cancelled' WHERE status IN ('queued','running')", [])


def test_move_back_shifts_the_columns_of_these_rows_to_the_microsecond(writes):
    lesson_db.move_back("export_outbox", "job_id", ["a", "b"], 1.5, "created_at", "sent_at")
    assert writes == [("UPDATE export_outbox SET created_at=DATE_SUB(created_at, INTERVAL %s MICROSECOND), "
                     "sent_at=DATE_SUB(sent_at, INTERVAL %s MICROSECOND) WHERE job_id IN (%s,%s)",
                     [1500000, 1500000, "a", "b"])]


@pytest.mark.parametrize("language, plain, semicolons", [("en", "a, b, c", "a; b; c"), ("zh", "a，b，c", "a；b；c")])
def test_listed_joins_in_the_learners_language(monkeypatch, language, plain, semicolons):
    monkeypatch.setenv("LAB_LANG", language)
    assert i18n.listed(["a", "b", "c"]) == plain
    assert i18n.listed(["a", "b", "c"], semicolons=True) == semicolons
    assert i18n.listed(["{x}"]) == "{x}" and i18n.listed([]) == ""


def test_helper_group_folder_named_by_a_str_is_new_under_the_log_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(logs, "LOG_DIR", tmp_path)  # read when the group starts
    script = tmp_path / "dies.py"
    script.write_text("raise SystemExit(3)\n")
    with pytest.raises(AssertionError):
        handshake.HelperGroup([str(script)], ["A"], "lx-scan", "scan", env={"PATH": "/usr/bin:/bin"})
    made = [p.name for p in tmp_path.iterdir() if p.is_dir()]
    assert len(made) == 1 and re.fullmatch(r"lx-scan-[0-9a-f]{8}", made[0])
