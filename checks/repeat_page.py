"""A series' table as one self-contained HTML page (checks/repeat.py): per check, its verdict and counts
(repeat.classify and repeat.counts_text, as in the terminal and repeat.json), its distinct failures with
their runs; for a flaky check, one failing run beside one passing run, each drawn as the run's own report
draws it (message, notes), and under them the two runs' timelines in two columns, each headed by its run
and status, drawn by checks/timelines.py as a lesson's report draws them.  The figures are the runs' own
(each run's report keeps its checks' figures: repeat.read_report); only the two runs shown are drawn."""

from __future__ import annotations

from pathlib import Path

from checks import timelines
from checks.html_page import esc, page, pick, resolve_lang, words
from checks.html_report import output_tail, render_check, status_label
from shared import figures as F
from shared.i18n import t

CSS = """
table.tally{border-collapse:collapse;margin:.6rem 0}
table.tally td,table.tally th{border:1px solid #ddd;padding:.25rem .5rem;
 vertical-align:top;text-align:left}tr.flaky td:first-child{border-left:4px solid #c77700}
tr.failed td:first-child{border-left:4px solid #b3261e}tr.partial td:first-child{border-left:4px solid #8a6d00}
tr.passed td:first-child{border-left:4px solid #1a7f37}
.fmsg{white-space:pre-wrap}.pair{display:grid;grid-template-columns:1fr 1fr;gap:1rem}.pair h4{margin:.3rem 0}
.pair ul{padding-left:1rem}
.runfigs{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:1rem;margin:.4rem 0 1rem}
.runfigs>div{min-width:0}.runfigs>div>h4{margin:.2rem 0}.runfigs figure.fig{margin-left:0}
.runfigs>div[data-status=pass]>h4{color:#1a7f37}.runfigs>div:not([data-status=pass])>h4{color:#b3261e}
"""


def kind_words() -> dict[str, str]:
    return {"flaky": t("flaky in your code"), "failed": t("failed every run"),
            "partial": t("attempted in some runs only"), "passed": t("passed every run"),
            "skipped": t("not attempted")}


def runs_text(failure) -> str:
    text = t("runs {runs}", runs=", ".join(map(str, failure.runs)))
    if len(failure.wordings) > 1:
        text += " · " + t("{n} wordings (numbers differ)", n=len(failure.wordings))
    return text


def evidence(test: dict, lang: str) -> str:
    """One run's check as its report draws it; a passing run's notes too (a report shows them only under
    a failure), since they are what the failing run is compared with."""
    passed_with_output = test.get("status") == "pass" and test.get("output")
    notes = f"<pre>{esc(output_tail(test['output']))}</pre>" if passed_with_output else ""
    without_figures = {key: value for key, value in test.items() if key != "figures"}  # drawn in run_timelines
    return f"<ul class='checks'>{render_check(without_figures, lang)}</ul>{notes}"


def run_timelines(check_id: str, shown: list[tuple[int, dict]], lang: str) -> str:
    """The runs' figures side by side: one column per run, headed by its number and status, each figure
    drawn by timelines.render_figure (the lesson report's drawing).  Nothing when neither run has one."""
    drawn = [(number, test, "".join(timelines.render_figure(f, lang) for f in F.clean_all(test.get("figures"))))
             for number, test in shown]
    if not any(figs for _, _, figs in drawn):
        return ""
    w = words(lang)
    columns = "".join(
        f"<div data-run='{number}' data-status='{esc(test.get('status', 'error'))}'>"
        f"<h4>{esc(t('run {n}', n=number))} · {status_label(test.get('status', 'error'), w)}</h4>"
        f"{figs or '<p class=small>' + esc(t('no timeline recorded in this run')) + '</p>'}</div>"
        for number, test, figs in drawn)
    return (f"<h3>{esc(t('timelines: the failing run beside the passing run'))}</h3>"
            f"<div class='runfigs' data-check='{esc(check_id)}'>{columns}</div>")


def render(series, rows, lang: str) -> str:
    words = kind_words()
    source = str(series.lab) if series.lab else t("the reference")
    title = t("Task Lab: {times} runs of lesson {lessons}", times=series.times, lessons=", ".join(series.lessons))
    how = t("{parallel} side by side, {burn} CPU burners, seed {seed}", parallel=series.parallel, burn=series.burn,
            seed=series.seed)
    done = t("{done} of {planned} runs finished", done=len(series.runs), planned=series.planned)
    head = [f"<h1>{esc(title)}</h1>", f"<p>{esc(source)} · {esc(how)} · {esc(done)}</p>"]
    if series.stopped:
        head.append(f"<p class='msg'>{esc(t('stopped part-way: the table counts the finished runs only'))}</p>")
    table = [f"<table class='tally'><tr><th>{esc(t('check'))}</th><th>{esc(t('verdict'))}</th>"
             f"<th>{esc(t('runs'))}</th><th>{esc(t('failures (how often, which runs)'))}</th></tr>"]
    for row in rows:
        failures = "".join(f"<div>{len(f.runs)}× <span class='fmsg'>{esc(f.message.strip())}</span> "
                           f"<span class='secs'>{esc(runs_text(f))}</span></div>"
                           for f in sorted(row.failures.values(), key=lambda f: -len(f.runs)))
        name = row.id + (f" ({t('regression')})" if row.regression else "")
        table.append(f"<tr class='{row.kind}'><td><b>{esc(name)}</b> {esc(pick(row.text, lang))}</td>"
                     f"<td>{esc(words[row.kind])}</td><td>{esc(row.counts)}</td><td>{failures}</td></tr>")
    table.append("</table>")
    pairs = []
    for row in rows:
        if row.kind != "flaky":
            continue
        bad_no, good_no = row.failed[0], row.passed[0]
        compared = t("run {bad_no} failed, run {good_no} passed", bad_no=bad_no, good_no=good_no)
        pairs.append(f"<h2>{esc(row.id)} — {esc(compared)}</h2>"
                     "<div class='pair'>"
                     f"<div><h4>{esc(t('run {n}', n=bad_no))} ✗</h4>{evidence(row.tests[bad_no], lang)}</div>"
                     f"<div><h4>{esc(t('run {n}', n=good_no))} ✓</h4>{evidence(row.tests[good_no], lang)}</div>"
                     "</div>"
                     + run_timelines(row.id, [(bad_no, row.tests[bad_no]), (good_no, row.tests[good_no])], lang))
    title = t("Task Lab: repeated runs")
    return page(title, "\n".join(head + table + pairs), lang, extra_css=timelines.CSS + CSS)


def write(path: Path, series, rows, lang: str | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(series, rows, resolve_lang(lang)), encoding="utf-8")
