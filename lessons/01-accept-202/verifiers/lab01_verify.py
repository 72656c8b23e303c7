"""Verifier for lesson 01: the learner's api_states.py, a job accepted with 202 and kept in memory.

01.1  two POST /exports answer 202 with different ids; each Location, followed, answers 200 with the same id
      and its product_ids, and the first still does after the second submit
01.2  a new job reads queued, in the submit's answer and on GET; two unknown ids answer 404
01.3  transition() raises ValueError for queued → succeeded and succeeded → running and leaves the record as
      it was; then `python verify_states.py` passes and prints terminal transition rejected
01.4  an empty list, 101 ids, non-integers and a missing field answer 422 and add no record; 100 ids pass
01.5  exercise: GET's terminal field follows the stored status as it changes (no terminal field = not attempted)

The judge never imports the learner's code: 01.1 and 01.2 ask api_states:app on a real uvicorn through the
checker's own HTTP client; the other checks run it in a probe (shared/probe.py) behind a TestClient, where the
judge also reads its in-memory records.  verify_states.py runs as a subprocess; when it stops, 01.3
reads where (its traceback) and names the check that owns the cause (its status code and Location are 01.1's,
a new job's status 01.2's) -- fix that one first, transition is not to blame.
"""

from __future__ import annotations

import json
import linecache
import re
import uuid
from pathlib import Path
from urllib.parse import urlsplit

from shared.i18n import t
from shared.location import location_target
from shared.probe import Probe
from shared.logs import LOG_DIR
from shared.proc import run_python, start_uvicorn
from shared.tap import Check, exception_lines, run

HERE = Path.cwd()
learner = Probe()


def checks() -> list[Check]:
    """The checks, in order: id -> what proves it."""
    return [
        Check("01.1", submit_answers_202_with_location, "uvicorn api_states:app; the checker's HTTP client"),
        Check("01.2", new_job_is_queued_unknown_is_404, "uvicorn api_states:app; the checker's HTTP client"),
        Check("01.3", transitions_refuse_illegal_moves, "probe: api_states; python verify_states.py"),
        Check("01.4", bad_bodies_get_422, "probe: api_states"),
        Check("01.5", terminal_follows_status, "probe: api_states"),
    ]


def load(*functions: str):
    """The learner's module, imported in the probe (inside a check, so an import error fails only that check)."""
    return learner.module("api_states", *functions)


def serve():
    """api_states:app behind a TestClient in the probe: for the checks that read its in-memory records too."""
    load()
    return learner.app("api_states:app")


_server: dict = {}


def served():
    """api_states:app on a real uvicorn the checker started (once per run, again if it died), asked through the
    checker's own HTTP client: 01.1 and 01.2 judge the answers the server gives, nothing a process that
    imported the app says about them."""
    import httpx2
    load()  # an import error is said in the learner's terms first, by the probe
    if not _server or not _server["proc"].alive():
        log = LOG_DIR / "uvicorn-api_states.log"
        log.unlink(missing_ok=True)
        proc, port = start_uvicorn("api_states:app", cwd=HERE, log_path=log, timeout=30)
        _server.update(proc=proc, port=port)
    return httpx2.Client(base_url=f"http://127.0.0.1:{_server['port']}", timeout=10)


def submit(client, ids=(1, 2)):
    """Submit a valid export.  Only 01.1 insists on 202; the other checks need any 2xx."""
    response = client.post("/exports", json={"product_ids": list(ids)})
    assert 200 <= response.status_code < 300, t("POST /exports should accept the export, got {status_code}: {text}",
                                                status_code=response.status_code, text=response.text[:200])
    body = response.json()
    assert isinstance(body, dict) and isinstance(body.get("id"), str), t(
        "the submit response needs a string id, got {body!r}", body=body)
    return response, body["id"]


def as_json(value) -> str:
    return json.dumps(value, ensure_ascii=False)[:200]


