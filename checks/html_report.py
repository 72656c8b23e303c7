"""One run's report as a self-contained HTML page, made from `checks.report.to_dict`'s dict.

The page is opened from a file:// URL, often on a machine with no network, and may show learner output:
so everything is inline (no CDN, no fetch; a Content-Security-Policy forbids loading anything), every
string is escaped, and the page reads fully with JavaScript off.
"""

from __future__ import annotations

import html
import os
from pathlib import Path

from checks.report import count_tests, count_text

MARKS = {"pass": "✓", "fail": "✗", "error": "!", "timeout": "⏱", "skipped": "–", "superseded": "↷", "not_reached": "○"}
NOT_PASSED = ("fail", "error", "timeout")
OUTPUT_LINES, OUTPUT_CHARS = 40, 4000  # the tail of a check's output shown under a failure

# UI words, both languages.  Statuses keep their English key in the data; only the label changes.
WORDS = {
    "en": {
        "run_title": "Task Lab report", "source": "Source", "created": "Created", "status": "Status",
        "score": "Score", "checks": "Checks", "bonus": "bonus", "tampering": "⚠ tampering suspected", "regressions": "Regressions",
        "lesson": "Lesson {id}", "hint": "Hint", "output": "Output (tail)", "exercise": "exercise",
        "no_checks": "No checks in this report.", "back": "← class gradebook", "run_error": "The run could not happen",
        "pass": "pass", "fail": "fail", "error": "error", "timeout": "timeout", "skipped": "skipped",
        "superseded": "superseded",
        # gradebook
        "book_title": "Class gradebook", "students": "Students", "student": "Student", "total": "Total",
        "not_reached": "not reached", "not_graded": "not graded", "hardest": "Hardest checks",
        "check": "Check", "text": "What it checks", "did_not_pass": "Did not pass", "breakdown": "fail / error / timeout",
        "common_message": "Most common message", "flags": "Flags", "sort_hint": "Click a column heading to sort.",
        "regression_failed": "regression not passed", "regression": "regression",
        "hardest_note": "Lessons a student did not reach are not counted here (see the “not reached” column).",
        "nobody_failed": "Every check passed for every student who reached it.", "grid": "Scores by lesson",
        "legend": "Cells: course score / maximum per lesson (core + exercise; extensions are the bonus). "
                  "Grey “not reached”: the folder or the lesson's files are missing — not the same as failed.",
        "tampering_short": "tampering suspected",
    },
    "zh": {
        "run_title": "Task Lab 检查报告", "source": "检查对象", "created": "生成时间", "status": "状态",
        "score": "得分", "checks": "检查", "bonus": "加分", "tampering": "⚠ 疑似篡改", "regressions": "回归检查",
        "lesson": "第 {id} 课", "hint": "提示", "output": "输出（末尾）", "exercise": "练习",
        "no_checks": "本报告没有检查项。", "back": "← 全班成绩册", "run_error": "本次运行未能进行",
        "pass": "通过", "fail": "失败", "error": "出错", "timeout": "超时", "skipped": "跳过",
        "superseded": "已被替换",
        "book_title": "全班成绩册", "students": "学生数", "student": "学生", "total": "总分",
        "not_reached": "未到达", "not_graded": "未批改", "hardest": "最难的检查",
        "check": "检查", "text": "检查内容", "did_not_pass": "未通过", "breakdown": "失败 / 出错 / 超时",
        "common_message": "最常见的信息", "flags": "标记", "sort_hint": "点击列标题可排序。",
        "regression_failed": "回归检查未通过", "regression": "回归",
        "hardest_note": "学生未到达的课程不计入此表（见“未到达”列）。",
        "nobody_failed": "所有到达该检查的学生都通过了。", "grid": "各课得分",
        "legend": "单元格：每课的课程得分 / 满分（核心 + 练习；扩展计为加分）。"
                  "灰色“未到达”：文件夹或本课文件缺失——与失败不同。",
        "tampering_short": "疑似篡改",
    },
}

CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI","Noto Sans CJK SC","PingFang SC",sans-serif,"Noto Color Emoji","Segoe UI Emoji","Apple Color Emoji";
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
    return chosen if chosen in WORDS else "en"


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


def group_tests(report: dict) -> dict[str, list[dict]]:
    """Report lesson id -> its tests, in order.  A regression check carries the *earlier* lesson's id, but
    it is listed right after the checks of the lesson that re-ran it, so it joins that lesson."""
    groups: dict[str, list[dict]] = {l["id"]: [] for l in report.get("lessons", [])}
    current = None
    for test in report.get("tests", []):
        if not test.get("regression") or current is None:
            current = test.get("lesson")
        groups.setdefault(current, []).append(test)
    return groups


def status_label(status: str, w: dict) -> str:
    return f'<span class="st-{esc(status)}"><span class="mark">{MARKS.get(status, "?")}</span>' \
           f'{esc(w.get(status, status))}</span>'


def output_tail(output: str) -> str:
    lines = output.splitlines()[-OUTPUT_LINES:]
    tail = "\n".join(lines)[-OUTPUT_CHARS:]
    return tail if tail == output else "…\n" + tail


