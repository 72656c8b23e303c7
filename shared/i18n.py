"""The learner's language, and the kit's messages in it.

Messages are written once, in English, in the code:

    t("job {job} did not reach {status} within {seconds:g}s", job=short(job_id), status=wanted, seconds=15)

and, for a page rendered in a language given to it (not the learner's), t_in(lang, "English {name}", name=value).

The Chinese lives in GNU gettext catalogues beside the code (`zh.po` in checks/, shared/ and each lesson's
verifiers/), keyed by that English text; Poedit, Weblate and Babel read them.  They are read here by a
small reader (`read_po`) rather than the standard library's `gettext`, which only loads compiled `.mo` files:
reading the `.po` itself means no build step and no binary file to keep in step with its source.
`python -m checks.tools.messages` lists what a catalogue lacks; tests/test_messages.py holds them complete.

LAB_LANG=zh|en picks the language, else the locale, else English.  A message with no translation is shown in
English, never lost.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parent.parent
CATALOGUE_NAME = "zh.po"


def lang() -> str:
    chosen = os.environ.get("LAB_LANG", "").strip().lower()
    if chosen in ("zh", "en"):
        return chosen
    for name in ("LC_ALL", "LC_MESSAGES", "LANG", "LANGUAGE"):
        value = os.environ.get(name, "")
        if value:
            return "zh" if value.lower().startswith("zh") else "en"
    return "en"


def t(message: str, /, **values) -> str:
    """The message in the learner's language, its {placeholders} filled from `values` (str.format rules;
    a message given no values is returned as written, braces and all)."""
    if lang() == "zh":
        message = _catalogue().get(message) or message
    return message.format(**values) if values else message


def t_in(language: str, message: str, /, **values) -> str:
    """t() for an explicit language rather than the learner's: a page rendered for `lang` (the HTML report,
    the gradebook) or a text that shows both languages on purpose.  The same catalogues; "zh" is Chinese,
    anything else English."""
    if language == "zh":
        message = _catalogue().get(message) or message
    return message.format(**values) if values else message


def listed(items, semicolons: bool = False) -> str:
    """items as one list in the learner's language: "a, b, c" or "a; b; c" (zh.po gives the Chinese marks)."""
    def pair(a: str, b: str) -> str:
        return t("{a}; {b}", a=a, b=b) if semicolons else t("{a}, {b}", a=a, b=b)
    return functools.reduce(pair, items) if items else ""


def pick(texts: dict) -> str:
    """Pick from a {"zh": ..., "en": ...} mapping, as stored in tasks.json."""
    return texts.get(lang()) or texts.get("en") or texts.get("zh") or ""


# ---------------------------------------------------------------- catalogues

def catalogue_paths() -> list[Path]:
    """Every zh.po of the kit, and of any folder on sys.path (a lesson's verifiers/ inside a box)."""
    found = [KIT_ROOT / "checks" / CATALOGUE_NAME, KIT_ROOT / "shared" / CATALOGUE_NAME,
             *sorted(KIT_ROOT.glob(f"lessons/*/verifiers/{CATALOGUE_NAME}"))]
    found += [Path(entry or ".") / CATALOGUE_NAME for entry in sys.path if entry.endswith("verifiers")]
    return [path for path in dict.fromkeys(found) if path.is_file()]


_loaded: dict[str, str] | None = None


def _catalogue() -> dict[str, str]:
    global _loaded
    if _loaded is None:
        merged: dict[str, str] = {}
        for path in catalogue_paths():
            merged.update(read_po(path))
        _loaded = merged
    return _loaded


def read_po(path: Path) -> dict[str, str]:
    """msgid -> msgstr of a .po file: translated entries only (no header, no fuzzy or empty ones).
    The subset of the format the kit writes: msgid / msgstr with continued "..." lines, # comments."""
    entries: dict[str, str] = {}
    current: dict | None = None
    target = None
    fuzzy_next = False
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            fuzzy_next = fuzzy_next or (line.startswith("#,") and "fuzzy" in line)
            continue
        keyword, _, rest = line.partition(" ")
        if keyword == "msgid":
            _keep(entries, current)
            current = {"id": _unquote(rest, path, number), "str": "", "fuzzy": fuzzy_next}
            target, fuzzy_next = "id", False
        elif keyword == "msgstr" and current is not None:
            current["str"], target = _unquote(rest, path, number), "str"
        elif line.startswith('"') and current is not None:
            current[target] += _unquote(line, path, number)
        else:
            raise ValueError(f"{path}:{number}: not a line of a .po file the kit reads: {raw!r}")
    _keep(entries, current)
    return entries


def _keep(entries: dict, entry: dict | None) -> None:
    if entry and entry["id"] and entry["str"] and not entry["fuzzy"]:
        entries[entry["id"]] = entry["str"]


ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\"}
_ESCAPE = re.compile(r'\\(.)')


def _unquote(text: str, path: Path, number: int) -> str:
    """A .po string: "..." with the C escapes \\n \\t \\" \\\\ (all the kit writes)."""
    if not (len(text) >= 2 and text[0] == text[-1] == '"'):
        raise ValueError(f"{path}:{number}: expected a quoted string, got {text!r}")
    try:
        return _ESCAPE.sub(lambda m: ESCAPES[m.group(1)], text[1:-1])
    except KeyError as exc:
        raise ValueError(f"{path}:{number}: an escape the kit does not write: \\{exc.args[0]}") from None


def quote(text: str) -> str:
    """The .po string for `text` (the writer's half of _unquote)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'
