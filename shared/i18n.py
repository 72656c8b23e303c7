"""Pick the learner's language: LAB_LANG=zh|en, else the locale, else English."""

import os


def lang() -> str:
    chosen = os.environ.get("LAB_LANG", "").strip().lower()
    if chosen in ("zh", "en"):
        return chosen
    for name in ("LC_ALL", "LC_MESSAGES", "LANG", "LANGUAGE"):
        value = os.environ.get(name, "")
        if value:
            return "zh" if value.lower().startswith("zh") else "en"
    return "en"


def t(zh: str, en: str) -> str:
    """Return the text for the current language."""
    return zh if lang() == "zh" else en


def pick(texts: dict) -> str:
    """Pick from a {"zh": ..., "en": ...} mapping, as stored in tasks.json."""
    return texts.get(lang()) or texts.get("en") or texts.get("zh") or ""
