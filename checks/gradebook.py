"""A class's gradebook from its report dicts: index.html (students × lessons), a page per student and
grades.csv for an LMS.

    write_gradebook(out_dir, {"alice": report, ...}, manifest["lessons"])

Marks are the reports' own: a lesson's `score`/`max_score` is the course's (core + exercise) and
`bonus`/`max_bonus` the extensions, kept apart as everywhere in the kit.
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

from checks.html_page import MARKS, esc, page, pick, resolve_lang, words
from checks.html_report import group_tests, render_run
from checks.report import flaky_checks
from checks.results import NOT_PASSED
from shared.i18n import t_in

# Words in a check's message that say the folder or the lesson's files are absent (English and Chinese,
# since the runner writes messages in the grader's language).
ABSENT = ("missing", "not found", "no such", "不存在", "没有", "缺少", "缺失")

# Click a heading to sort its table; cells sort by data-sort when they have one.  Without JS the tables
# are simply in the order written (by student name; hardest checks first).
SORT_JS = """
function key(c){var v=c.getAttribute('data-sort');if(v===null)v=c.textContent.trim();
 var n=parseFloat(v);return isNaN(n)?[1,v.toLowerCase()]:[0,n];}
document.querySelectorAll('table.sortable').forEach(function(t){
 var hs=t.tHead.rows[0].cells;
 Array.prototype.forEach.call(hs,function(th,i){th.tabIndex=0;
  function go(){var asc=th.getAttribute('data-dir')!=='asc',b=t.tBodies[0];
   Array.prototype.forEach.call(hs,function(h){h.removeAttribute('data-dir');});
   th.setAttribute('data-dir',asc?'asc':'desc');
   var rows=Array.prototype.slice.call(b.rows);
   rows.sort(function(x,y){var a=key(x.cells[i]),c=key(y.cells[i]);
    var r=a[0]-c[0]||(a[1]<c[1]?-1:a[1]>c[1]?1:0);return asc?r:-r;});
   rows.forEach(function(r){b.appendChild(r);});}
  th.addEventListener('click',go);
  th.addEventListener('keydown',function(e){if(e.key==='Enter')go();});});});
