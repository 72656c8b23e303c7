"""The frame every HTML page of the kit shares (a run's report, the gradebook, the soak page): its words in
either language (their Chinese in checks/zh.po), its CSS, a self-contained document forbidding every fetch,
and escaping.

A page is opened from a file:// URL, often on a machine with no network, and may show learner output:
so everything is inline (no CDN, no fetch; a Content-Security-Policy forbids loading anything), every
string is escaped, and the page reads fully with JavaScript off.
"""

from __future__ import annotations

import html
import os

from shared.i18n import t_in

MARKS = {"pass": "✓", "fail": "✗", "error": "!", "timeout": "⏱", "skipped": "–", "superseded": "↷", "not_reached": "○"}


def words(lang: str) -> dict[str, str]:
    """The pages' UI words in `lang` (their Chinese in checks/zh.po).  Statuses keep their English key in the
    data; only the label changes.  "Lesson {id}" is said with t_in(lang, "Lesson {id}", id=...)."""
    return {
        "run_title": t_in(lang, "Task Lab report"), "source": t_in(lang, "Source"), "created": t_in(lang, "Created"),
        "status": t_in(lang, "Status"), "score": t_in(lang, "Score"), "checks": t_in(lang, "Checks"),
        "bonus": t_in(lang, "bonus"), "tampering": t_in(lang, "⚠ tampering suspected"),
        "regressions": t_in(lang, "Regressions"), "hint": t_in(lang, "Hint"), "output": t_in(lang, "Output (tail)"),
        "exercise": t_in(lang, "exercise"), "no_checks": t_in(lang, "No checks in this report."),
        "back": t_in(lang, "← class gradebook"), "run_error": t_in(lang, "The run could not happen"),
        "pass": t_in(lang, "pass"), "fail": t_in(lang, "fail"), "error": t_in(lang, "error"),
        "timeout": t_in(lang, "timeout"), "skipped": t_in(lang, "skipped"), "superseded": t_in(lang, "superseded"),
        # gradebook
        "book_title": t_in(lang, "Class gradebook"), "students": t_in(lang, "Students"),
        "student": t_in(lang, "Student"), "total": t_in(lang, "Total"), "not_reached": t_in(lang, "not reached"),
        "not_graded": t_in(lang, "not graded"), "hardest": t_in(lang, "Hardest checks"),
        "check": t_in(lang, "Check"), "text": t_in(lang, "What it checks"), "did_not_pass": t_in(lang, "Did not pass"),
        "breakdown": t_in(lang, "fail / error / timeout"), "common_message": t_in(lang, "Most common message"),
        "flags": t_in(lang, "Flags"), "sort_hint": t_in(lang, "Click a column heading to sort."),
        "regression_failed": t_in(lang, "regression not passed"), "regression": t_in(lang, "regression"),
        "hardest_note": t_in(lang, "Lessons a student did not reach are not counted here (see the “not reached” "
                                   "column)."),
        "nobody_failed": t_in(lang, "Every check passed for every student who reached it."),
        "grid": t_in(lang, "Scores by lesson"),
        "legend": t_in(lang, "Cells: course score / maximum per lesson (core + exercise; extensions are the bonus). "
                             "Grey “not reached”: the folder or the lesson's files are missing — not the same as "
                             "failed."),
        "tampering_short": t_in(lang, "tampering suspected"),
        "self_reported": t_in(lang, "Self-reported"),
        "self_reported_check": t_in(lang, "Decided on what the learner's own process reported about itself "
                                          "(tasks.json evidence: self_reported)"),
        "self_reported_title": t_in(lang, "Points of the total earned on checks decided on what the learner's own "
                                          "process reported (tasks.json evidence: self_reported): weigh them"),
    }


CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI","Noto Sans CJK SC","PingFang SC",sans-serif,
 "Noto Color Emoji","Segoe UI Emoji","Apple Color Emoji";
 margin:1.5rem auto;max-width:70rem;padding:0 1rem;color:#1d2228;background:#fff}
h1{font-size:1.5rem;margin:.2rem 0 .6rem}h2{font-size:1.2rem;margin:1.6rem 0 .4rem;border-bottom:1px solid #ddd}
h3{font-size:1rem;margin:.9rem 0 .3rem}
dl.meta{display:grid;grid-template-columns:max-content 1fr;gap:.15rem 1rem;margin:0}dl.meta dt{color:#555}
dl.meta dd{margin:0;word-break:break-all}
ul.checks{list-style:none;padding:0;margin:0}
li.check{border-left:4px solid #bbb;padding:.35rem .6rem;margin:.3rem 0;background:#fafafa}
.mark{display:inline-block;width:1.3em;text-align:center;font-weight:bold}
.cid{font-family:ui-monospace,Menlo,Consolas,monospace;color:#444}.secs{color:#777;font-size:.85em}
.msg{margin:.2rem 0 0 1.6rem}.hint{margin:.2rem 0 0 1.6rem;color:#364}
pre{margin:.3rem 0 0 1.6rem;padding:.5rem;background:#f0f0f0;overflow-x:auto;white-space:pre-wrap;
 word-break:break-all;font-size:.85em;max-height:30rem}
.badge{display:inline-block;font-size:.75em;padding:0 .4em;border-radius:.6em;background:#e3e3f7;color:#334;
 margin-left:.3em;vertical-align:middle}
.badge.warn{background:#ffd7a8;color:#7a3a00;font-weight:bold}
li.st-pass{border-color:#2e9e4f}.st-pass .mark{color:#2e9e4f}
li.st-fail{border-color:#d23b3b}.st-fail .mark{color:#d23b3b}
li.st-error{border-color:#e08a00}.st-error .mark{color:#e08a00}
li.st-timeout{border-color:#8a4fd0}.st-timeout .mark{color:#8a4fd0}
li.st-skipped{border-color:#aaa}.st-skipped .mark{color:#888}
li.st-superseded{border-color:#7b9bb8}.st-superseded .mark{color:#5a7a98}
.overall{font-weight:bold}
table{border-collapse:collapse;margin:.4rem 0}th,td{border:1px solid #ccc;padding:.25rem .5rem;text-align:left;
 vertical-align:top}th{background:#f3f3f3}
table.sortable th{cursor:pointer;user-select:none}table.sortable th[data-dir=asc]::after{content:" ▲"}
table.sortable th[data-dir=desc]::after{content:" ▼"}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}td.cell{text-align:center;white-space:nowrap}
td.nr{background:#e4e4e4;color:#666;font-style:italic}td.ng{color:#999}
.small{font-size:.8em;color:#555}
"""


def resolve_lang(lang: str | None) -> str:
    """The page's language: the argument, else LAB_LANG, else English."""
    chosen = (lang or os.environ.get("LAB_LANG", "")).strip().lower()
    return chosen if chosen in ("zh", "en") else "en"


def esc(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def pick(texts, lang: str) -> str:
    """A {"zh","en"} text in the page's language, the other one when that is empty."""
    if not isinstance(texts, dict):
        return "" if texts is None else str(texts)
    return texts.get(lang) or texts.get("en") or texts.get("zh") or ""


def page(title: str, body: str, lang: str, script: str = "", extra_css: str = "") -> str:
    """A whole self-contained document.  The CSP forbids every fetch, so nothing outside can load."""
    csp = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"
    return (f'<!DOCTYPE html>\n<html lang="{"zh-CN" if lang == "zh" else "en"}">\n<head>\n<meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{csp}">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{esc(title)}</title>\n<style>{CSS}{extra_css}</style>\n</head>\n<body>\n{body}\n"
            + (f"<script>{script}</script>\n" if script else "") + "</body>\n</html>\n")
