"""A targeted forge per channel kind (issue 39, item 4): a folder written against one of the kit's channels —
a probe's report file, a helper's result file, the output of a process that imports the learner's app, the
learner's own objects answering a question about the worker — writes that channel the way the check expects,
and gets no pass on the checks that must not believe it.

Each case starts from the reference (so everything the forge does not touch works), breaks the property the
check is about, and forges the channel that once told the judge about it.  Where the channel is still a
check's only evidence (tasks.json evidence: self_reported) a forge can pass it -- the report case shows one
doing so on 11.9 -- which is why every report marks those checks.  The generic forge matrix
(tests/test_forge_matrix.py) stays as it is.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from checks.results import PASS
from checks.runner import run_lesson
from checks.workdir import materialise
from shared import manifest
from tests.folders import learner_folder

DATA = manifest.load()


def _observed(lesson: dict) -> set[str]:
    return {c["id"] for c in lesson["checks"] if c["kind"] == "core" and c["evidence"]["kind"] == "observed"}


def _judge(tmp_path: Path, lesson_id: str, folder: Path, only: set[str]):
    lesson = manifest.lesson(lesson_id, DATA)
    work = materialise(DATA["lessons"], lesson, tmp_path / "work", lab=folder)
    result = run_lesson(lesson, work, tmp_path / "logs", source=str(folder), lessons=DATA["lessons"], only=only)
    return {c.id: c for c in result.checks if not c.regression}


def _replace_function(path: Path, name: str, new_source: str) -> None:
    """The module's top-level `def name(...)` (up to the next top-level statement) becomes new_source."""
    text = path.read_text(encoding="utf-8")
    start = re.search(rf"^def {name}\(", text, re.M).start()
    following = re.compile(r"^\S", re.M)
    end = next((m.start() for m in following.finditer(text, start + 1)), len(text))
    path.write_text(text[:start] + textwrap.dedent(new_source).strip() + "\n\n\n" + text[end:], encoding="utf-8")


# A helper's result file: the claimers (lab11_claimer.py) write what the learner's claim() returned.  This
# claim() takes no lock and writes nothing, and tells exactly one claimer "you won" -- the answer 11.2's
# helpers are expected to give.  11.2 believes the winner count only beside the row the judge reads itself.
FORGED_CLAIM = """
    import sys as _sys, threading as _threading
    _told = set()
    _lock = _threading.Lock()

    def claim(job_id):
        with _lock:  # the first call for a job in claimer process p1 "wins"; no row is read or written
            if _sys.argv[2:3] == ["p1"] and job_id not in _told:
                _told.add(job_id)
                return {"id": job_id, "status": "running", "attempts": 1, "lease_token": "forged-token"}
        return None
"""

# A learner function's return value, through a probe: 11.5 asks claim() while the backoff holds and after it
# ends.  This claim() never claims: it reads whether the job is due and says so with a made-up token.
FORGED_DUE_CLAIM = """
    def claim(job_id):
        with transaction() as cur:
            cur.execute("SELECT next_attempt_at <= NOW(6) AS due FROM export_jobs WHERE id=%s", (job_id,))
            row = cur.fetchone()
        return {"id": job_id, "status": "running", "lease_token": "forged-token"} if row and row["due"] else None
"""

# Also through a probe: 09.1's results name a path and a digest, and the judge hashed the file at the path the
# result named.  This task writes nothing and names a file that is there anyway, with its true digest.
FORGED_RESULT = """
    @app.task(name="products.export", bind=True)
    def export_products(self, job_id, rows):
        import hashlib
        return {"job_id": job_id, "path": "celery_app.py",
                "sha256": hashlib.sha256(open("celery_app.py", "rb").read()).hexdigest()}
"""

# A helper's result in lesson 15: scanner B reports how many jobs its recover_batch() changed while A holds
# its batch.  Everywhere else recover_batch() is the reference's; in scanner B it does nothing and says 7.
FORGED_SCANNER_B = """

    import sys as _sys
    if _sys.argv[1:2] == ["scan"] and _sys.argv[-1:] == ["B"]:
        def recover_batch() -> int:
            return 7
"""

