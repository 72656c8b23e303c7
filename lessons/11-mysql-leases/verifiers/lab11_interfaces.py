"""Lesson 11's checks of the lesson's edges (not a lesson file): the HTTP read path (11.7), submit's input
checks (11.8), connect()'s DATABASE_URL checks (11.9, run in lab11_learner_connect.py) and the renewal
exercise (11.10).  lab11_verify.py runs them; the lab they use is lab11_fixture.py.
"""

from __future__ import annotations

import contextlib
import json
import os
from urllib.parse import quote, unquote, urlsplit, urlunsplit
from uuid import uuid4

from lab11_fixture import export_task, job_count, learner, store

from shared import probe_report
from shared.logs import LOG_DIR
from shared.events import short
from shared.scripts import run_script
from shared.settings import WORK, redact, setting
from shared.i18n import t
from shared.lesson_db import expire_lease, job_row, lease_token_of, seconds_until, server_now, sql
from shared.proc import free_port, start_uvicorn


# ---------------------------------------------------------------- 11.7

@contextlib.contextmanager
def api(log_name: str, env: dict | None = None):
    """uvicorn api_db:app on a free port for the block: GET /exports/{job_id} as a function."""
    import httpx2
    proc, port = start_uvicorn("api_db:app", WORK, LOG_DIR / log_name, timeout=20, env=env)
    try:
        yield lambda job_id: httpx2.get(f"http://127.0.0.1:{port}/exports/{job_id}", timeout=10)
    finally:
        proc.stop()


def check_http(c) -> None:
    if not (WORK / "api_db.py").is_file():
        c.skip(t("no api_db.py (the course text only says to add an HTTP adapter; add it from this lesson's guide to "
                 "have it checked)"))
    state_store = store()
    export_products = export_task()
    queued = state_store.submit_snapshot([55])
    direct = str(uuid4())
    sql("INSERT INTO export_jobs (id, status, payload, attempts, deadline_at, result_ref) VALUES "
        "(%s, 'succeeded', '[]', 1, DATE_ADD(NOW(6), INTERVAL 10 MINUTE), 'artifacts/written-by-sql.json')", (direct,))
    missing = str(uuid4())
    celery_state = export_products.state(queued)
    answers = {}
    with api("api_db.log") as get:
        for name, job_id in (("queued", queued), ("sql", direct), ("missing", missing)):
            answers[name] = response = get(job_id)
            c.note(f"GET /exports/{short(job_id)} → {response.status_code} {redact(response.text)[:120]}")
        sql("UPDATE export_jobs SET status='failed', error_code='drill' WHERE id=%s", (queued,))
        changed = get(queued)
        c.note(t("after SQL sets it to failed → {status_code} {text}", status_code=changed.status_code,
                 text=redact(changed.text)[:80]))

    def status_of(response) -> str | None:
        with contextlib.suppress(ValueError, AttributeError):
            return response.json().get("status")
        return None

    assert answers["queued"].status_code == 200 and status_of(answers["queued"]) == "queued", t(
        "a queued job nobody ran (Celery says {celery_state}) must be 200 with status=queued: PENDING is not missing",
        celery_state=celery_state)
    assert answers["sql"].status_code == 200 and status_of(answers["sql"]) == "succeeded", t(
        "a row written by SQL alone must be 200 succeeded: the read path must use export_jobs")
    assert changed.status_code == 200 and status_of(changed) == "failed", t(
        "SQL changed the status and the API did not show it: read the database on every request")
    assert answers["missing"].status_code == 404, t("an unknown id must be 404, got {status_code}",
                                                    status_code=answers['missing'].status_code)

    url = urlsplit(setting("DATABASE_URL"))
    closed = free_port()
    dead_url = urlunsplit(url._replace(netloc=url.netloc.rsplit(":", 1)[0] + f":{closed}"))
    with api("api_db-no-database.log", env=dict(os.environ, DATABASE_URL=dead_url)) as get:
        unreachable = get(queued)
    c.note(t("with the database unreachable (nothing on port {closed}) the same id → {status_code}", closed=closed,
             status_code=unreachable.status_code))
    assert unreachable.status_code != 404 and unreachable.status_code >= 500, t(
        "with the database unreachable the answer must be 5xx, not {status_code}: 404 means only that no row exists",
        status_code=unreachable.status_code)


# ---------------------------------------------------------------- 11.8

