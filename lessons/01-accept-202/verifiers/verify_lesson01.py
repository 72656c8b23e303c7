"""Verifier for lesson 01: prove checks 01.1–01.5 against the learner's api_states.py.

Everything runs in this process through starlette's TestClient (no server, no port),
except verify_states.py, which is the learner's own script and runs as a subprocess.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from shared.celerylab import import_learner
from shared.i18n import t
from shared.proc import run_python
from shared.tap import Tap

HERE = Path.cwd()


def load(*functions: str):
    """Import the learner's module (inside a check, so an import error fails only that check)."""
    return import_learner("api_states", functions)


def client_for(module):
    from fastapi.testclient import TestClient
    # raise_server_exceptions=False: a crash in a route shows up as a 500 we can report.
    return TestClient(module.app, raise_server_exceptions=False)


def submit(client, ids=(1, 2)):
    """Submit a valid export.  Only 01.1 insists on 202; the other checks need any 2xx."""
    response = client.post("/exports", json={"product_ids": list(ids)})
    assert 200 <= response.status_code < 300, t(
        f"POST /exports 应受理，实际 {response.status_code}：{response.text[:200]}",
        f"POST /exports should accept the export, got {response.status_code}: {response.text[:200]}")
    body = response.json()
    assert isinstance(body, dict) and isinstance(body.get("id"), str), t(
        f"提交响应里应有字符串 id，实际 {body!r}", f"the submit response needs a string id, got {body!r}")
    return response, body["id"]


def as_json(value) -> str:
    """A value as JSON text for a note, cut at 200 characters."""
    return json.dumps(value, ensure_ascii=False)[:200]


def check_submit(tap: Tap) -> None:
    with tap.check("01.1") as c:
        c.skip_unless_selected()
        api = load()
        with client_for(api) as client:
            seen = []
            for ids in ([1, 2], [7]):
                response, job_id = submit(client, ids)
                location = response.headers.get("location")
                c.note(f"POST {as_json({'product_ids': ids})} -> {response.status_code}, Location: {location}")
                assert response.status_code == 202, t(
                    f"提交应返回 202（已受理、未完成），实际 {response.status_code}",
                    f"the submit should answer 202 (accepted, not done), got {response.status_code}")
                assert location == f"/exports/{job_id}", t(
                    f"Location 应为 /exports/{job_id}，实际 {location!r}",
                    f"Location should be /exports/{job_id}, got {location!r}")
                follow = client.get(location)
                c.note(f"GET {location} -> {follow.status_code} {as_json(follow.json())}")
                assert follow.status_code == 200, t(
                    f"按 Location 查询应返回 200，实际 {follow.status_code}",
                    f"following Location should answer 200, got {follow.status_code}")
                body = follow.json()
                assert body.get("id") == job_id, t(
                    f"Location 查到的 id 是 {body.get('id')!r}，不是提交得到的 {job_id}",
                    f"Location leads to id {body.get('id')!r}, not the submitted {job_id}")
                assert body.get("product_ids") == ids, t(
                    f"查到的 product_ids 应是提交的 {ids}，实际 {body.get('product_ids')!r}",
                    f"the stored product_ids should be the submitted {ids}, got {body.get('product_ids')!r}")
                seen.append(job_id)
            assert seen[0] != seen[1], t("两次提交得到了同一个 job_id", "two submissions got the same job_id")
            # The first Location must still lead to the first job after another submission.
            again = client.get(f"/exports/{seen[0]}").json()
            assert again.get("product_ids") == [1, 2], t(
                f"第二次提交后，第一个 Location 查到的 product_ids 变成了 {again.get('product_ids')!r}",
                f"after a second submission the first Location shows product_ids {again.get('product_ids')!r}")


def check_queued_and_404(tap: Tap) -> None:
    with tap.check("01.2") as c:
        c.skip_unless_selected()
        api = load()
        with client_for(api) as client:
            response, job_id = submit(client)
            answered = response.json().get("status")
            assert answered == "queued", t(
                f"提交响应的状态应为 queued，实际 {answered!r}", f"the submit response should say queued, got {answered!r}")
            status = client.get(f"/exports/{job_id}").json().get("status")
            c.note(f"new job {job_id}: status {status}")
            assert status == "queued", t(
                f"新任务查询状态应为 queued（本课没有执行者），实际 {status!r}",
                f"a new job should read queued (nothing runs it in this lesson), got {status!r}")
            for unknown in ("no-such-job", str(uuid.uuid4())):
                missing = client.get(f"/exports/{unknown}")
                c.note(f"GET /exports/{unknown} -> {missing.status_code}")
                assert missing.status_code == 404, t(
                    f"未知编号应返回 404，实际 {missing.status_code}：{missing.text[:120]}",
                    f"an unknown id should answer 404, got {missing.status_code}: {missing.text[:120]}")


