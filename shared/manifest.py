"""Load and validate tasks.json, the single source of lessons and checks."""

from __future__ import annotations

import json
import re
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parent.parent
MANIFEST = KIT_ROOT / "tasks.json"


class ManifestError(Exception):
    """tasks.json is missing or malformed; the message says where."""


EVIDENCE_KINDS = ("observed", "self_reported")


def load(path: Path | None = None) -> dict:
    path = path or MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ManifestError(f"{path}: not found") from None
    except json.JSONDecodeError as exc:
        raise ManifestError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    validate(data)
    return data


def _need(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise ManifestError(f"tasks.json {where}: {what}")


def _bilingual(value, where: str) -> None:
    _need(isinstance(value, dict) and all(isinstance(value.get(k), str) and value.get(k) for k in ("zh", "en")),
          where, "needs non-empty 'zh' and 'en' texts")


def validate(data: dict) -> None:
    _need(isinstance(data, dict) and isinstance(data.get("lessons"), list), "top level", "needs a 'lessons' list")
    seen_lessons, seen_checks = set(), set()
    for index, lesson in enumerate(data["lessons"]):
        where = f"lessons[{index}]"
        _need(isinstance(lesson, dict), where, "must be an object")
        lid = lesson.get("id")
        _need(isinstance(lid, str) and re.fullmatch(r"\d\d", lid or ""), where, "id must be two digits like '01'")
        _need(lid not in seen_lessons, where, f"duplicate lesson id {lid}")
        seen_lessons.add(lid)
        where = f"lesson {lid}"
        for key in ("slug", "folder", "status"):
            _need(isinstance(lesson.get(key), str) and lesson[key], where, f"missing '{key}'")
        _need(lesson["status"] in ("ready", "planned"), where, "status must be 'ready' or 'planned'")
        _need(lesson["folder"] == f"lessons/{lid}-{lesson['slug']}", where, "folder must be lessons/<id>-<slug>")
        _bilingual(lesson.get("title"), where + " title")
        _bilingual(lesson.get("group"), where + " group")
        _need(isinstance(lesson.get("services", []), list), where, "services must be a list")
        # judge: "separate" — the lesson's verifiers never import learner code; they run as a judge forked
        # out of reach of it (checks/judge.py).  Lessons without it still import learner modules.
        _need(lesson.get("judge", "separate") == "separate", where, "judge may only be 'separate'")
        for proc in lesson.get("processes", []):
            _need(isinstance(proc.get("name"), str) and isinstance(proc.get("argv"), list), where,
                  "each process needs 'name' and 'argv'")
        for demo in lesson.get("demo", []):
            _need(isinstance(demo.get("argv"), list), where, "each demo needs an 'argv' list")
        checks = lesson.get("checks")
        _need(isinstance(checks, list) and checks, where, "needs a non-empty 'checks' list")
        for check in checks:
            cid = check.get("id")
            _need(isinstance(cid, str) and re.fullmatch(rf"{lid}\.\d+", cid or ""), where,
                  f"check id {cid!r} must look like {lid}.k")
            _need(cid not in seen_checks, where, f"duplicate check id {cid}")
            seen_checks.add(cid)
            _bilingual(check.get("text"), f"check {cid} text")
            _bilingual(check.get("hint"), f"check {cid} hint")
            _need(isinstance(check.get("verifier"), str) and check["verifier"].endswith(".py"),
                  f"check {cid}", "verifier must name a .py file")
            _need(isinstance(check.get("points"), int) and check["points"] > 0, f"check {cid}", "points must be > 0")
            _need(isinstance(check.get("timeout"), (int, float)) and check["timeout"] > 0, f"check {cid}",
                  "timeout must be > 0 seconds")
            # evidence: where the facts that can pass this check come from.  observed: gathered by the judge
            # through channels learner code does not write (its own database connection and clients, files
            # and process states it reads, kernel events); self_reported: what a process that imported
            # learner code says about itself (a probe's answer, a helper's result file, its stdout).
            evidence = check.get("evidence")
            _need(isinstance(evidence, dict) and evidence.get("kind") in EVIDENCE_KINDS, f"check {cid}",
                  "evidence needs a kind: 'observed' or 'self_reported'")
            _bilingual(evidence.get("what"), f"check {cid} evidence what")
            # core: the lesson's steps; exercise: its practice task; extension: the kit's material beyond
            # the curriculum. Exercises and extensions a learner visibly did not take up are SKIPPED.
            _need(check.get("kind", "core") in ("core", "exercise", "extension"), f"check {cid}",
                  "kind is 'core', 'exercise' or 'extension'")
            # needs_processes: false — the check never uses the lesson's declared processes (its worker), so a
            # box running only such checks (a later lesson's regressions, say) starts none
            _need(check.get("needs_processes", True) in (True, False), f"check {cid}",
                  "needs_processes is true or false")
            # exclusive: this check stops or restarts a shared server, so runs that include it run alone
            _need(not check.get("exclusive") or lesson.get("exclusive_services") is True, f"check {cid}",
                  "'exclusive' checks need the lesson's 'exclusive_services': true")
            # superseded_by: the later lesson that replaced this check's subject (a folder that has reached
            # it is not judged on this check any more; grading shows it as superseded, uncounted)
            later = check.get("superseded_by")
            _need(later is None or (isinstance(later, str) and re.fullmatch(r"\d\d", later) and later > lid),
                  f"check {cid}", "superseded_by must name a later lesson id")
        # regressions: earlier lessons' checks re-run on this lesson's files (code NN rewrites or relies on)
        regressions = lesson.get("regressions", [])
        _need(isinstance(regressions, list) and all(isinstance(r, str) for r in regressions), where,
              "regressions must be a list of check ids")
        for rid in regressions:
            _need(rid in seen_checks and rid.split(".")[0] < lid, where,
                  f"regression {rid!r} must be a check of an earlier lesson")


def lessons(data: dict | None = None) -> list[dict]:
    return (data or load())["lessons"]


def lesson(lesson_id: str, data: dict | None = None) -> dict | None:
    for item in lessons(data):
        if item["id"] == lesson_id:
            return item
    return None


def check_texts() -> dict[str, dict]:
    """Map check id -> its manifest entry (used by verifiers for their TAP lines)."""
    try:
        data = load()
    except ManifestError:
        return {}
    return {c["id"]: c for lesson_ in data["lessons"] for c in lesson_["checks"]}


def kit_verifier_files() -> dict[str, Path]:
    """Every file of the kit's lessons' verifiers/ by name: what the kit lays into a folder it checks
    (names never a learner's: a work copy gets the kit's file under each of them)."""
    return {p.name: p for p in sorted(KIT_ROOT.glob("lessons/*/verifiers/*.py"))}
