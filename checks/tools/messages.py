"""The kit's message catalogues: what the code says, and what zh.po translates.

    python -m checks.tools.messages            # report: untranslated, unused, placeholder mismatches
    python -m checks.tools.messages --update   # rewrite every zh.po from the code, keeping translations
    python -m checks.tools.messages --update lessons/04-threads-lock-queue/verifiers   # just that one

Every learner-facing message is a `t("English ...", name=value)` call whose first argument is a string
literal (so a tool can find it, as xgettext does), or `t_in(lang, "English ...", name=value)` for a page
rendered in a language given to it (its second argument the literal).  Each folder of code has its catalogue
beside it: checks/zh.po, shared/zh.po, lessons/NN-*/verifiers/zh.po, keyed by the English.  --update is the msgmerge
step: new messages get an empty translation, gone ones are dropped, the rest keep theirs, the "#:" lines
say where each is used.  tests/test_messages.py runs the report and wants it empty.
"""

from __future__ import annotations

import argparse
import ast
import re
import string
import sys
from pathlib import Path

from shared.i18n import CATALOGUE_NAME, KIT_ROOT, quote, read_po

CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")
WRAP = 76  # .po lines, as msgmerge wraps them


def code_folders(root: Path = KIT_ROOT) -> list[Path]:
    """The folders that each keep one catalogue: checks/ (with its tools/), shared/, each lesson's verifiers/."""
    return [root / "checks", root / "shared", *sorted(root.glob("lessons/*/verifiers"))]


def sources(folder: Path) -> list[Path]:
    return sorted(path for path in folder.rglob("*.py") if "__pycache__" not in path.parts)


class Use:
    def __init__(self, path: Path, line: int, formatted: bool):
        self.path, self.line, self.formatted = path, line, formatted


def messages_in(folder: Path, root: Path = KIT_ROOT) -> tuple[dict[str, list[Use]], list[str]]:
    """msgid -> where it is used, in order of first use; and the t() calls whose message is not a literal."""
    found: dict[str, list[Use]] = {}
    loose = []
    for path in sources(folder):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("t", "t_in")):
                continue
            where = f"{path.relative_to(root)}:{node.lineno}"
            message = _literal_message(node)
            if message is None:
                loose.append(f"{where}: {_WANTS[node.func.id]}")
                continue
            found.setdefault(message, []).append(Use(path, node.lineno, bool(node.keywords)))
    for uses in found.values():
        uses.sort(key=lambda use: (str(use.path), use.line))
    return dict(sorted(found.items(), key=lambda item: (str(item[1][0].path), item[1][0].line))), loose


# A call whose message is not one string literal: no tool can find it to translate.
_WANTS = {"t": "t() wants its message as one string literal, not an expression (a tool cannot find it)",
          "t_in": "t_in() wants a language and its message as one string literal, not an expression"}


def _literal_message(node: ast.Call) -> str | None:
    """The message of t("...") or t_in(lang, "..."), when it is one string literal; else None."""
    args = node.args
    wanted = 1 if node.func.id == "t" else 2
    if len(args) != wanted or any(isinstance(arg, ast.Starred) for arg in args):
        return None
    message = args[-1]
    return message.value if isinstance(message, ast.Constant) and isinstance(message.value, str) else None


def fields(text: str) -> list[str]:
    """The {placeholders} of a message, as str.format reads them."""
    try:
        return sorted({name for _, name, _, _ in string.Formatter().parse(text) if name is not None})
    except ValueError as exc:
        return [f"<unreadable: {exc}>"]


def problems(root: Path = KIT_ROOT) -> list[str]:
    """Everything wrong between the code and its catalogues; empty when they agree."""
    found, translations = [], {}
    for folder in code_folders(root):
        used, loose = messages_in(folder, root)
        found += loose
        catalogue = folder / CATALOGUE_NAME
        entries = read_po(catalogue) if catalogue.exists() else {}
        where = catalogue.relative_to(root)
        for msgid, uses in used.items():
            first = f"{uses[0].path.relative_to(root)}:{uses[0].line}"
            msgstr = entries.get(msgid, "")
            if not msgstr:
                found.append(f"{where}: no translation for {msgid!r} ({first})")
                continue
            if any(use.formatted for use in uses) and fields(msgid) != fields(msgstr):
                found.append(f"{where}: placeholders differ for {msgid!r}: {fields(msgid)} vs {fields(msgstr)}")
            if translations.setdefault(msgid, msgstr) != msgstr:
                found.append(f"{where}: {msgid!r} is translated two ways in the kit")
            if CJK.search(msgid):
                found.append(f"{first}: a message written in Chinese; write it in English, translate it in {where}")
        for msgid in entries.keys() - used.keys():
            found.append(f"{where}: {msgid!r} is no longer used (run --update)")
    return found