def check_transitions(tap: Tap) -> None:
    with tap.check("01.3") as c:
        c.skip_unless_selected()
        api = load("transition")
        with client_for(api) as client:
            _, job_id = submit(client)
            # Start from a known state, so this check is about transition() alone
            # (01.2 is the one that checks what a new job starts as).
            api.jobs[job_id]["status"] = "queued"

            # A refused move must leave the record exactly as it was.
            before = dict(api.jobs[job_id])
            try:
                api.transition(job_id, "succeeded")
            except ValueError as exc:
                c.note(f"queued -> succeeded refused: {exc}")
            else:
                raise AssertionError(t("queued→succeeded 应抛 ValueError（必须先 running）",
                                       "queued → succeeded should raise ValueError (running comes first)"))
            assert api.jobs[job_id] == before, t(
                f"被拒绝的转换改动了记录：{as_json(api.jobs[job_id])}",
                f"a refused transition changed the record: {as_json(api.jobs[job_id])}")

            api.transition(job_id, "running")
            api.transition(job_id, "succeeded")
            try:
                api.transition(job_id, "running")
            except ValueError as exc:
                c.note(f"succeeded -> running refused: {exc}")
            else:
                raise AssertionError(t("succeeded→running 应抛 ValueError",
                                       "succeeded → running should raise ValueError"))
            stored = api.jobs[job_id]["status"]
            queried = client.get(f"/exports/{job_id}").json().get("status")
            c.note(f"after the refusal: stored {stored}, GET says {queried}")
            assert stored == "succeeded" and queried == "succeeded", t(
                f"拒绝后记录应仍为 succeeded，实际存储 {stored!r}、查询 {queried!r}（是否先赋值后检查？）",
                f"after the refusal the record should still be succeeded, stored {stored!r}, GET {queried!r} "
                "(assigned before checking?)")

        script = HERE / "verify_states.py"
        assert script.exists(), t("缺少 verify_states.py（第 4 步）", "verify_states.py is missing (step 4)")
        done = run_python([script.name], cwd=HERE, timeout=60)
        lines = [line for line in done.stdout.splitlines() if line.strip()]
        c.note(f"python verify_states.py -> exit {done.returncode}; last lines: {lines[-3:]}")
        assert done.returncode == 0, t(
            f"verify_states.py 退出码 {done.returncode}：\n{done.stdout[-800:]}",
            f"verify_states.py exited {done.returncode}:\n{done.stdout[-800:]}")
        assert "terminal transition rejected" in lines, t(
            "verify_states.py 没有打印 terminal transition rejected",
            "verify_states.py did not print terminal transition rejected")


BAD_BODIES = [
    ("empty list", {"product_ids": []}),
    ("101 ids", {"product_ids": list(range(1, 102))}),
    ("non-integer 'abc'", {"product_ids": [1, "abc"]}),
    ("non-integer 1.5", {"product_ids": [1, 1.5]}),
    ("missing product_ids", {}),
]


def check_validation(tap: Tap) -> None:
    with tap.check("01.4") as c:
        c.skip_unless_selected()
        api = load()
        with client_for(api) as client:
            for label, body in BAD_BODIES:
                before = set(api.jobs)
                response = client.post("/exports", json=body)
                c.note(f"{label}: {response.status_code}")
                assert response.status_code == 422, t(
                    f"{label} 应返回 422，实际 {response.status_code}：{response.text[:160]}",
                    f"{label} should get 422, got {response.status_code}: {response.text[:160]}")
                assert set(api.jobs) == before, t(
                    f"{label} 被拒绝后 jobs 里多了记录", f"{label} was refused but jobs gained a record")
            # The limits are inclusive: exactly 100 ids is still a valid export.
            edge = client.post("/exports", json={"product_ids": list(range(1, 101))})
            c.note(f"100 ids: {edge.status_code}")
            assert 200 <= edge.status_code < 300, t(
                f"恰好 100 个 id 应被受理，实际 {edge.status_code}",
                f"exactly 100 ids should be accepted, got {edge.status_code}")


def check_terminal_flag(tap: Tap) -> None:
    with tap.check("01.5") as c:
        c.skip_unless_selected()
        api = load()
        with client_for(api) as client:
            _, job_id = submit(client)
            body = client.get(f"/exports/{job_id}").json()
            if "terminal" not in body:
                c.skip(t("GET 响应没有 terminal 字段：练习未做", "the GET body has no terminal field: exercise not attempted"))

            # Set the stored status directly: a derived flag must follow it on the next read,
            # a flag stored at submit time would not.
            observed = []
            for status in ("queued", "running", "succeeded", "failed", "cancelled"):
                api.jobs[job_id]["status"] = status
                value = client.get(f"/exports/{job_id}").json().get("terminal")
                assert isinstance(value, bool), t(f"terminal 应为布尔值，实际 {value!r}",
                                                  f"terminal should be a boolean, got {value!r}")
                observed.append((status, value))
            c.note("terminal by status: " + ", ".join(f"{s}={v}" for s, v in observed))
            for status, value in observed:
                expected = status in ("succeeded", "failed", "cancelled")
                assert value is expected, t(
                    f"状态 {status} 时 terminal 应为 {expected}，实际 {value}（terminal 要在 GET 时由 status 算出，不能另存一份）",
                    f"with status {status} terminal should be {expected}, got {value} "
                    "(compute it from status on GET, do not store a copy)")


def main(tap: Tap) -> None:
    check_submit(tap)
    check_queued_and_404(tap)
    check_transitions(tap)
    check_validation(tap)
    check_terminal_flag(tap)


if __name__ == "__main__":
    from shared.tap import main_guard
    main_guard(main)
