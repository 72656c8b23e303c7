"""The one way a verifier reports: TAP lines, one per check item.

    tap = Tap()
    with tap.check("01.1"):
        assert response.status_code == 202, t("expected 202, got {status}", status=response.status_code)
    with tap.check("01.5") as c:
        if "terminal" not in body:
            c.skip(t("exercise not attempted"))
    raise SystemExit(tap.finish())

Messages are written in English, t("English {name}", name=value); their Chinese is in the lesson's
verifiers/zh.po (see shared/i18n.py).

A run can ask for some checks only (TASKLAB_CHECKS=11.2,11.5, set by the runner for mutant
tests): each check's body starts with `c.skip_unless_selected()`, so the others cost nothing.
Checks therefore never depend on what an earlier check left behind: a run several of them read is made
by the first that needs it and kept, its failure too (`@once`).

Each check prints `ok N - ID text` or `not ok N - ID text`, then `# ` lines:
the reason, then `# seconds: S`.  A failed assert is the reason; any other
exception is reported with the last lines of its traceback.  Either way, an
error it replaced (a learner error or finding that a failing clean-up in a
`finally` hid) is shown too, oldest first.  The runner reads these lines; a
check the verifier never printed counts as ERROR there.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import signal
import sys
from pathlib import Path
import time
import traceback

from shared import proc
from shared.i18n import pick, t
from shared.manifest import check_texts


START_MARK = "@@ start"  # not a TAP line and not a diagnostic: see checks.runner


class Because(AssertionError):
    """A finding that knows its cause: the diagnosis, and the hint for that cause, which the learner reads in
    place of the check's general hint in tasks.json (written for the check's usual cause, it may be about
    another).  Both are said in the run's language: `raise Because(t("…"), t("…"))`."""

    def __init__(self, message: str, hint: str):
        super().__init__(message)
        self.hint = hint


class Skipped(Exception):
    """Raised inside a check to report it as skipped (e.g. an exercise not attempted)."""


class _Check:
    def __init__(self, tap: Tap, check_id: str):
        self.tap, self.id = tap, check_id
        self.notes: list[str] = []
        self.figures: list[dict] = []

    def figure(self, fig: dict) -> None:
        """A picture of the evidence (shared/figures.py), drawn in the HTML report; never a verdict."""
        self.figures.append(fig)

    def note(self, line: str) -> None:
        """Evidence to print under the check's line, pass or fail."""
        self.notes.append(str(line))

    def note_lines(self, lines, last: int | None = None) -> None:
        """Note what a run printed, each line indented two spaces under the note that introduces it: the
        last `last` lines of `lines` (a text or a list of lines; all of them when None)."""
        lines = lines.splitlines() if isinstance(lines, str) else list(lines)
        for line in lines[-last:] if last else lines:
            self.note("  " + line)

    def skip(self, reason: str):
        raise Skipped(reason)

    def skip_unless_selected(self) -> None:
        """Skip this check when the run asked for other checks only (see TASKLAB_CHECKS above)."""
        selected = os.environ.get("TASKLAB_CHECKS")
        if selected and self.id not in selected.split(","):
            raise Skipped("not selected")

    def __enter__(self):
        # Tell the runner which check is under way: it gives each check its own time limit.
        print(f"{START_MARK} {self.id}", flush=True)
        if _channel is not None:
            _channel.send({"type": "start", "id": self.id})
        self.started = time.monotonic()
        return self

    def __exit__(self, exc_type, exc, tb):
        seconds = time.monotonic() - self.started
        if exc_type is None:
            self.tap._emit(True, self.id, None, self.notes, seconds, self.figures)
        elif exc_type is Skipped:
            self.tap._emit(True, self.id, f"SKIP {exc}", self.notes, seconds)
        elif issubclass(exc_type, AssertionError) and _raised_here(tb) and not hasattr(exc, "learner_traceback"):
            reason = str(exc) or t("assertion failed")
            replaced = _error_lines(exc) if len(_chain(exc)) > 1 else []  # its own words are the reason
            self.tap._emit(False, self.id, None, [reason, *self.notes, *replaced], seconds, self.figures,
                           exc.hint if isinstance(exc, Because) else None)
        elif issubclass(exc_type, Exception):
            reason = t("unexpected error: ") + f"{exc_type.__name__}: {exc}"
            self.tap._emit(False, self.id, None, [reason, *self.notes, *_error_lines(exc)], seconds, self.figures)
        else:
            return False  # KeyboardInterrupt/SystemExit: let them end the verifier
        return True