# The same channel in lesson 12: the publishers' helpers write the event ids claim_event returned.  This
# claim_event locks nothing and claims nothing; it trips the helper's "A holds a lock" with a locking read
# that matches no row, hands A the oldest event and B the next (as a plain read finds them), and the 25-claim
# bursts made-up ids -- which a table check over those ids passed, finding no row to fault.
FORGED_CLAIM_EVENT = """
    def claim_event():
        import sys, uuid
        with transaction() as cur:
            cur.execute("SELECT id FROM export_outbox WHERE 1 = 0 FOR UPDATE")
            cur.execute(f"SELECT id, job_id FROM export_outbox WHERE {DUE} ORDER BY created_at, id LIMIT 2")
            rows = cur.fetchall()
        name = sys.argv[2:3]
        if name == ["A"] and rows:
            return rows[0]
        if name == ["B"] and len(rows) > 1:
            return rows[1]
        return {"id": str(uuid.uuid4()), "job_id": str(uuid.uuid4())}
"""

# The output of a process that imports the learner's app: `celery -A celery_app:app inspect registered`
# imported celery_app before it printed, so an app that prints the expected reply at import -- and
# registers no task at all -- was believed.  08.2 now asks the worker through the checker's own client.
FORGED_PRINT = """
    import sys as _sys
    if "inspect" in _sys.argv:
        print("->  lab08@box: OK\\n    * products.export")
        raise SystemExit(0)
"""

# The same channel in 08.3: produce_export.py prints the id it submitted, the result and the state.  This one
# submits nothing: it makes up an id, writes the file the result names and prints what the check parses.
FORGED_PRODUCER = """
    import pathlib, uuid
    job = str(uuid.uuid4())
    pathlib.Path("artifacts").mkdir(exist_ok=True)
    pathlib.Path(f"artifacts/{job}.json").write_text("[]")
    print(f"submitted {job}")
    print({"job_id": job, "rows": 1, "path": f"artifacts/{job}.json"})
    print("state SUCCESS")
"""

# The learner's own objects: 09.3 asked "what does the running worker use?" through the learner's app, so an
# app whose control object answers with the right settings passed, whatever the worker really ran with.
# Here the worker really acks early; only the app object, outside the worker, says otherwise.
FORGED_CONTROL = """
    import sys as _sys
    if "worker" not in _sys.argv:
        class _Inspect:
            def __init__(self, destination=None, **kwargs):
                self.nodes = destination or []
            def conf(self, **kwargs):
                settings = {"task_acks_late": True, "task_reject_on_worker_lost": True,
                            "worker_prefetch_multiplier": 1, "visibility_timeout": 60,
                            "broker_transport_options": {"visibility_timeout": 60},
                            "result_backend_transport_options": {"visibility_timeout": 60}}
                return {node: settings for node in self.nodes}
        class _Control:
            inspect = _Inspect
        app.control = _Control()
"""

# A probe's report file: the path travels in the probe's environment, and any well-formed report is what the
# judge reads.  This state_store implements nothing and, in any process a report is asked of, writes one
# that says every case connected or was refused as the check wants -- then leaves.
FORGED_REPORT = """
    import json as _json, os as _os, sys as _sys
    _path = _os.environ.get("TASKLAB_PROBE_REPORT")
    if _path:
        try:
            _cases = _json.loads(_sys.argv[1])
        except (IndexError, ValueError):
            _cases = []
        _report = {"cases": [{"name": name, "outcome": "connected" if url is None else "ValueError",
                              "error": "" if url is None else "bad DATABASE_URL", "trace": "",
                              "value_error": url is not None, "output": ""} for name, url in _cases]}
        with open(_path, "w") as _out:
            _json.dump(_report, _out)
        _os._exit(0)


    def _nothing(*args, **kwargs):
        raise ValueError("nothing is implemented here")


    # there, so the checks get past "state_store.py has no connect" to the evidence they read
    connect = transaction = decode_payload = read_snapshot = submit_snapshot = claim = finish = _nothing
"""


def _write(path: Path, text: str) -> None:
    path.write_text(textwrap.dedent(text), encoding="utf-8")


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + textwrap.dedent(text), encoding="utf-8")