def chinese_in_code(root: Path = KIT_ROOT) -> list[str]:
    """Where the kit's code still holds Chinese text: `path::name` of each top-level function, class or
    constant with a string literal in Chinese (the catalogues hold the Chinese of every message, so what is
    left should be data: words the checks look for in a learner's text, or text they send to learner code)."""
    found = []
    for folder in code_folders(root):
        for path in sources(folder):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            for statement in tree.body:
                if any(isinstance(node, ast.Constant) and isinstance(node.value, str) and CJK.search(node.value)
                       for node in ast.walk(statement)):
                    found.append(f"{path.relative_to(root)}::{_name_of(statement)}")
    return found


def _name_of(statement: ast.stmt) -> str:
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return statement.name
    targets = getattr(statement, "targets", None) or [getattr(statement, "target", None)]
    names = [target.id for target in targets if isinstance(target, ast.Name)]
    return names[0] if names else f"line {statement.lineno}"


def _po_lines(keyword: str, text: str) -> list[str]:
    if len(text) + len(keyword) + 3 <= WRAP and "\n" not in text[:-1]:
        return [f"{keyword} {quote(text)}"]
    pieces, rest = [], text
    while rest:
        cut = rest.find("\n") + 1 or len(rest)
        cut = min(cut, WRAP - 2)
        if cut < len(rest) and "\n" not in rest[:cut]:
            space = rest.rfind(" ", 0, cut)
            cut = space + 1 if space > WRAP // 3 else cut
        pieces.append(rest[:cut])
        rest = rest[cut:]
    return [f'{keyword} ""'] + [quote(piece) for piece in pieces]


def write_catalogue(folder: Path, used: dict[str, list[Use]], old: dict[str, str], root: Path = KIT_ROOT) -> None:
    title = folder.relative_to(root)
    lines = [f"# Task Lab: the Chinese of the messages in {title}/, keyed by the English in the code.",
             "# python -m checks.tools.messages --update rewrites this file from the code; translations are kept.",
             'msgid ""', 'msgstr ""', '"Content-Type: text/plain; charset=UTF-8\\n"', '"Language: zh_CN\\n"', ""]
    for msgid, uses in used.items():
        lines.append("#: " + " ".join(f"{use.path.relative_to(folder)}:{use.line}" for use in uses[:4]))
        if any(use.formatted for use in uses):
            lines.append("#, python-brace-format")
        lines += _po_lines("msgid", msgid)
        lines += _po_lines("msgstr", old.get(msgid, ""))
        lines.append("")
    (folder / CATALOGUE_NAME).write_text("\n".join(lines), encoding="utf-8")


def update(root: Path = KIT_ROOT, only: list[Path] | None = None) -> None:
    chosen = [path.resolve() for path in only or []]
    for folder in code_folders(root):
        if chosen and folder.resolve() not in chosen:
            continue
        used, _ = messages_in(folder)
        catalogue = folder / CATALOGUE_NAME
        old = read_po(catalogue) if catalogue.exists() else {}
        if used or old:
            write_catalogue(folder, used, old, root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m checks.tools.messages", description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="rewrite the zh.po files from the code")
    parser.add_argument("folders", nargs="*", type=Path, help="with --update: only these folders' zh.po")
    args = parser.parse_args(argv)
    if args.folders and not args.update:
        parser.error("folders are for --update")
    unknown = [str(path) for path in args.folders if path.resolve() not in [f.resolve() for f in code_folders()]]
    if unknown:
        parser.error(f"not a folder with a catalogue: {', '.join(unknown)}")
    if args.update:
        update(only=args.folders)
    found = problems()
    for line in found:
        print(line)
    print(f"{len(found)} problem(s)" if found else "every message has its translation")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