def _traceback_end(exc: BaseException) -> list[str]:
    """The last lines of an error's traceback: for one raised by learner code in a probe
    (shared/probe.LearnerRaised) the learner's own traceback, not the probe's."""
    lines = getattr(exc, "learner_traceback", "") or "".join(traceback.format_exception(exc))
    return lines.rstrip().splitlines()[-6:]


MAX_REPLACED = 9  # replaced errors shown, the oldest: nested clean-ups in lesson 07 go five deep


def _chain(exc: BaseException) -> list[BaseException]:
    """The error and, newest first, the errors it replaced: each `__context__` (unless `raise ... from None`)
    that is a learner error or the checker's own finding.  Other links (what a library caught and turned into
    the next error) are passed through, not shown."""
    chain, walked, link = [exc], [exc], exc
    while not link.__suppress_context__ and link.__context__ is not None and len(walked) < 100:
        link = link.__context__
        if any(link is seen for seen in walked):  # a cycle: each error once
            break
        walked.append(link)
        if hasattr(link, "learner_traceback") or isinstance(link, AssertionError):
            chain.append(link)
    return [exc, *chain[1:][-MAX_REPLACED:]]


def _error_lines(exc: BaseException) -> list[str]:
    """What a failed check prints under its notes: the end of each error's traceback, oldest first — one
    raised in a `finally` (a probe's clean-up asked while the first error was on its way out) hides the first,
    which is usually the cause."""
    lines: list[str] = []
    for error in reversed(_chain(exc)):
        if lines:
            lines.append(t("while that error was handled, another was raised:"))
        lines += _traceback_end(error)
    return lines


def _raised_here(tb) -> bool:
    """True when the failed assert is the checker's own — the verifier, a helper module of the kit's beside
    it (lab11_fixture.py: laid over the folder from the kit, read-only), or shared/ — not one inside the
    learner's code.  The checker's own assert is a finding, said as it is; the learner's is an error."""
    while tb.tb_next is not None:
        tb = tb.tb_next
    where = Path(tb.tb_frame.f_code.co_filename).resolve()
    verifier = Path(sys.argv[0]).resolve()
    return where == verifier or where.parent == _SHARED or (
        where.parent == verifier.parent and where.name in _kit_verifier_names())


_SHARED = Path(__file__).resolve().parent


@functools.lru_cache(maxsize=1)
def _kit_verifier_names() -> frozenset[str]:
    from shared.manifest import kit_verifier_files
    return frozenset(kit_verifier_files())


EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception)(:.*)?$")  # `TypeError: ...` ends a traceback


def exception_lines(output: str) -> list[str]:
    """The lines of a learner process's output that end a traceback, stripped, in order: how a check names
    the error a learner's script or server stopped with (lessons 01 and 03)."""
    return [line.strip() for line in output.splitlines() if EXCEPTION_LINE.match(line.strip())]


class Tap:
    def __init__(self):
        self.count = 0
        self.failed = 0
        self._texts = check_texts()

    def check(self, check_id: str) -> _Check:
        return _Check(self, check_id)

    def _emit(self, ok: bool, check_id: str, directive, notes, seconds: float, figures=(), hint=None) -> None:
        self.count += 1
        self.failed += 0 if ok else 1
        entry = self._texts.get(check_id)
        text = pick(entry["text"]) if entry else ""
        line = f"{'ok' if ok else 'not ok'} {self.count} - {check_id} {text}".rstrip()
        if directive:
            line += f" # {directive}"
        print(line)
        for note in notes:
            for part in str(note).splitlines() or [""]:
                print(f"# {part}")
        if hint:
            print(f"# hint: {hint}")
        print(f"# seconds: {seconds:.3f}", flush=True)
        if _channel is not None:
            skipped = bool(directive) and directive.startswith("SKIP")
            _channel.send({"type": "result", "id": check_id, "notes": [str(n) for n in notes],
                           "status": "skipped" if skipped else "pass" if ok else "fail",
                           "message": directive[len("SKIP "):] if skipped else "",
                           "seconds": round(seconds, 3), "figures": _portable(figures), "intact": _intact(),
                           **({"hint": hint} if hint else {})})

    def finish(self) -> int:
        print(f"1..{self.count}", flush=True)
        return 1 if self.failed else 0


def _portable(figures) -> list:
    """The figures as JSON can carry them; one that cannot be sent is left out (it is only a picture)."""
    import json
    kept = []
    for fig in list(figures)[:8]:
        try:
            if len(json.dumps(fig)) <= 256_000:
                kept.append(fig)
        except (TypeError, ValueError):
            pass
    return kept


# --- the verdict channel (checks/verdicts.py) ----------------------------------------------------
# Installed by checks/launch.py before any learner code is imported; the stdout lines above are for
# people, the channel's signed records are what the runner believes.
_channel = None