def check_bad_input(c) -> None:
    state_store = store()
    # 101 products that all exist, so "over 100" is refused for its size and not for a missing id.
    sql("INSERT INTO products (id, name, description, is_active, price_cents) VALUES " +
        ",".join(f"({n}, 'bulk-{n}', 'lesson 11 size drill', 1, {n})" for n in range(1001, 1102)))
    cases = [
        (t("empty list"), []),
        (t("101 existing ids"), list(range(1001, 1102))),
        ("0", [0]),
        ("-3", [5, -3]),
        ('"7"', ["7"]),
        ("7.0", [7.0]),
        ("True", [True]),
        (t("missing 999999"), [5, 999999]),
    ]
    problems = []
    for label, ids in cases:
        before = job_count()
        try:
            job_id = state_store.submit_snapshot(ids)
            outcome, message = "accepted", job_id
        except (ValueError, TypeError) as exc:
            outcome, message = type(exc).__name__, str(exc)
        except Exception as exc:  # noqa: BLE001 - the wrong kind of error is a finding, not a crash
            outcome, message = f"{type(exc).__name__} (unexpected)", str(exc)
        left = job_count() - before
        c.note(f"{label:<20} → {outcome}: {redact(message)[:70]}" + (t(", {left} row(s) left", left=left)
                                                                     if left else ""))
        if outcome not in ("ValueError", "TypeError") or not message.strip() or left:
            problems.append((label, outcome, left))
    before = job_count()
    hundred = state_store.submit_snapshot(list(range(1001, 1101)))
    c.note(t("exactly 100 existing ids → accepted ({hundred})", hundred=short(hundred)))
    assert job_count() == before + 1
    assert not problems, t("these inputs got no clear error or left a job row: {problems} (validate with "
                           "read_snapshot before the INSERT, in the same transaction)", problems=problems)


# ---------------------------------------------------------------- 11.9

def check_url(c) -> None:
    store()
    marker = "Lab11" + uuid4().hex[:10]  # a fake password: it must never come back in any output
    good = urlsplit(setting("DATABASE_URL"))
    host, database = f"{good.hostname}:{good.port}", unquote(good.path.lstrip("/"))
    cases = [
        ("real", None),
        ("scheme mysql://", f"mysql://app_user:{marker}@{host}/{database}"),
        ("scheme postgresql://", f"postgresql://app_user:{marker}@{host}/{database}"),
        ("no host", f"mysql+pymysql://app_user:{marker}@:3307/{database}"),
        ("no user", f"mysql+pymysql://:{marker}@{host}/{database}"),
        ("no password", f"mysql+pymysql://app_user@{host}/{database}"),
        ("port not a number", f"mysql+pymysql://app_user:{marker}@{good.hostname}:3x07/{database}"),
        ("#fragment", f"mysql+pymysql://app_user:{marker}@{host}/{database}#x"),
        ("?ssl=false", f"mysql+pymysql://app_user:{marker}@{host}/{database}?ssl=false"),
        ("database 'shop lab'", f"mysql+pymysql://app_user:{marker}@{host}/shop%20lab"),
        ("no database", f"mysql+pymysql://app_user:{marker}@{host}/"),
        ("password %zz", f"mysql+pymysql://app_user:{marker}%zz@{host}/{database}"),
        ("password ends in %", f"mysql+pymysql://app_user:{marker}%@{host}/{database}"),
        ("password %E9 (not UTF-8)", f"mysql+pymysql://app_user:{marker}%E9@{host}/{database}"),
    ]
    report = probe_report.fresh_path(LOG_DIR, "connect-probe")
    done = run_script(["lab11_learner_connect.py", json.dumps(cases)], 60, env={probe_report.REPORT_ENV: str(report)})
    found = (probe_report.read(report) or {}).get("cases")
    results = {}
    for item in found if isinstance(found, list) else []:
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            results[item["name"]] = item
    assert results, t("the probe printed nothing:\n") + done.output[-400:]
    leaks, wrong = [], []
    secret_forms = {marker, quote(marker, safe="")}
    for name, _ in cases:
        item = results.get(name)
        if item is None:
            wrong.append((name, "no result"))
            continue
        everything = item["error"] + item["trace"] + item["output"]
        leaked = any(form in everything for form in secret_forms)
        c.note(f"{name:<26} → {item['outcome']}: {redact(item['error']).replace(marker, '<PASSWORD>')[:80]}"
               + (t("  ← reveals the password") if leaked else ""))
        if leaked:
            leaks.append(name)
        as_expected = item["outcome"] == "connected" if name == "real" else item["value_error"]
        if not as_expected:
            wrong.append((name, item["outcome"]))
    assert not leaks, t("the password appears in the error or output: {leaks} (name the wrong part, never echo the "
                        "URL)", leaks=leaks)
    assert not wrong, t("these URLs were not refused with a ValueError before connecting (or the real URL did not "
                        "connect): {wrong}", wrong=wrong)


