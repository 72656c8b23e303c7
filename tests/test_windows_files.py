"""A learner's files saved by a Windows editor are judged like any other.

Learners often work in WSL2 with a Windows editor, which may save CRLF line ends and a UTF-8 BOM.  Python
and MySQL's own tools read such files; the checks that read a learner's text themselves (source parsed
with ast, decision.md, the schema and monitor SQL, verification-record.json) must too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from checks.results import PASS
from checks.runner import run_lesson
from checks.workdir import materialise
from shared import manifest
from shared.servicectl import split_sql

DATA = manifest.load()
BOM = b"\xef\xbb\xbf"
TEXT = {".py", ".sql", ".md", ".json"}

# The checks that read a learner's text with the kit's own code, by lesson.
READERS = {
    "06": {"06.2"},                     # cpu_work.py, parsed with ast
    "07": {"07.1", "07.3", "07.11"},    # decision.md
    "11": {"11.2"},                     # schema_jobs.sql, applied by the kit
    "16": {"16.1", "16.7"},             # verification-record.json; monitor_exports.sql
}


def saved_on_windows(work: Path) -> list[str]:
    """Every text file of the folder, now with CRLF line ends and a leading BOM: their names."""
    names = []
    for path in sorted(work.rglob("*")):
        if path.is_file() and path.suffix in TEXT:
            data = path.read_bytes().removeprefix(BOM).replace(b"\r\n", b"\n")
            path.write_bytes(BOM + data.replace(b"\n", b"\r\n"))
            names.append(path.name)
    return names


def test_split_sql_reads_a_windows_file_as_the_same_statements():
    script = "-- the jobs\nCREATE TABLE a (id INT);\n\nINSERT INTO a VALUES (1);\n"
    windows = "\ufeff" + script.replace("\n", "\r\n")
    assert split_sql(windows) == split_sql(script) == ["CREATE TABLE a (id INT)", "INSERT INTO a VALUES (1)"]


@pytest.mark.parametrize("lesson_id", sorted(READERS))
def test_a_folder_saved_by_a_windows_editor_passes(lesson_id, tmp_path):
    lesson = manifest.lesson(lesson_id, DATA)
    work = materialise(DATA["lessons"], lesson, tmp_path / "work")
    if lesson_id == "07":   # a decision.md that starts with its table: the BOM then sits before the first |
        decision = (work / "decision.md").read_text(encoding="utf-8")
        (work / "decision.md").write_text(decision[decision.index("\n|") + 1:], encoding="utf-8")
    assert saved_on_windows(work)
    result = run_lesson(lesson, work, tmp_path / "logs", only=READERS[lesson_id])
    judged = {check.id: check for check in result.checks if check.id in READERS[lesson_id]}
    assert set(judged) == READERS[lesson_id]
    for check in judged.values():
        assert check.status == PASS, (check.id, check.status, check.message)
