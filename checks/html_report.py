"""One run's report as a self-contained HTML page, made from `checks.report.to_dict`'s dict (the page
frame: checks/html_page.py; a check's figures: checks/timelines.py)."""

from __future__ import annotations

from pathlib import Path

from checks import timelines
from checks.html_page import MARKS, esc, page, pick, resolve_lang, words
from checks.report import count_tests, count_text, is_flaky
from checks.results import NOT_PASSED
from shared.i18n import t_in

OUTPUT_LINES, OUTPUT_CHARS = 40, 4000  # the tail of a check's output shown under a failure


def group_tests(report: dict) -> dict[str, list[dict]]:
    """Report lesson id -> its tests, in order.  A regression check carries the *earlier* lesson's id, but
    it is listed right after the checks of the lesson that re-ran it, so it joins that lesson."""
    groups: dict[str, list[dict]] = {lesson["id"]: [] for lesson in report.get("lessons", [])}
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
    w = words(lang)
    status = test.get("status", "error")
    badges = ""
    if test.get("bonus") or test.get("kind") == "extension":
        badges += f'<span class="badge">{esc(w["bonus"])}</span>'
    elif test.get("kind") == "exercise":
        badges += f'<span class="badge">{esc(w["exercise"])}</span>'
    if test.get("evidence") == "self_reported":  # decided on what the learner's own process said
        badges += f'<span class="badge" title="{esc(w["self_reported_check"])}">{esc(w["self_reported"])}</span>'
    if test.get("tampering"):
        badges += f'<span class="badge warn">{esc(w["tampering"])}</span>'
    runs = test.get("runs")
    if runs and runs["tried"] > 1:
        badges += (f'<span class="badge{" warn" if is_flaky(test) else ""}">'
                   f'{esc(t_in(lang, "passed {passed}/{tried} runs", passed=runs["passed"], tried=runs["tried"]))}'
                   '</span>')
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
        parts.append(timelines.render_check_figures(test.get("figures") or [], ref, lang, learner=learner,
                                                    lesson=str(test.get("lesson", "NN"))))
    return "".join(parts) + "</li>"


def render_lesson(lesson: dict, tests: list[dict], lang: str, reference: dict | None = None,
                  learner: bool = False) -> str:
    w = words(lang)
    own = [t for t in tests if not t.get("regression")]
    again = [t for t in tests if t.get("regression")]
    score = f'{esc(w["score"])} {lesson.get("score", 0)}/{lesson.get("max_score", 0)}'
    if lesson.get("max_bonus"):
        score += f' · {esc(w["bonus"])} {lesson.get("bonus", 0)}/{lesson["max_bonus"]}'
    out = [f'<section class="lesson" id="lesson-{esc(lesson["id"])}">',
           f'<h2>{esc(t_in(lang, "Lesson {id}", id=lesson["id"]))} — {esc(pick(lesson.get("title"), lang))}</h2>',
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
    w = words(lang)
    score = f'{report.get("score", 0)}/{report.get("max_score", 0)}'
    bonus = f'{report.get("bonus", 0)}/{report.get("max_bonus", 0)}'
    head = [f'<p><a href="{esc(back)}">{esc(w["back"])}</a></p>' if back else "",
            f'<h1>{esc(w["run_title"])}</h1>', '<dl class="meta">',
            f'<dt>{esc(w["source"])}</dt><dd>{esc(report.get("source"))}</dd>',
            f'<dt>{esc(w["created"])}</dt><dd>{esc(report.get("created_at"))}</dd>',
            f'<dt>{esc(w["status"])}</dt><dd class="overall">{status_label(report.get("status", ""), w)}</dd>',
            f'<dt>{esc(w["score"])}</dt><dd class="score">{score}</dd>',
            f'<dt>{esc(w["checks"])}</dt>'
            f'<dd class="counts">{esc(count_text(count_tests(report.get("tests", [])), lang))}</dd>',
            f'<dt>{esc(w["bonus"])}</dt><dd class="bonus">{bonus}</dd>']
    if report.get("tampering"):
        head.append(f'<dt>⚠</dt><dd><span class="badge warn">{esc(w["tampering"])}</span></dd>')
    if report.get("message"):
        head.append(f'<dt>{esc(w["run_error"])}</dt><dd class="msg">{esc(report["message"])}</dd>')
    head.append("</dl>")
    groups = group_tests(report)
    lessons = list(report.get("lessons", []))
    known = {lesson["id"] for lesson in lessons}
    lessons += [{"id": lid, "title": {}, "status": ""} for lid in groups if lid not in known]  # stray tests
    learner = report.get("source") != "reference"
    body = [render_lesson(lesson, groups.get(lesson["id"], []), lang, reference, learner) for lesson in lessons]
    if not body:
        body = [f'<p>{esc(w["no_checks"])}</p>']
    title = f'{w["run_title"]} — {report.get("source", "")}'
    return page(title, "\n".join(head + body), lang, extra_css=timelines.CSS)


def write_run(path: Path, report: dict, lang: str | None = None) -> None:
    """Write the page; a learner's timelines are drawn beside the reference's last recorded ones."""
    reference = timelines.reference_for(report) if report.get("source") != "reference" else None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_run(report, resolve_lang(lang), reference=reference), encoding="utf-8")