# ---------------------------------------------------------------- 11.10

# The functions the course itself names in state_store.py (any lesson): the renewal is none of them.
COURSE_FUNCTIONS = {"connect", "transaction", "claim", "finish", "submit_snapshot", "read_snapshot", "decode_payload",
                    "decode_url_part", "can_continue", "admit_export", "lock_admission", "claim_event", "recover_batch",
                    "replay", "accept_export", "get_export", "fetch_snapshot", "request_cancel"}


def check_renew(c) -> None:
    state_store = store()
    # The learner's own functions in state_store taking (job_id, token), preferring a name that says renewal.
    shaped = learner.call("lab11_learner:renewal_candidates", sorted(COURSE_FUNCTIONS))
    if len(shaped) > 1:
        c.skip(t("state_store has several functions taking (job_id, token) ({several}) and none is named as the "
                 "renewal: give it a name with renew, e.g. renew_lease", several=', '.join(shaped)))
    if not shaped:
        c.skip(t("state_store has no renewal function (one taking (job_id, token), e.g. renew_lease(job_id, token))"))
    name = shaped[0]
    c.note(t("the renewal function: {name}(job_id, token)", name=name))

    def renew(*args):
        return learner.call(f"state_store:{name}", *args)

    job_id = state_store.submit_snapshot([58])
    token = lease_token_of(state_store.claim(job_id))
    assert token, t("the first claim of a fresh job got no token")

    sql("UPDATE export_jobs SET lease_until=DATE_ADD(NOW(6), INTERVAL 5 SECOND) WHERE id=%s", (job_id,))
    # The renewal's NOW(6) lies between the server's clock read just before and just after the call, so
    # lease_until - 30 s must too, however slowly the call ran (1 s of slack for a clock read in Python).
    before = server_now()
    ok = renew(job_id, token)
    after = server_now()
    until = job_row(job_id)["lease_until"]
    since_start, since_end = (until - before).total_seconds(), (until - after).total_seconds()
    c.note(t("{name}: a lease with 5 s left → {ok}, lease_until = {since_start:.2f} s after the call began / "
             "{since_end:.2f} s after it returned", name=name, ok=ok, since_start=since_start, since_end=since_end))
    assert ok is True and since_start >= 29 and since_end <= 31, t(
        "a live lease must give True and end 30 s after the renewal")

    before = seconds_until(job_id, "lease_until")
    foreign = renew(job_id, str(uuid4()))
    c.note(t("a foreign token → {foreign}", foreign=foreign))
    assert foreign is False and seconds_until(job_id, "lease_until") <= before, t("a foreign token renewed")

    sql("UPDATE export_jobs SET deadline_at=DATE_ADD(NOW(6), INTERVAL 10 SECOND) WHERE id=%s", (job_id,))
    first, second = renew(job_id, token), renew(job_id, token)
    capped = sql("SELECT lease_until = deadline_at AS capped FROM export_jobs WHERE id=%s", (job_id,))[0]["capped"]
    c.note(t("deadline_at 10 s ahead: renew → {first}, again (same end time) → {second}, lease_until = deadline_at: "
             "{bool}", first=first, second=second, bool=bool(capped)))
    assert capped, t("the renewal went past deadline_at: use LEAST(…, deadline_at)")
    assert first is True and second is True, t("False although the lease is live: the same end time gives rowcount "
                                               "0, so confirm with a SELECT in the same transaction")

    sql("UPDATE export_jobs SET deadline_at=DATE_ADD(NOW(6), INTERVAL 10 MINUTE), cancel_requested=TRUE WHERE id=%s",
        (job_id,))
    cancelled = renew(job_id, token)
    sql("UPDATE export_jobs SET cancel_requested=FALSE WHERE id=%s", (job_id,))
    c.note(t("cancel requested → {cancelled}", cancelled=cancelled))
    assert cancelled is False, t("a cancelled job was renewed")

    expire_lease(job_id)
    revived = renew(job_id, token)
    still = seconds_until(job_id, "lease_until")
    c.note(t("lease expired → {revived}, lease_until stays in the past ({still:.1f} s)", revived=revived, still=still))
    assert revived is False and still < 0, t("an expired lease came back to life: after expiry only a new claim helps")

    queued = state_store.submit_snapshot([59])
    idle = renew(queued, token)
    c.note(t("a queued job (no lease) → {idle}", idle=idle))
    assert idle is False, t("a queued job without a lease was renewed")
