"""A lesson's stage for one run: its isolation slot, its servers with a fresh database built from the
folder's schema files, its declared background processes, and whether a run needs the servers to itself."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

from checks.results import notice
from shared import servicectl
from shared import services as S
from shared.credentials import ensure_credentials, task_env_text
from shared.i18n import t
from shared.manifest import load
from shared.proc import Process
from shared.services_clients import app_connect


def lab_slot() -> int:
    """LAB_SLOT=0..7 isolates parallel runs (own Redis dbs and schema).  Checks use slot 1 by default:
    slot 0 (db 0/1, shop_lab) is the learner's own, so a worker left running by hand never takes the
    checks' messages."""
    raw = os.environ.get("LAB_SLOT", "1")
    if not raw.isdigit() or int(raw) >= S.MAX_SLOTS:
        raise ValueError(f"LAB_SLOT={raw!r}: use a number from 0 to {S.MAX_SLOTS - 1}")
    return int(raw)


class SchemaError(Exception):
    """A schema file in the folder being checked is missing or does not run: that folder's problem."""


def prepare_services(lesson: dict, workdir: Path, schema_files: list[str] | None = None,
                     schema_upto: str | None = None) -> list[dict]:
    """Lessons 08–16: services up, the kit's .env.tasks in the work dir, a fresh database with the schemas.

    The database is rebuilt from the products sample data plus every lesson's schema_*.sql up to this
    lesson (or up to `schema_upto`: a regression run uses the folder's own lesson), in lesson order, taken
    from the work dir (so a learner's own schema files are the ones used).

    Returns notices (checks.results.notice), each with its kind decided here: the only ones made are
    look-at-the-result statements the server cannot answer, which need nothing from the learner (not
    actionable: shown after the checks).  They reach the runner as a notice record's message.
    """
    notices: list[dict] = []
    services = lesson.get("services") or []
    if not services:
        return notices
    slot = lab_slot()
    servicectl.up(services)
    secret = ensure_credentials()
    env_copy = workdir / ".env.tasks"
    env_copy.unlink(missing_ok=True)  # the kit's credentials replace a learner's own file in the scratch copy
    fd = os.open(env_copy, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as stream:
        stream.write(S.slot_env(task_env_text(secret), slot))
    if "mysql" not in services:
        return notices
    servicectl.reset_database(S.slot_database(slot))
    schema_files = schema_files if schema_files is not None else [
        name for item in load()["lessons"] if item["id"] <= (schema_upto or lesson["id"])
        for name in item.get("files", []) if name.startswith("schema_") and name.endswith(".sql")]
    conn = app_connect(secret, S.slot_database(slot))
    try:
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            for name in dict.fromkeys(schema_files):
                path = workdir / name
                if not path.is_file():
                    raise SchemaError(t("{name} is missing from the folder: this lesson's tables are made by it",
                                        name=name))
                for statement in servicectl.split_sql(path.read_text(encoding="utf-8", errors="replace")):
                    try:
                        cur.execute(statement)
                    except Exception as exc:
                        # A schema file may end with a look at what it made (SHOW CREATE TABLE …, SELECT
                        # @@…) that this server cannot answer: report it, keep going. DDL errors stop the run.
                        if statement.lstrip().split(None, 1)[0].upper() not in ("SELECT", "SHOW"):
                            first = statement.strip().splitlines()[0][:100]
                            raise SchemaError(t("{name} failed on `{first}`: {exc}", name=name, first=first,
                                                exc=exc)) from None
                        first = statement.strip().splitlines()[0][:80]
                        notices.append(notice(t("{name}: `{first}` only looks at the result, and this server "
                                                "cannot answer it ({exc}); passed over — the checks do not need it",
                                                name=name, first=first, exc=exc), actionable=False))
    finally:
        conn.close()
    return notices


def start_processes(lesson: dict, workdir: Path, log_dir: Path, env: dict) -> list[Process]:
    """Start the lesson's declared background processes and wait (bounded) for each to be ready."""
    started: list[Process] = []
    try:
        for spec in lesson.get("processes", []):
            argv = [sys.executable if part == "{python}" else part for part in spec["argv"]]
            proc = Process(argv, cwd=workdir, log_path=log_dir / f"{spec['name']}.log", env=env)
            started.append(proc)
            ready = spec.get("ready", {})
            proc.wait_ready(spec.get("ready_timeout", 20), port=ready.get("port"), log_contains=ready.get("log"))
            # Verifiers learn each process's pid, command and log (e.g. to SIGKILL a worker and start it again).
            key = re.sub(r"\W", "_", spec["name"]).upper()
            env[f"TASKLAB_PROC_{key}_PID"] = str(proc.pid)
            env[f"TASKLAB_PROC_{key}_ARGV"] = json.dumps(argv)
            env[f"TASKLAB_PROC_{key}_LOG"] = str(proc.log_path)
    except BaseException:
        stop_processes(started)
        raise
    return started


def stop_processes(procs: list[Process], grace: float = 10) -> None:
    for proc in reversed(procs):
        proc.stop(grace=grace)


def needs_exclusive(lesson: dict, only: set[str] | None = None) -> bool:
    """Does this run stop or restart a shared server?  A lesson marked `exclusive_services` names the
    checks that do with `"exclusive": true`; when none is marked, every run of it is exclusive."""
    if not lesson.get("exclusive_services"):
        return False
    marked = {c["id"] for c in lesson["checks"] if c.get("exclusive")}
    if not marked:
        return True
    return only is None or bool(marked & only)