def submit_answers_202_with_location(c) -> None:
    with served() as client:
        seen = []
        for ids in ([1, 2], [7]):
            response, job_id = submit(client, ids)
            location = response.headers.get("location")
            c.note(f"POST {as_json({'product_ids': ids})} -> {response.status_code}, Location: {location}")
            assert response.status_code == 202, t("the submit should answer 202 (accepted, not done), got {code}: put "
                                                  "status_code=202 on @app.post", code=response.status_code)
            target = location_target(response)
            assert target is not None and urlsplit(target).path == f"/exports/{job_id}", t(
                "Location should lead to /exports/{job_id} (a path, or a full URL of this server), got {location!r}",
                job_id=job_id, location=location)
            follow = client.get(target)
            c.note(f"GET {location} -> {follow.status_code} {as_json(follow.json())}")
            assert follow.status_code == 200, t("following Location should answer 200, got {status_code}",
                                                status_code=follow.status_code)
            body = follow.json()
            assert body.get("id") == job_id, t("Location leads to id {id!r}, not the submitted {job_id}",
                                               id=body.get('id'), job_id=job_id)
            assert body.get("product_ids") == ids, t("the stored product_ids should be the submitted {ids}, got "
                                                     "{product_ids!r}", ids=ids, product_ids=body.get('product_ids'))
            seen.append(job_id)
        assert seen[0] != seen[1], t("two submissions got the same job_id")
        # The first Location must still lead to the first job after another submission.
        again = client.get(f"/exports/{seen[0]}").json()
        assert again.get("product_ids") == [1, 2], t("after a second submission the first Location shows product_ids "
                                                     "{product_ids!r}", product_ids=again.get('product_ids'))


def new_job_is_queued_unknown_is_404(c) -> None:
    with served() as client:
        response, job_id = submit(client)
        answered = response.json().get("status")
        assert answered == "queued", t("the submit response should say queued, got {answered!r}", answered=answered)
        status = client.get(f"/exports/{job_id}").json().get("status")
        c.note(t("new job {job_id}: status {status}", job_id=job_id, status=status))
        assert status == "queued", t("a new job should read queued (nothing runs it in this lesson), got {status!r}",
                                     status=status)
        for unknown in ("no-such-job", str(uuid.uuid4())):
            missing = client.get(f"/exports/{unknown}")
            c.note(f"GET /exports/{unknown} -> {missing.status_code}")
            assert missing.status_code == 404, t("an unknown id should answer 404, got {status_code}: {text}",
                                                 status_code=missing.status_code, text=missing.text[:120])


def transitions_refuse_illegal_moves(c) -> None:
    api = load("transition")
    with serve() as client:
        response, job_id = submit(client)
        # What verify_states.py will meet, for naming the cause if it stops (see script_verdict).
        target = location_target(response)
        facts = {"status": response.status_code, "location": response.headers.get("location"),
                 "leads_there": target is not None and urlsplit(target).path == f"/exports/{job_id}",
                 "job_id": job_id, "new_status": client.get(f"/exports/{job_id}").json().get("status")}
        # Start from a known state, so this check is about transition() alone
        # (01.2 is the one that checks what a new job starts as).
        learner.call("lab01_learner:set_status", job_id, "queued")

        # A refused move must leave the record exactly as it was.
        before = api.jobs[job_id]
        exc = refusal(api, job_id, "succeeded", t("queued → succeeded should raise ValueError (running comes first)"))
        c.note(t("queued -> succeeded refused: {exc}", exc=exc))
        after = api.jobs[job_id]
        assert after == before, t("a refused transition changed the record: {as_json}", as_json=as_json(after))

        api.transition(job_id, "running")
        api.transition(job_id, "succeeded")
        exc = refusal(api, job_id, "running", t("succeeded → running should raise ValueError"))
        c.note(t("succeeded -> running refused: {exc}", exc=exc))
        kept = api.jobs[job_id]["status"]
        queried = client.get(f"/exports/{job_id}").json().get("status")
        c.note(t("after the refusal: stored {kept}, GET says {queried}", kept=kept, queried=queried))
        assert kept == "succeeded" and queried == "succeeded", t(
            "after the refusal the record should still be succeeded, stored {kept!r}, GET {queried!r} (assigned "
            "before checking?)", kept=kept, queried=queried)

    script = HERE / "verify_states.py"
    assert script.exists(), t("verify_states.py is missing (step 4)")
    done = run_python([script.name], cwd=HERE, timeout=60)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    c.note(t("python verify_states.py -> exit {returncode}; last lines: {lines}", returncode=done.returncode,
             lines=lines[-3:]))
    assert done.returncode == 0, script_verdict(done, script, facts)
    assert "terminal transition rejected" in lines, t("verify_states.py did not print terminal transition rejected")


def refusal(api, job_id: str, target: str, allowed: str) -> ValueError:
    """The ValueError transition(job_id, target) raised; `allowed` is the failure when it made the move."""
    try:
        api.transition(job_id, target)
    except ValueError as exc:
        return exc
    raise AssertionError(allowed)


FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)')


def script_verdict(done, script: Path, facts: dict) -> str:
    """Why verify_states.py stopped (the last traceback frame in `script`), naming the check that owns the cause
    (and saying to fix it first)."""
    number = None
    for line in done.stdout.splitlines():
        frame = FRAME.match(line)
        if frame and Path(frame["file"]).name == script.name:
            number = int(frame["line"])
    error = (exception_lines(done.stdout) or [""])[-1]
    tail = done.stdout.strip()[-600:]
    if number is None:
        return t("verify_states.py exited {returncode}:\n{tail}", returncode=done.returncode, tail=tail)
    source = linecache.getline(str(script), number).strip()
    at = t("verify_states.py stopped at line {number}: `{source}`", number=number, source=source) \
        + (f" ({error})" if error else "")
    lowered = source.lower()
    if "status_code" in lowered and facts["status"] != 202:
        return at + t(" -- your POST /exports answers {status}, not 202. That is 01.1's cause (the status code), not "
                      "transition: fix 01.1 first (status_code=202 on @app.post), then check again.",
                      status=facts['status'])
    if "location" in lowered and facts["location"] != f"/exports/{facts['job_id']}":
        if facts["leads_there"]:
            return at + t(" -- your Location {location!r} is a full URL of the same job (valid, and 01.1 accepts "
                          "it), but your verify_states.py compares it with the path f\"/exports/{{job_id}}\": make the "
                          "script and the route agree (compare what the route sends, or send the path).",
                          location=facts['location'])
        return at + t(" -- your Location is {location!r} and the script compares it with f\"/exports/{{job_id}}\". "
                      "That is 01.1's cause (the Location), not transition: fix 01.1 first (a full URL is fine too, "
                      "but the script and the route must agree).", location=facts['location'])
    if facts["new_status"] != "queued":
        return at + t(" -- a new job reads {new_status!r}, not queued, so the script's queued → running cannot work. "
                      "That is 01.2's cause: fix 01.2 first.", new_status=facts['new_status'])
    return t("{stopped_at}:\n{tail}", stopped_at=at, tail=tail)


def bad_bodies_get_422(c) -> None:
    bad_bodies = [
        (t("empty list"), {"product_ids": []}),
        (t("101 ids"), {"product_ids": list(range(1, 102))}),
        (t("non-integer 'abc'"), {"product_ids": [1, "abc"]}),
        (t("non-integer 1.5"), {"product_ids": [1, 1.5]}),
        (t("missing product_ids"), {}),
    ]
    api = load()
    with serve() as client:
        for label, body in bad_bodies:
            before = set(api.jobs)
            response = client.post("/exports", json=body)
            c.note(f"{label}: {response.status_code}")
            assert response.status_code == 422, t("{label} should get 422, got {status_code}: {text}", label=label,
                                                  status_code=response.status_code, text=response.text[:160])
            assert set(api.jobs) == before, t("{label} was refused but jobs gained a record", label=label)
        # The limits are inclusive: exactly 100 ids is still a valid export.
        edge = client.post("/exports", json={"product_ids": list(range(1, 101))})
        c.note(t("100 ids: {status_code}", status_code=edge.status_code))
        assert 200 <= edge.status_code < 300, t("exactly 100 ids should be accepted, got {status_code}",
                                                status_code=edge.status_code)


def terminal_follows_status(c) -> None:
    with serve() as client:
        _, job_id = submit(client)
        body = client.get(f"/exports/{job_id}").json()
        if "terminal" not in body:
            c.skip(t("the GET body has no terminal field: exercise not attempted"))

        # Set the stored status directly: a derived flag must follow it on the next read,
        # a flag stored at submit time would not.
        observed = []
        for status in ("queued", "running", "succeeded", "failed", "cancelled"):
            learner.call("lab01_learner:set_status", job_id, status)
            value = client.get(f"/exports/{job_id}").json().get("terminal")
            assert isinstance(value, bool), t("terminal should be a boolean, got {value!r}", value=value)
            observed.append((status, value))
        c.note(t("terminal by status: ") + ", ".join(f"{s}={v}" for s, v in observed))
        for status, value in observed:
            expected = status in ("succeeded", "failed", "cancelled")
            assert value is expected, t("with status {status} terminal should be {expected}, got {value} (compute it "
                                        "from status on GET, do not store a copy)", status=status, expected=expected,
                                        value=value)


if __name__ == "__main__":
    run(checks())
