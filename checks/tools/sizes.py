"""How long each lesson's checker is beside the lesson code it checks, and what its lines are.

    python -m checks.tools.sizes          # a table, one row per lesson and a total
    python -m checks.tools.sizes --json   # the same numbers as JSON

Lesson code is every .py and .sql file of a lesson folder outside verifiers/ (what a learner types for
that lesson); the folder is the same for the learner's whole folder after that lesson (lessons 01..NN laid
over each other: what the checker runs in); the checker is every .py file in verifiers/.  All are
counted as `wc -l` counts them.  A checker line is
one of: blank, docstring, message (a line of a t()/t_in() call: frozen words the learner reads), comment,
or code.  lessons/README.md says why a lesson's checker may be several times its lesson.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

from checks.workdir import lesson_files, reference_files
from shared.manifest import KIT_ROOT, lessons

KINDS = ("blank", "docstring", "message", "comment", "code")


def code(files: dict[str, Path]) -> list[Path]:
    return [path for name, path in sorted(files.items()) if name.endswith((".py", ".sql"))]


def checker_code(folder: Path) -> list[Path]:
    return sorted(path for path in (folder / "verifiers").rglob("*.py") if "__pycache__" not in path.parts)


def line_count(path: Path) -> int:
    return path.read_bytes().count(b"\n")  # as wc -l counts


def kinds_of(source: str) -> dict[str, int]:
    """How many lines of `source` are of each kind in KINDS (each line counted once, the first kind that fits)."""
    lines = source.splitlines()
    docstrings, messages = set(), set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body \
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            docstrings.update(range(body[0].lineno, body[0].end_lineno + 1))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("t", "t_in"):
            messages.update(range(node.lineno, node.end_lineno + 1))
    counts = dict.fromkeys(KINDS, 0)
    for number, line in enumerate(lines, 1):
        if not line.strip():
            kind = "blank"
        elif number in docstrings:
            kind = "docstring"
        elif number in messages:
            kind = "message"
        elif line.lstrip().startswith("#"):
            kind = "comment"
        else:
            kind = "code"
        counts[kind] += 1
    return counts


def measure() -> list[dict]:
    """One row per lesson: lesson code lines, the folder's after it, checker lines, their ratio (to the lesson
    code), and the checker's lines by kind."""
    rows, every = [], lessons()
    for lesson in every:
        checker = checker_code(KIT_ROOT / lesson["folder"])
        row = {"lesson": lesson["id"], "lesson_code": sum(map(line_count, code(lesson_files(lesson)))),
               "folder": sum(map(line_count, code(reference_files(every, lesson["id"])))),
               "checker": sum(map(line_count, checker)), **dict.fromkeys(KINDS, 0)}
        for path in checker:
            for kind, count in kinds_of(path.read_text(encoding="utf-8")).items():
                row[kind] += count
        rows.append(row)
    total = {"lesson": "all", "folder": rows[-1]["folder"],
             **{key: sum(row[key] for row in rows) for key in ("lesson_code", "checker", *KINDS)}}
    for row in [*rows, total]:
        row["ratio"] = round(row["checker"] / row["lesson_code"], 2) if row["lesson_code"] else None
    return [*rows, total]


def table(rows: list[dict]) -> str:
    heads = ("lesson", "lesson_code", "folder", "checker", "ratio", *KINDS)
    cells = [[str(row[head]) if head != "ratio" else f"{row['ratio']}x" for head in heads] for row in rows]
    widths = [max(len(head), *(len(cell[i]) for cell in cells)) for i, head in enumerate(heads)]
    out = ["  ".join(head.rjust(width) for head, width in zip(heads, widths, strict=True))]
    out += ["  ".join(cell.rjust(width) for cell, width in zip(cell_row, widths, strict=True)) for cell_row in cells]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m checks.tools.sizes", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    rows = measure()
    print(json.dumps(rows, indent=1) if args.json else table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
