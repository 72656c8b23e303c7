"""shared/lesson_db.py's helpers that several lessons' verifiers share: the parts that need no server
(the SQL they send is recorded instead of run)."""

import json

import pymysql
import pytest

from shared import lesson_db


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