def assert_forge_fails(tmp_path: Path, check_id: str, forge, words: str) -> None:
    """The reference with `forge(folder)` applied, judged on `check_id` alone: not a pass, and the learner reads
    `words` (the fact the checker gathered itself that the forge could not make)."""
    lesson_id = check_id.split(".")[0]
    folder = learner_folder(tmp_path / "lab", lesson_id)
    forge(folder)
    result = _judge(tmp_path, lesson_id, folder, {check_id})[check_id]
    assert result.status != PASS, result.message
    assert words in result.message, result.message


def test_a_helper_that_reports_one_winner_does_not_pass_a_claim_that_locks_nothing(tmp_path):
    assert_forge_fails(tmp_path, "11.2", lambda f: _replace_function(f / "state_store.py", "claim", FORGED_CLAIM),
                       "do not match the one winner")  # the row, read by the judge


def test_a_claim_that_only_says_it_claimed_does_not_pass_11_5(tmp_path):
    assert_forge_fails(tmp_path, "11.5", lambda f: _replace_function(f / "state_store.py", "claim", FORGED_DUE_CLAIM),
                       "claim returned a token, but the row says queued")


def test_a_task_that_names_some_other_file_does_not_pass_09_1(tmp_path):
    def forge(folder):
        tasks = folder / "export_tasks.py"
        text = tasks.read_text(encoding="utf-8")
        _write(tasks, text[:text.index("@app.task")] + textwrap.dedent(FORGED_RESULT))
        _write(folder / "duplicate_export.py", 'print("same logical output")\n')
    assert_forge_fails(tmp_path, "09.1", forge, "is missing: name the output by job_id only")


def test_a_scanner_that_only_says_it_recovered_does_not_pass_15_4(tmp_path):
    assert_forge_fails(tmp_path, "15.4", lambda f: _append(f / "recovery.py", FORGED_SCANNER_B),
                       "the checker found no overdue job with a new event")


def test_publishers_that_report_events_they_never_claimed_do_not_pass_12_4(tmp_path):
    assert_forge_fails(tmp_path, "12.4",
                       lambda f: _replace_function(f / "publisher.py", "claim_event", FORGED_CLAIM_EVENT),
                       "the table does not show what the publishers reported")


def test_an_app_that_prints_the_inspect_reply_at_import_does_not_pass_08_2(tmp_path):
    def forge(folder):
        _write(folder / "export_tasks.py", '"""No task is defined here."""\n')
        app = folder / "celery_app.py"
        _write(app, textwrap.dedent(FORGED_PRINT) + app.read_text(encoding="utf-8"))
    assert_forge_fails(tmp_path, "08.2", forge, "empty task list")


def test_a_producer_that_prints_a_run_it_never_made_does_not_pass_08_3(tmp_path):
    assert_forge_fails(tmp_path, "08.3", lambda f: _write(f / "produce_export.py", FORGED_PRODUCER),
                       "the result backend holds nothing")


def test_a_ping_script_that_only_prints_pong_does_not_pass_08_1(tmp_path):
    assert_forge_fails(tmp_path, "08.1", lambda f: _write(f / "ping_broker.py", 'print("PONG")\n'),
                       "the broker counted 0 authentication(s) and 0 PING(s)")


def test_an_app_object_that_answers_for_the_worker_does_not_pass_09_3(tmp_path):
    def forge(folder):
        app = folder / "celery_app.py"
        _write(app, app.read_text(encoding="utf-8").replace("task_acks_late=True", "task_acks_late=False"))
        _append(app, FORGED_CONTROL)
    assert_forge_fails(tmp_path, "09.3", forge, "task_acks_late is not True")


def test_a_forged_probe_report_passes_no_observed_check(tmp_path, lesson_id="11"):
    lesson = manifest.lesson(lesson_id, DATA)
    folder = learner_folder(tmp_path / "lab", lesson_id)  # its schema and other files stay the reference's
    for name in lesson["files"]:
        if name.endswith(".py"):
            _write(folder / name, FORGED_REPORT)
    observed = _observed(lesson)
    result = _judge(tmp_path, lesson_id, folder, observed | {"11.9"})
    assert not [cid for cid in observed if result[cid].status == PASS], {c: result[c].status for c in observed}
    assert {cid for cid in observed if result[cid].status != "skipped"} == observed  # each one judged
    # The forge is real: 11.9, whose only evidence is this report (tasks.json: self_reported), passes on it.
    assert result["11.9"].status == PASS and manifest.check_texts()["11.9"]["evidence"]["kind"] == "self_reported"