def install_channel(signer, learner_folder: Path | None = None) -> None:
    global _channel, _ORIGINALS, _learner_folder
    _channel = signer
    _ORIGINALS = _snapshot()
    _learner_folder = learner_folder


_learner_folder: Path | None = None  # a judge (checks/judge.py) never has a module from here loaded


def _snapshot() -> tuple:
    return (_Check.__enter__, _Check.__exit__, _Check.skip_unless_selected, Tap._emit, Tap.check, Tap.finish,
            _raised_here, _Check.__exit__.__code__, Tap._emit.__code__, _raised_here.__code__)


_ORIGINALS: tuple = ()


def _intact() -> bool:
    """Are the checker's own functions still the ones it started with?  Code imported into the verifier
    could replace them; a replaced one makes the verdict worthless (the runner reports tampering)."""
    now = _snapshot()
    same = len(now) == len(_ORIGINALS) and all(a is b for a, b in zip(now, _ORIGINALS, strict=True))
    return same and not (_learner_folder and _learner_modules(_learner_folder))


def _learner_modules(folder: Path) -> list[str]:
    root = str(folder) + os.sep
    return [name for name, module in list(sys.modules.items())
            if str(getattr(module, "__file__", "") or "").startswith(root)]


def main_guard(run) -> None:
    """Run a verifier's main(tap) and exit with its TAP status."""
    # The runner stops a verifier that overruns with SIGTERM: turn it into SystemExit so
    # `with` blocks and atexit handlers stop the servers the verifier started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if sys.flags.optimize:
        # -O or PYTHONOPTIMIZE strips every assert, and asserts are how checks fail: refuse to judge.
        print("Bail out! " + t("a verifier must not run optimised (-O / PYTHONOPTIMIZE): asserts would vanish"),
              flush=True)
        sys.exit(2)
    tap = Tap()
    run(tap)
    sys.exit(tap.finish())


# --- the harness: a verifier is a table of checks -------------------------------------------------

class Check:
    """One row of a verifier's table: the check's id, the function that proves it (named for what it
    proves, taking the check `c`), and what it needs — servers, processes, the learner modules a probe
    loads — said for the reader.  Its time limit lives in tasks.json, with the rest of the check."""

    def __init__(self, id: str, prove, needs: str = ""):  # noqa: A002 - the manifest's word
        self.id, self.prove, self.needs = id, prove, needs


def run(checks: list[Check], around=None, setup=None, teardown=None, skip_all: str | None = None) -> None:
    """A verifier's whole main: the table checked against tasks.json (every check of this verifier there,
    nothing else), then each check in order, with selection and skipping; exits with the TAP status.
    `around()`: a context entered around each check's body (a lesson's way of explaining one known error);
    `setup()`: called once before the first check (starting what every check shares); `teardown()`: called
    once at the end, however setup and the checks went (stopping what the lesson started).
    `skip_all`: every check is skipped with this reason, selected or not (an extension not taken up).
    `labNN_verify.py --list` prints the table's ids as JSON and runs nothing (tests read it)."""
    if sys.argv[1:] == ["--list"]:
        print(json.dumps([row.id for row in checks]))
        sys.exit(0)
    def every_check(tap: Tap) -> None:
        mine = Path(sys.argv[0]).name
        planned = [c["id"] for c in tap._texts.values() if c.get("verifier") == mine]
        listed = [c.id for c in checks]
        if tap._texts and sorted(listed) != sorted(planned):
            print(f"Bail out! {mine}: the table lists {listed}, tasks.json {planned}", flush=True)
            sys.exit(2)
        if skip_all is not None:
            for row in checks:
                with tap.check(row.id) as c:
                    c.skip(skip_all)
            return
        try:
            if setup:
                setup()
            for row in checks:
                with tap.check(row.id) as c, (around() if around else contextlib.nullcontext()):
                    c.skip_unless_selected()
                    row.prove(c)
        finally:
            proc.verdicts_given()
            if teardown:
                teardown()
    main_guard(every_check)


def once(make):
    """A run several checks read: made at the first call (for each set of arguments), then kept -- its answer,
    or the error it failed with, raised again in every later call, so each check that needs the run fails
    alike and the run is not repeated."""
    kept: dict[tuple, tuple[bool, object]] = {}  # arguments -> (made, the answer or the error)

    @functools.wraps(make)
    def kept_run(*args, **kwargs):
        key = (args, tuple(sorted(kwargs.items())))
        if key not in kept:
            try:
                kept[key] = (True, make(*args, **kwargs))
            except Exception as exc:  # noqa: BLE001 - kept for the next check, raised to this one below
                kept[key] = (False, exc)
        made, value = kept[key]
        if not made:
            raise value
        return value
    return kept_run
