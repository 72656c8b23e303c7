"""Draw a check's figures (shared/figures.py) as inline SVG and HTML, and keep the reference's for comparison.

Only the lane layout is drawn by hand: x is time, one row per lane, bars and marks placed on it.  Every
text is escaped; every element carries data- attributes, so a browser test can read what was drawn.
The reference's figures are kept after each reference run (STATE_DIR/figures/NN.json), so a report on a
learner's folder can show their timeline next to the reference's without running the reference again.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from checks.html_page import esc, page, pick, resolve_lang
from shared import figures as F
from shared.i18n import t_in

WIDTH, LABEL_W, LANE_H, AXIS_H, TOP = 760, 150, 24, 26, 8
COLOURS = {
    "run": "#4c78a8", "hold": "#2e9e4f", "wait": "#c9c9c9", "sleep": "#b7b7d8", "ok": "#2e9e4f", "fail": "#d23b3b",
    "retry": "#e08a00", "cancel": "#8a4fd0", "killed": "#000000", "lease": "#72b7b2", "deadline": "#d23b3b",
    "queued": "#bab0ac", "claim": "#54a24b", "event": "#4c78a8", "dead": "#6b3a3a", "replay": "#f58518",
    "fast": "#f58518", "bulk": "#4c78a8", "serial": "#9d755d", "pool": "#4c78a8", "other": "#888888",
}
CSS = """
figure.fig{margin:.5rem 0 .3rem 1.6rem}figure.fig figcaption{font-size:.85em;color:#444;margin:.15rem 0}
.figpair{display:grid;grid-template-columns:repeat(auto-fit,minmax(22rem,1fr));gap:.6rem;margin-left:1.6rem}
.figpair>div>h4{margin:.2rem 0;font-size:.85em;color:#555}.figpair figure.fig{margin-left:0}
svg.timeline{max-width:100%;height:auto;background:#fcfcfc;border:1px solid #e2e2e2}
svg.timeline text{font:11px system-ui,sans-serif;fill:#333}svg.timeline .axis line{stroke:#bbb}
.figscroll{overflow-x:auto;max-width:100%}table.figtable tr.failed td{color:#b00020;background:#fdecee;font-weight:600}
svg.timeline .lane-bg{fill:#f4f4f4}svg.timeline .limit{stroke:#d23b3b;stroke-dasharray:4 3}
table.figtable td,table.figtable th{font-size:.85em}.figlegend{font-size:.8em;color:#555}
.figlegend span{display:inline-block;width:.8em;height:.8em;margin:0 .2em 0 .6em;vertical-align:middle}
"""


# --- the reference's figures, kept for comparison ---------------------------------------------------

def _store() -> Path:
    from checks.workdir import STATE_DIR
    return STATE_DIR / "figures"


def save_reference(report: dict) -> None:
    """After a reference run: keep each check's figures, per lesson (regression re-runs are not kept)."""
    by_lesson: dict[str, dict] = {}
    for test in report.get("tests", []):
        if test.get("figures") and not test.get("regression"):
            by_lesson.setdefault(test["lesson"], {})[test["id"]] = test["figures"]
    for lesson_id, figs in by_lesson.items():
        path = _store() / f"{lesson_id}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        old = load_lesson(lesson_id)
        old.update(figs)  # a run of some checks keeps the others' last pictures
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(old, ensure_ascii=False), encoding="utf-8")
        tmp.replace(path)


def load_lesson(lesson_id: str) -> dict[str, list]:
    try:
        data = json.loads((_store() / f"{lesson_id}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: F.clean_all(v) for k, v in data.items()} if isinstance(data, dict) else {}


def reference_for(report: dict) -> dict[str, list]:
    """Check id -> the reference's figures, for every lesson in the report."""
    found: dict[str, list] = {}
    for lesson in report.get("lessons", []):
        found.update(load_lesson(lesson["id"]))
    return found


# --- drawing ------------------------------------------------------------------------------------------

def _ticks(span: float) -> list[float]:
    """About six round steps over 0..span."""
    if span <= 0:
        return [0.0]
    raw = span / 6
    step = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if raw <= step * factor:
            step *= factor
            break
    return [i * step for i in range(int(span / step) + 1)]


def render_lanes(fig: dict, lang: str) -> str:
    lanes = fig["lanes"]
    times = [b["end"] for ln in lanes for b in ln["bars"]] + [m["at"] for ln in lanes for m in ln["marks"]]
    times += [m["at"] for m in fig["lines"]]
    span = max(times + [0.001])
    plot_w = WIDTH - LABEL_W - 10
    height = TOP + LANE_H * len(lanes) + AXIS_H

    def x(sec: float) -> float:
        return LABEL_W + plot_w * max(0.0, sec) / span

    out = [f'<svg class="timeline" data-kind="lanes" data-lanes="{len(lanes)}" data-span="{span:.4f}" '
           f'viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img" '
           f'xmlns="http://www.w3.org/2000/svg"><title>{esc(pick(fig["title"], lang))}</title>']
    for i, ln in enumerate(lanes):
        y = TOP + i * LANE_H
        name = pick(ln["name"], lang)
        out.append(f'<g class="lane" data-lane="{esc(name)}"><rect class="lane-bg" x="{LABEL_W}" y="{y + 2}" '
                   f'width="{plot_w}" height="{LANE_H - 4}"/><text x="4" y="{y + LANE_H / 2 + 4}">{esc(name[:24])}'
                   f'</text>')
        for b in ln["bars"]:
            x0, x1 = x(b["start"]), x(b["end"])
            label = pick(b["label"], lang)
            out.append(f'<rect class="bar k-{b["kind"]}" data-kind="{b["kind"]}" data-start="{b["start"]}" '
                       f'data-end="{b["end"]}" data-label="{esc(label)}" x="{x0:.1f}" y="{y + 4}" '
                       f'width="{max(1.5, x1 - x0):.1f}" height="{LANE_H - 8}" fill="{COLOURS[b["kind"]]}" rx="2" '
                       f'stroke="#fff" stroke-width=".6">'
                       f'<title>{esc(label)} · {b["start"]:.3f}–{b["end"]:.3f} s</title></rect>')
        for m in ln["marks"]:
            cx = x(m["at"])
            label = pick(m["label"], lang)
            out.append(f'<path class="mark k-{m["kind"]}" data-kind="{m["kind"]}" data-at="{m["at"]}" '
                       f'data-label="{esc(label)}" d="M{cx:.1f},{y + 3} l5,-0 l-5,9 l-5,-9 z" '
                       f'fill="{COLOURS[m["kind"]]}" stroke="#fff" stroke-width=".6"><title>{esc(label)} · '
                       f'{m["at"]:.3f} s</title></path>')
        out.append("</g>")
    for m in fig["lines"]:
        lx = x(m["at"])
        label = pick(m["label"], lang)
        out.append(f'<g class="line" data-kind="{m["kind"]}" data-at="{m["at"]}"><line class="limit" x1="{lx:.1f}" '
                   f'x2="{lx:.1f}" y1="{TOP}" y2="{TOP + LANE_H * len(lanes)}"/><text x="{lx + 3:.1f}" y="{TOP + 9}">'
                   f'{esc(label)}</text><title>{esc(label)} · {m["at"]:.3f} s</title></g>')
    out.append(_axis(span, TOP + LANE_H * len(lanes), x))
    out.append("</svg>")
    return "".join(out) + _legend({b["kind"] for ln in lanes for b in ln["bars"]}
                                  | {m["kind"] for ln in lanes for m in ln["marks"]})


def _axis(span: float, y: float, x) -> str:
    parts = ['<g class="axis">']
    for tick in _ticks(span):
        tx = x(tick)
        parts.append(f'<line x1="{tx:.1f}" x2="{tx:.1f}" y1="{y}" y2="{y + 4}"/>'
                     f'<text x="{tx:.1f}" y="{y + 16}" text-anchor="middle">{tick:g} s</text>')
    return "".join(parts) + "</g>"


def _legend(kinds: set[str]) -> str:
    if not kinds:
        return ""
    return '<div class="figlegend">' + "".join(
        f'<span style="background:{COLOURS[k]}"></span>{esc(k)}' for k in F.KINDS if k in kinds) + "</div>"


def render_steps(fig: dict, lang: str) -> str:
    points = fig["points"]
    limit = fig.get("limit")
    span = max([p[0] for p in points] + [0.001])
    top = max([p[1] for p in points] + [limit or 0, 1])
    plot_w, plot_h = WIDTH - LABEL_W - 10, 120
    height = TOP + plot_h + AXIS_H

    def x(sec: float) -> float:
        return LABEL_W + plot_w * max(0.0, sec) / span

    peak = max([p[1] for p in points], default=0)
    # A high limit: the axis starts just below it, or one job past a limit of 100 would be one pixel.
    lo = max(0.0, min(limit, peak) - max(5.0, 0.05 * limit)) if limit is not None and limit >= 20 else 0.0

    def y(value: float) -> float:
        value = min(max(value, lo), top * 1.1)
        return TOP + plot_h - plot_h * (value - lo) / (top * 1.1 - lo)

    path, last = [], None
    for px, py in points:
        if last is not None:
            path.append(f"L{x(px):.1f},{y(last):.1f}")
        path.append(("M" if not path else "L") + f"{x(px):.1f},{y(py):.1f}")
        last = py
    limit_text = "" if limit is None else f"{limit:g}"
    out = [f'<svg class="timeline" data-kind="steps" data-max="{peak:g}" data-limit="{limit_text}" '
           f'viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img" '
           f'xmlns="http://www.w3.org/2000/svg"><title>{esc(pick(fig["title"], lang))}</title>',
           f'<text x="4" y="{TOP + 12}">{esc(pick(fig.get("label"), lang)[:24])}</text>',
           f'<text x="{LABEL_W - 4}" y="{y(top) + 4:.1f}" text-anchor="end">{top:g}</text>',
           f'<text x="{LABEL_W - 4}" y="{y(lo) + 4:.1f}" text-anchor="end">{lo:g}</text>']
    if limit is not None:
        out.append(f'<line class="limit" x1="{LABEL_W}" x2="{WIDTH - 10}" y1="{y(limit):.1f}" y2="{y(limit):.1f}"/>'
                   f'<text x="{LABEL_W + 4}" y="{y(limit) + 12:.1f}">limit {limit:g}</text>')
    if path:
        out.append(f'<path class="series" d="{" ".join(path)}" fill="none" stroke="#4c78a8" stroke-width="2"/>')
    if limit is not None and peak > limit:  # the finding itself, where the eye lands first
        at = next(px for px, py in points if py == peak)
        out.append(f'<circle class="over" cx="{x(at):.1f}" cy="{y(peak):.1f}" r="5" fill="#d23b3b"/>'
                   f'<text class="over" x="{x(at) - 8:.1f}" y="{y(peak) - 7:.1f}" text-anchor="end" fill="#d23b3b">'
                   f'{esc(t_in(lang, "peak {peak:g} > limit {limit:g}", peak=peak, limit=limit))}'
                   '</text>')
    out.append(_axis(span, TOP + plot_h, x))
    out.append("</svg>")
    return "".join(out)


def render_table(fig: dict, lang: str) -> str:
    head = "".join(f"<th>{esc(pick(c, lang))}</th>" for c in fig["columns"])
    failed = set(fig.get("failed") or [])
    rows = "".join(("<tr class=\"failed\">" if n in failed else "<tr>")
                   + "".join(f"<td>{esc(pick(v, lang))}</td>" for v in row) + "</tr>"
                   for n, row in enumerate(fig["rows"]))
    return (f'<div class="figscroll"><table class="figtable" data-kind="table" data-rows="{len(fig["rows"])}" '
            f'data-failed="{len(failed)}"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>')


RENDER = {"lanes": render_lanes, "steps": render_steps, "table": render_table}


def render_figure(fig: dict, lang: str) -> str:
    fig = F.clean(fig)
    if fig is None:
        return ""
    caption = pick(fig["title"], lang)
    extra = pick(fig.get("caption"), lang)
    return (f'<figure class="fig" data-type="{fig["type"]}"><figcaption><b>{esc(caption)}</b>'
            f'{" — " + esc(extra) if extra else ""}</figcaption>{RENDER[fig["type"]](fig, lang)}</figure>')


def render_check_figures(figs: list, reference: list | None, lang: str, *, learner: bool, lesson: str = "NN") -> str:
    """A check's figures; on a learner's folder, beside the reference's when it has been recorded."""
    figs = F.clean_all(figs)
    if not figs and not reference:
        return ""
    mine = "".join(render_figure(f, lang) for f in figs)
    if not learner:
        return f'<div class="figs" data-source="reference">{mine}</div>'
    yours, ref = t_in(lang, "your folder"), t_in(lang, "reference")
    if reference:
        theirs = "".join(render_figure(f, lang) for f in reference)
    else:
        theirs = '<p class="small">' + esc(t_in(lang, "The reference's timeline is not recorded yet: run make "
                                                "lesson-{lesson} once to compare.", lesson=lesson)) + "</p>"
    return (f'<div class="figpair"><div data-source="learner"><h4>{esc(yours)}</h4>{mine or "–"}</div>'
            f'<div data-source="reference"><h4>{esc(ref)}</h4>{theirs}</div></div>')


# --- the soak's page ----------------------------------------------------------------------------------

def soak_figures(record: dict, history: list[tuple[float, int]]) -> list[dict]:
    """The soak's ledger as a table, the backlog over time (from the monitor's feed) and the chaos as
    marks on one time axis."""
    from shared.figures import lane, lanes, mark, steps, table
    ledger = record.get("ledger", {})
    rows = [[key, json.dumps(value, ensure_ascii=False) if isinstance(value, (dict, list)) else value]
            for key, value in ledger.items() if not (isinstance(value, list) and not value)]
    rows += [["seed", record.get("seed")], ["seconds", record.get("seconds")], ["pass", record.get("pass")]]
    figs = [table("soak ledger", ["item", "value"], rows)]
    chaos = [c for c in record.get("chaos", []) if isinstance(c.get("at"), (int, float))]
    if not history:
        return figs
    # One time axis for both pictures: each figure starts at its earliest time, so both start at `start`.
    start = min([history[0][0], *(c["at"] for c in chaos)])
    points = ([(start, history[0][1])] if start < history[0][0] else []) + list(history)
    figs.append(steps("backlog: queued + running + unsent events", points, label="backlog"))
    if chaos:
        figs.append(lanes("chaos", [lane("chaos", marks=[
            mark(c["at"], f'{c["action"]}: {c.get("target", "")}', "killed" if "kill" in c["action"] else "retry")
            for c in chaos])], lines=[mark(start, "", "event"), mark(history[-1][0], "end", "event")]))
    return figs


def write_soak_page(path: Path, record: dict, history: list[tuple[float, int]], lang: str | None = None) -> None:
    lang = resolve_lang(lang)
    verdict = "PASS" if record.get("pass") else "FAIL"
    body = [f"<h1>Task Lab soak — {esc(verdict)}</h1>",
            f'<p>{esc(record.get("jobs_requested"))} jobs · seed {esc(record.get("seed"))} · '
            f'lost {esc(record.get("ledger", {}).get("lost"))}</p>']
    body += [render_figure(f, lang) for f in soak_figures(record, history)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page(f"Task Lab soak — {verdict}", "\n".join(body), lang, extra_css=CSS), encoding="utf-8")
