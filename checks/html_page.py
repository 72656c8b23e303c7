"""The frame every HTML page of the kit shares (a run's report, the gradebook, the soak page): its words in
both languages, its CSS, a self-contained document forbidding every fetch, and escaping.

A page is opened from a file:// URL, often on a machine with no network, and may show learner output:
so everything is inline (no CDN, no fetch; a Content-Security-Policy forbids loading anything), every
string is escaped, and the page reads fully with JavaScript off.
"""

from __future__ import annotations

import html
import os

MARKS = {"pass": "✓", "fail": "✗", "error": "!", "timeout": "⏱", "skipped": "–", "superseded": "↷", "not_reached": "○"}

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
