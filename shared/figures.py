"""Evidence a check can draw: lanes over time, a count over time, a table.

A verifier attaches figures to a check with `c.figure(...)`; they travel with the check's result on the
verdict channel and the HTML report draws them (checks/timelines.py).  They are pictures of what the run
recorded, never part of a verdict: times from different processes are drawn side by side as recorded.

    c.figure(lanes(t("consumers and permits"),
                   [lane("consumer-1", bars=[bar(0.00, 0.31, "read 1", "hold")]),
                    lane("consumer-2", bars=[bar(0.02, 0.33, "read 2", "hold")],
                         marks=[mark(0.40, "cancelled", "cancel")])],
                   lines=[mark(0.15, "deadline", "deadline")]))
    c.figure(steps(t("queued + running"), [(0.0, 0), (0.2, 3), (1.4, 1)], limit=4))
    c.figure(table("failure matrix", ["row", "expected", "observed"], [["a", "succeeded", "succeeded"]]))

Times are seconds; each figure is shifted so it starts at 0.  `clean()` is the one validator: the runner
passes every figure through it, since code in the judged process could attach anything.
"""

from __future__ import annotations

import math

# Kinds colour bars and marks; anything else is drawn as "other".
KINDS = ("run", "hold", "wait", "sleep", "ok", "fail", "retry", "cancel", "killed", "lease", "deadline",
         "queued", "claim", "event", "dead", "replay", "fast", "bulk", "serial", "pool", "other")
MAX_LANES, MAX_ITEMS, MAX_ROWS, MAX_COLUMNS, MAX_POINTS, MAX_TEXT = 40, 2000, 200, 16, 2000, 200
MAX_FIGURES = 8  # per check


def bar(start: float, end: float, label: str = "", kind: str = "run") -> dict:
    return {"start": float(start), "end": float(end), "label": str(label), "kind": kind}


def mark(at: float, label: str = "", kind: str = "event") -> dict:
    return {"at": float(at), "label": str(label), "kind": kind}


def lane(name: str, bars: list[dict] = (), marks: list[dict] = ()) -> dict:
    return {"name": str(name), "bars": list(bars), "marks": list(marks)}


def lanes(title, lanes_: list[dict], *, lines: list[dict] = (), caption=None) -> dict:
    """Rows of bars over time.  `lines`: vertical lines across every lane (a deadline, a kill)."""
    return _shift({"type": "lanes", "title": title, "caption": caption, "lanes": list(lanes_), "lines": list(lines)})


def steps(title, points: list[tuple[float, float]], *, limit: float | None = None, label: str = "",
          caption=None) -> dict:
    """A count over time, drawn as a step line; `limit` as a dashed ceiling (e.g. an admission limit)."""
    fig = {"type": "steps", "title": title, "caption": caption, "label": str(label),
           "points": [[float(x), float(y)] for x, y in points], "limit": limit}
    return _shift(fig)


def table(title, columns: list[str], rows: list[list], caption=None, failed: list[int] = ()) -> dict:
    """`failed`: the indices of rows that show a failure (drawn so the eye finds them first)."""
    return {"type": "table", "title": title, "caption": caption, "columns": [str(c) for c in columns],
            "rows": [["" if v is None else str(v) for v in row] for row in rows], "failed": list(failed)}


def _times(fig: dict) -> list[float]:
    if fig["type"] == "lanes":
        found = [b["start"] for ln in fig["lanes"] for b in ln["bars"]]
        found += [m["at"] for ln in fig["lanes"] for m in ln["marks"]] + [m["at"] for m in fig["lines"]]
        return found
    return [p[0] for p in fig.get("points", [])]


def _shift(fig: dict) -> dict:
    """Make the figure start at 0 (wall-clock or monotonic times come in; only differences matter)."""
    times = [x for x in _times(fig) if math.isfinite(x)]
    origin = min(times) if times else 0.0
    if fig["type"] == "lanes":
        for ln in fig["lanes"]:
            for b in ln["bars"]:
                b["start"], b["end"] = b["start"] - origin, b["end"] - origin
            for m in ln["marks"]:
                m["at"] -= origin
        for m in fig["lines"]:
            m["at"] -= origin
    else:
        fig["points"] = [[x - origin, y] for x, y in fig["points"]]
    return fig


# --- the validator ------------------------------------------------------------------------------------

def _text(value) -> str | dict:
    """A label: a string, or {"zh","en"} texts (as t() gives before a language is picked)."""
    if isinstance(value, dict):
        return {k: str(value.get(k, ""))[:MAX_TEXT] for k in ("zh", "en") if k in value}
    return "" if value is None else str(value)[:MAX_TEXT]


def _num(value) -> float:
    number = float(value)
    if not math.isfinite(number) or abs(number) > 1e7:
        raise ValueError("number out of range")
    return round(number, 4)


def _kind(value) -> str:
    return value if value in KINDS else "other"


def clean(fig) -> dict | None:
    """A figure with only known fields, bounded sizes and plain values; None if it is not one."""
    try:
        kind = fig["type"]
        out = {"type": kind, "title": _text(fig.get("title")), "caption": _text(fig.get("caption"))}
        if kind == "lanes":
            items = 0
            out["lanes"] = []
            for ln in list(fig["lanes"])[:MAX_LANES]:
                bars = [{"start": _num(b["start"]), "end": max(_num(b["end"]), _num(b["start"])),
                         "label": _text(b.get("label")), "kind": _kind(b.get("kind"))} for b in ln.get("bars", [])]
                marks = [{"at": _num(m["at"]), "label": _text(m.get("label")), "kind": _kind(m.get("kind"))}
                         for m in ln.get("marks", [])]
                items += len(bars) + len(marks)
                if items > MAX_ITEMS:
                    return None
                out["lanes"].append({"name": _text(ln.get("name")), "bars": bars, "marks": marks})
            out["lines"] = [{"at": _num(m["at"]), "label": _text(m.get("label")), "kind": _kind(m.get("kind"))}
                            for m in list(fig.get("lines", []))[:20]]
        elif kind == "steps":
            out["points"] = [[_num(x), _num(y)] for x, y in list(fig["points"])[:MAX_POINTS]]
            out["limit"] = None if fig.get("limit") is None else _num(fig["limit"])
            out["label"] = _text(fig.get("label"))
        elif kind == "table":
            out["columns"] = [_text(c) for c in list(fig["columns"])[:MAX_COLUMNS]]
            out["rows"] = [[_text(v) for v in list(row)[:MAX_COLUMNS]] for row in list(fig["rows"])[:MAX_ROWS]]
            out["failed"] = sorted({int(i) for i in list(fig.get("failed") or [])[:MAX_ROWS]
                                    if isinstance(i, int) and 0 <= i < len(out["rows"])})
        else:
            return None
        return out
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def clean_all(figs) -> list[dict]:
    if not isinstance(figs, list):
        return []
    return [f for f in (clean(x) for x in figs[:MAX_FIGURES]) if f is not None]


def attach(check, build) -> None:
    """Attach the figure (or list of figures) `build()` returns to a check.  Drawing never decides a
    verdict: a build that fails, because the run recorded less than expected, is simply left out."""
    try:
        made = build()
    except Exception:  # noqa: BLE001 - a picture that cannot be drawn is not a finding
        return
    for fig in made if isinstance(made, list) else [made]:
        if fig is not None:
            check.figure(fig)