"""


def page_names(names) -> dict[str, str]:
    """Student -> the stem of their page's file: grade's names ([\\w.-]) pass unchanged; anything else is
    made safe (it cannot leave out_dir) and kept unique."""
    stems: dict[str, str] = {}
    for name in sorted(names):
        safe = re.sub(r"[^\w.-]", "_", name) or "_"
        safe = "_" + safe if safe.startswith(".") else safe
        stem, n = safe, 1
        while stem.lower() in {s.lower() for s in stems.values()}:  # case-insensitive file systems too
            n += 1
            stem = f"{safe}-{n}"
        stems[name] = stem
    return stems


def not_reached(lesson: dict, tests: list[dict]) -> bool:
    """The student never got to this lesson (missing folder, the lesson's files absent): shown in grey,
    apart from a failure.  Every check error or skipped, nothing scored, and a message saying so."""
    own = [t for t in tests if not t.get("regression")] or tests
    if own and all(t.get("status") == "not_reached" for t in own):  # the grader found the lesson's files absent
        return True
    return (bool(own) and all(t.get("status") in ("error", "skipped") for t in own)
            and not lesson.get("score")
            and any(word in (t.get("message") or "").lower() for t in own for word in ABSENT))


def _columns(reports: dict[str, dict], lessons: list[dict]) -> list[dict]:
    """The lessons graded: the manifest's, in its order, that some report has (all when none has any),
    then any lesson a report has that the manifest does not."""
    seen = {lesson["id"]: lesson for r in reports.values() for lesson in r.get("lessons", [])}
    cols = [{"id": lesson["id"], "title": lesson.get("title", {})} for lesson in lessons if lesson["id"] in seen] or \
           [{"id": lesson["id"], "title": lesson.get("title", {})} for lesson in lessons]
    ids = {c["id"] for c in cols}
    return cols + [{"id": lid, "title": lesson.get("title", {})} for lid, lesson in seen.items() if lid not in ids]


def _cell(lesson: dict | None, tests: list[dict], w: dict) -> str:
    if lesson is None:
        return f'<td class="cell ng" data-sort="-2" title="{esc(w["not_graded"])}">—</td>'
    if not_reached(lesson, tests):
        return f'<td class="cell nr" data-sort="-1">{esc(w["not_reached"])}</td>'
    score, most = lesson.get("score", 0), lesson.get("max_score", 0)
    frac = score / most if most else 1.0
    # red (0) through amber to green (1): the fraction of the lesson's course marks
    style = f"background:hsl({round(120 * frac)},65%,82%)" if most else ""
    extra = []
    if lesson.get("bonus"):
        extra.append(f'+{lesson.get("bonus", 0)}')
    if any(t.get("regression") and t.get("status") in NOT_PASSED for t in tests):
        extra.append(f'<span class="badge warn" title="{esc(w["regression_failed"])}">R✗</span>')
    gone = sum(t.get("status") == "superseded" for t in tests)
    if gone:
        extra.append(f'<span class="small" title="{esc(w["superseded"])}">{MARKS["superseded"]}{gone}</span>')
    if any(t.get("tampering") for t in tests):
        extra.append(f'<span class="badge warn" title="{esc(w["tampering_short"])}">⚠</span>')
    tail = f' <span class="small">{" ".join(extra)}</span>' if extra else ""
    return f'<td class="cell" style="{style}" data-sort="{frac:.4f}">{score}/{most}{tail}</td>'


def _grid(names: list[str], reports: dict[str, dict], cols: list[dict], lang: str) -> str:
    w = words(lang)
    head = [f'<th>{esc(w["student"])}</th>', f'<th>{esc(w["status"])}</th>']
    head += [f'<th title="{esc(pick(c["title"], lang))}">{esc(c["id"])}</th>' for c in cols]
    head += [f'<th>{esc(w["total"])}</th>',
             f'<th title="{esc(w["self_reported_title"])}">{esc(w["self_reported"])}</th>',
             f'<th>{esc(w["bonus"])}</th>', f'<th>{esc(w["flags"])}</th>']
    rows, stems = [], page_names(names)
    for name in names:
        r = reports[name]
        by_id = {lesson["id"]: lesson for lesson in r.get("lessons", [])}
        groups = group_tests(r)
        flags = []
        if r.get("tampering"):
            flags.append(f'<span class="badge warn">{esc(w["tampering"])}</span>')
        bad = sorted({t["id"] for t in r.get("tests", []) if t.get("regression") and t.get("status") in NOT_PASSED})
        if bad:
            flags.append(f'<span class="badge warn">{esc(w["regression_failed"])}: {esc(", ".join(bad))}</span>')
        flaky = flaky_checks(r.get("tests", []))
        if flaky:
            flaky_text = t_in(lang, "flaky: {checks}", checks=", ".join(flaky))
            flags.append(f'<span class="badge warn">{esc(flaky_text)}</span>')
        gone = sum(t.get("status") == "superseded" for t in r.get("tests", []))
        if gone:
            flags.append(f'<span class="small">{MARKS["superseded"]} {esc(w["superseded"])}: {gone}</span>')
        status = r.get("status", "error")
        warn = ' <span class="badge warn">⚠</span>' if r.get("tampering") else ""
        total, most = r.get("score", 0), r.get("max_score", 0)
        cells = [f'<td data-sort="{esc(name.lower())}"><a href="{quote(stems[name])}.html">{esc(name)}</a>{warn}</td>',
                 f'<td class="st-{esc(status)}" data-sort="{esc(status)}"><span class="mark">'
                 f'{MARKS.get(status, "?")}</span>{esc(w.get(status, status))}</td>']
        cells += [_cell(by_id.get(c["id"]), groups.get(c["id"], []), w) for c in cols]
        own_word = r.get("self_reported_score", 0)
        cells += [f'<td class="num" data-sort="{total}"><b>{total}</b>/{most}</td>',
                  f'<td class="num" data-sort="{own_word}">{own_word}</td>',
                  f'<td class="num" data-sort="{r.get("bonus", 0)}">{r.get("bonus", 0)}/{r.get("max_bonus", 0)}</td>',
                  f'<td>{" ".join(flags)}</td>']
        mark = ' class="tampered"' if r.get("tampering") else ""
        rows.append(f'<tr{mark}>{"".join(cells)}</tr>')
    return (f'<table id="grid" class="sortable grid"><thead><tr>{"".join(head)}</tr></thead>\n<tbody>\n'
            + "\n".join(rows) + "\n</tbody></table>")


def hardest(reports: dict[str, dict]) -> list[dict]:
    """Per check (a regression re-run counted apart from the check in its own lesson): how many students
    did not pass it, by status, the most common message, how many had it superseded or did not reach it.
    Most missed first."""
    rows: dict[tuple, dict] = {}
    for name in sorted(reports):
        r = reports[name]
        by_id = {lesson["id"]: lesson for lesson in r.get("lessons", [])}
        for lid, tests in group_tests(r).items():
            absent = not_reached(by_id.get(lid, {}), tests)
            for t in tests:
                key = (t.get("id", ""), bool(t.get("regression")))
                row = rows.setdefault(key, {"id": key[0], "regression": key[1], "lesson": t.get("lesson"),
                                            "in": lid, "text": t.get("text"), "kind": t.get("kind"),
                                            "students": set(), "not_passed": {}, "messages": Counter(),
                                            "superseded": set(), "not_reached": set()})
                if absent:  # not reaching a lesson says nothing about how hard its checks are
                    row["not_reached"].add(name)
                    continue
                row["students"].add(name)
                status = t.get("status")
                if status == "superseded":
                    row["superseded"].add(name)
                elif status in NOT_PASSED and name not in row["not_passed"]:
                    row["not_passed"][name] = status  # one count per student, however often it ran
                    if t.get("message"):
                        row["messages"][t["message"]] += 1
    out = []
    for row in rows.values():
        statuses = Counter(row["not_passed"].values())
        common = row["messages"].most_common(1)
        out.append({"id": row["id"], "regression": row["regression"], "lesson": row["lesson"], "in": row["in"],
                    "text": row["text"], "kind": row["kind"], "count": len(row["not_passed"]),
                    "of": len(row["students"]), "fail": statuses["fail"], "error": statuses["error"],
                    "timeout": statuses["timeout"], "superseded": len(row["superseded"]),
                    "not_reached": len(row["not_reached"]), "message": common[0][0] if common else ""})
    return sorted(out, key=lambda h: (-h["count"], h["id"], h["regression"]))


def _hardest_table(rows: list[dict], lang: str) -> str:
    w = words(lang)
    shown = [h for h in rows if h["count"] or h["superseded"]]
    if not shown:
        return f'<p>{esc(w["nobody_failed"])}</p>'
    head = "".join(f"<th>{esc(x)}</th>" for x in (w["check"], w["text"], w["did_not_pass"], w["breakdown"],
                                                     MARKS["superseded"] + " " + w["superseded"],
                                                     w["not_reached"], w["common_message"]))
    body = []
    for h in shown:
        badges = ""
        if h["regression"]:
            badges += (f' <span class="badge warn">{esc(w["regression"])} · '
                       f'{esc(t_in(lang, "Lesson {id}", id=h["in"]))}</span>')
        if h["kind"] == "extension":
            badges += f' <span class="badge">{esc(w["bonus"])}</span>'
        message = h["message"] if len(h["message"]) <= 300 else h["message"][:299] + "…"
        body.append(f'<tr><td class="cid" data-sort="{esc(h["id"])}">{esc(h["id"])}{badges}</td>'
                    f'<td>{esc(pick(h["text"], lang))}</td>'
                    f'<td class="num" data-sort="{h["count"]}"><b>{h["count"]}</b>/{h["of"]}</td>'
                    f'<td class="num" data-sort="{h["count"]}">{h["fail"]} / {h["error"]} / {h["timeout"]}</td>'
                    f'<td class="num">{h["superseded"]}</td><td class="num">{h["not_reached"]}</td>'
                    f'<td>{esc(message)}</td></tr>')
    return (f'<table id="hardest" class="sortable"><thead><tr>{head}</tr></thead>\n<tbody>\n'
            + "\n".join(body) + "\n</tbody></table>" + f'<p class="small">{esc(w["hardest_note"])}</p>')


def render_index(reports: dict[str, dict], lessons: list[dict], lang: str) -> str:
    w = words(lang)
    names = sorted(reports)
    cols = _columns(reports, lessons)
    created = datetime.now(UTC).isoformat(timespec="seconds")
    body = [f'<h1>{esc(w["book_title"])}</h1>',
            f'<dl class="meta"><dt>{esc(w["created"])}</dt><dd>{esc(created)}</dd>'
            f'<dt>{esc(w["students"])}</dt><dd>{len(names)}</dd></dl>',
            f'<h2>{esc(w["grid"])}</h2>', f'<p class="small">{esc(w["legend"])} {esc(w["sort_hint"])}</p>',
            _grid(names, reports, cols, lang),
            f'<h2>{esc(w["hardest"])}</h2>', _hardest_table(hardest(reports), lang)]
    return page(w["book_title"], "\n".join(body), lang, SORT_JS)


def cell(value) -> object:
    """A CSV cell a spreadsheet reads as text, never a formula: a text starting with =, +, -, @, a tab or
    a carriage return gets a leading ' (OWASP's advice on CSV injection).  Numbers stay numbers."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def write_csv(path: Path, reports: dict[str, dict], lessons: list[dict]) -> None:
    """One row per student: the course score of each lesson, total, max_total, self_reported (how much of the
    total rests on checks whose evidence is self-reported), bonus.  Numbers only in
    the score columns (a lesson not graded or not reached is 0), so an LMS imports it as it is.  Graded N
    times (grade --repeat): a last column, flaky, lists the checks that passed only some runs (`04.1 13/20`)."""
    cols = _columns(reports, lessons)
    with open(path, "w", encoding="utf-8", newline="") as f:
        out = csv.writer(f)
        repeated = any(test.get("runs") for r in reports.values() for test in r.get("tests", []))
        out.writerow(["student", *(c["id"] for c in cols), "total", "max_total", "self_reported", "bonus",
                      *(["flaky"] if repeated else [])])
        for name in sorted(reports):
            r = reports[name]
            by_id = {lesson["id"]: lesson for lesson in r.get("lessons", [])}
            flaky = ["; ".join(flaky_checks(r.get("tests", [])))] if repeated else []
            out.writerow([cell(v) for v in [name, *(by_id.get(c["id"], {}).get("score", 0) for c in cols),
                                            r.get("score", 0), r.get("max_score", 0),
                                            r.get("self_reported_score", 0), r.get("bonus", 0), *flaky]])


def write_gradebook(out_dir: Path, reports: dict[str, dict], lessons: list[dict], lang: str | None = None) -> None:
    lang = resolve_lang(lang)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, stem in page_names(reports).items():
        (out_dir / f"{stem}.html").write_text(render_run(reports[name], lang, back="index.html"), encoding="utf-8")
    (out_dir / "index.html").write_text(render_index(reports, lessons, lang), encoding="utf-8")
    write_csv(out_dir / "grades.csv", reports, lessons)