def render_check(test: dict, lang: str, reference: dict | None = None, learner: bool = False) -> str:
    w = WORDS[lang]
    status = test.get("status", "error")
    badges = ""
    if test.get("bonus") or test.get("kind") == "extension":
        badges += f'<span class="badge">{esc(w["bonus"])}</span>'
    elif test.get("kind") == "exercise":
        badges += f'<span class="badge">{esc(w["exercise"])}</span>'
    if test.get("tampering"):
        badges += f'<span class="badge warn">{esc(w["tampering"])}</span>'
    parts = [f'<li class="check st-{esc(status)}" data-status="{esc(status)}">'
             f'<span class="mark" title="{esc(w.get(status, status))}">{MARKS.get(status, "?")}</span> '
             f'<span class="cid">{esc(test.get("id"))}</span> {esc(pick(test.get("text"), lang))}{badges} '
             f'<span class="secs">{float(test.get("seconds") or 0):.1f} s</span>']
    if test.get("message"):
        parts.append(f'<div class="msg">{esc(test["message"])}</div>')
    if status != "pass" and test.get("hint"):
        parts.append(f'<div class="hint">{esc(w["hint"])}: {esc(pick(test["hint"], lang))}</div>')
    if status in NOT_PASSED and test.get("output"):
        parts.append(f'<pre aria-label="{esc(w["output"])}">{esc(output_tail(test["output"]))}</pre>')
    ref = (reference or {}).get(test.get("id")) if learner and not test.get("regression") else None
    if test.get("figures") or ref:
        from checks import timelines  # imported here: it draws with this module's helpers
        parts.append(timelines.render_check_figures(test.get("figures") or [], ref, lang, learner=learner,
                                                    lesson=str(test.get("lesson", "NN"))))
    return "".join(parts) + "</li>"


def render_lesson(lesson: dict, tests: list[dict], lang: str, reference: dict | None = None,
                  learner: bool = False) -> str:
    w = WORDS[lang]
    own = [t for t in tests if not t.get("regression")]
    again = [t for t in tests if t.get("regression")]
    score = f'{esc(w["score"])} {lesson.get("score", 0)}/{lesson.get("max_score", 0)}'
    if lesson.get("max_bonus"):
        score += f' · {esc(w["bonus"])} {lesson.get("bonus", 0)}/{lesson["max_bonus"]}'
    out = [f'<section class="lesson" id="lesson-{esc(lesson["id"])}">',
           f'<h2>{esc(w["lesson"].format(id=lesson["id"]))} — {esc(pick(lesson.get("title"), lang))}</h2>',
           f'<p>{status_label(lesson.get("status", ""), w)} · {score} · '
           f'<span class="counts">{esc(count_text(count_tests(tests), lang))}</span> · '
           f'<span class="secs">{float(lesson.get("seconds") or 0):.1f} s</span></p>',
           '<ul class="checks">', *(render_check(t, lang, reference, learner) for t in own), "</ul>"]
    if again:  # an earlier lesson's checks re-run here: shown apart, since a failed one fails the lesson
        out += [f'<h3>{esc(w["regressions"])}</h3>', '<ul class="checks regressions">',
                *(render_check(t, lang) for t in again), "</ul>"]
    return "\n".join(out + ["</section>"])


def render_run(report: dict, lang: str, *, back: str | None = None, reference: dict | None = None) -> str:
    """The whole page for one report dict (`checks.report.to_dict`).  `back`: a relative link shown at the
    top (the gradebook's per-student pages point at its index).  `reference`: check id -> the reference's
    figures, drawn beside a learner's own (see checks/timelines.py)."""
    lang = resolve_lang(lang)
    w = WORDS[lang]
    score = f'{report.get("score", 0)}/{report.get("max_score", 0)}'
    bonus = f'{report.get("bonus", 0)}/{report.get("max_bonus", 0)}'
    head = [f'<p><a href="{esc(back)}">{esc(w["back"])}</a></p>' if back else "",
            f'<h1>{esc(w["run_title"])}</h1>', '<dl class="meta">',
            f'<dt>{esc(w["source"])}</dt><dd>{esc(report.get("source"))}</dd>',
            f'<dt>{esc(w["created"])}</dt><dd>{esc(report.get("created_at"))}</dd>',
            f'<dt>{esc(w["status"])}</dt><dd class="overall">{status_label(report.get("status", ""), w)}</dd>',
            f'<dt>{esc(w["score"])}</dt><dd class="score">{score}</dd>',
            f'<dt>{esc(w["checks"])}</dt><dd class="counts">{esc(count_text(count_tests(report.get("tests", [])), lang))}</dd>',
            f'<dt>{esc(w["bonus"])}</dt><dd class="bonus">{bonus}</dd>']
    if report.get("tampering"):
        head.append(f'<dt>⚠</dt><dd><span class="badge warn">{esc(w["tampering"])}</span></dd>')
    if report.get("message"):
        head.append(f'<dt>{esc(w["run_error"])}</dt><dd class="msg">{esc(report["message"])}</dd>')
    head.append("</dl>")
    groups = group_tests(report)
    lessons = list(report.get("lessons", []))
    known = {l["id"] for l in lessons}
    lessons += [{"id": lid, "title": {}, "status": ""} for lid in groups if lid not in known]  # stray tests
    learner = report.get("source") != "reference"
    body = [render_lesson(l, groups.get(l["id"], []), lang, reference, learner) for l in lessons]
    if not body:
        body = [f'<p>{esc(w["no_checks"])}</p>']
    title = f'{w["run_title"]} — {report.get("source", "")}'
    from checks import timelines
    return page(title, "\n".join(head + body), lang, extra_css=timelines.CSS)


def write_run(path: Path, report: dict, lang: str | None = None) -> None:
    """Write the page; a learner's timelines are drawn beside the reference's last recorded ones."""
    from checks import timelines
    reference = timelines.reference_for(report) if report.get("source") != "reference" else None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_run(report, resolve_lang(lang), reference=reference), encoding="utf-8")
