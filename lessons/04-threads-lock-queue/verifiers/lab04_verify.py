"""Verifier for lesson 04: two consumer threads, a bounded Queue and a short lock.

04.1  20 ids end as done 19 / failed 1, and errors is exactly [(7, "ValueError")]; then 4 threads take 200
      ids, every read and write of counts letting the other threads in: no increment may be lost
04.2  pending.join() returns and both consumers exit; `python threaded_queue.py` finishes by itself
04.3  the simulated work runs outside mutex: no sleep starts while its thread holds the lock, and the
      two threads are seen sleeping at the same time (each one's first sleep waits at a barrier that
      only opens when the other thread sleeps too)
04.4  exercise (the course's): the learner's own pending has capacity 1 and consume() waits 0.2 s per id;
      then the producer's put() finds that queue full and waits, and all 20 ids still settle.  Neither
      change made = not attempted

This process is the judge and never imports the learner's code: for each check lab04_learner.py loads a
fresh copy of threaded_queue.py in a probe (shared/probe.py; the demo sits under `if __name__ ==
"__main__"`), instruments it and drives consume() with its own producer, step by step.  The learner's own
main block runs once, as a subprocess, in 04.2.  Nothing is judged by the clock: a hang is proved from
the threads' stacks (lab04_stuck.py), wall times are evidence only, and every wait in the probe is bounded.
"""

from __future__ import annotations

import re
from pathlib import Path

from lab04_learner import BOUND, IDS, SCRIPT, SWITCH, WORKERS, total  # the probe's own numbers; how it adds counts
from lab04_stuck import STUCK_EXIT, describe
from shared import probe_report
from shared.i18n import t
from shared.logs import LOG_DIR
from shared.probe import LearnerRaised, Probe, shaped
from shared.tap import Check, run

HERE = Path.cwd()
QUICK = 20.0  # a probe call that only loads, sets up or reads
LONG = BOUND + 20.0  # a probe call that waits: its own wait is bounded by BOUND
learner = Probe()


def checks() -> list[Check]:
    return [
        Check("04.1", check_counts, "probe: threaded_queue (lab04_learner), then under contention (counts and mutex "
                                    "instrumented)"),
        Check("04.2", check_join_and_exit,
              "probe: threaded_queue (lab04_learner); python lab04_stuck.py threaded_queue.py"),
        Check("04.3", check_work_outside_lock, "probe: threaded_queue with mutex and time instrumented"),
        Check("04.4", check_put_waits, "probe: threaded_queue with pending and time instrumented"),
    ]


def ask(function: str, *args, timeout: float = QUICK, **kwargs) -> dict:
    """One step in the probe: its answer, a dict holding `keys` (any other shape fails the check)."""
    return learner.ask(f"lab04_learner:{function}", *args, timeout=timeout, **kwargs)


def crash_text(got: dict) -> str:
    """What escaped consume() and killed a consumer, as the step `got` saw it."""
    crashes = list(got.get("crashes") or [])
    return t("consumer crashed: {crashes}", crashes=crashes) if crashes else ""


def where(stuck) -> str:
    """Where each thread waits, from {name: [what, detail]} (lab04_stuck.deadlocked)."""
    if not isinstance(stuck, dict):
        return str(stuck or "")
    parts = []
    for name, fact in stuck.items():
        known = isinstance(fact, (list, tuple)) and len(fact) == 2 and isinstance(fact[0], str)
        parts.append(f"{name} {describe(*fact) if known else fact}")
    return "; ".join(parts)


def load():
    """A fresh copy of threaded_queue.py in the probe (its counters start at zero whatever an earlier check
    did): the capacity of its pending, as the probe read it."""
    assert (HERE / SCRIPT).exists(), t("{script} is missing (step 1)", script=SCRIPT)
    try:
        got = ask("load", keys=("missing", "capacity"))
    except LearnerRaised as exc:
        tail = "\n".join(exc.learner_traceback.strip().splitlines()[-4:])
        raise AssertionError(t("cannot import {script}: {type_name}: {exc}", script=SCRIPT, exc=exc,
                               type_name=exc.type_name)
                             + (f"\n{tail}" if tail else "")) from None
    missing = shaped("load", got, ok=isinstance(got["missing"], list))["missing"]
    assert not missing, t("{script} lacks the module-level names: {map}", script=SCRIPT,
                          map=', '.join(map(str, missing)))
    return got["capacity"]


def produce(ids) -> dict:
    """The probe's producer puts each id: what it saw.  A put that can never finish fails the check."""
    got = ask("produce", list(ids), timeout=LONG, keys=("finished", "stuck", "waits", "crashes", "found_full"))
    assert got["finished"] is True, t("the producer cannot put every id: {where}. {crash_text}",
                                      where=where(got["stuck"]) or t('still waiting'), crash_text=crash_text(got))
    return got


def run_consumers(counted: bool = True, **instruments) -> tuple[dict, dict, dict]:
    """WORKERS threads run the loaded copy's consume() in the probe (with the stand-ins `instruments` asks
    lab04_learner.start for); the probe's producer puts the IDS ids; when `counted`, wait until done + failed
    reaches IDS; then one None per consumer, and wait until they exit or are proved stuck.  The answers of
    the ids' puts, of the count (or None) and of the exit."""
    ask("start", **instruments)
    put = produce(range(IDS))
    counts = None
    if counted:
        counts = ask("wait_counted", timeout=LONG, keys=("counts", "elapsed", "crashes"))
        assert isinstance(counts["counts"], dict) and total(counts["counts"]) >= IDS, t(
            "done + failed did not reach {ids}: counts={counts}. Every id must end as done or failed. {crash_text}",
            ids=IDS, counts=counts["counts"], crash_text=crash_text(counts))
    produce([None] * WORKERS)
    return put, counts, ask("wait_exit", timeout=LONG, keys=("stuck", "alive", "crashes"))


def sleeps() -> tuple[dict, dict]:
    """The counts now, and what the module's sleeps did (lab04_learner.TimeSpy)."""
    seen = ask("observe", keys=("counts", "spy"))
    spy = seen["spy"]
    shaped("observe", seen, ok=isinstance(spy, dict) and all(key in spy for key in ("calls", "in_lock", "met", "total",
                                                                                   "asked")))
    return seen["counts"], spy


# ---------------------------------------------------------------- 04.1

def check_counts(c) -> None:
    load()
    run_consumers()  # 04.2 judges the exit; here it makes sure no late increment is still to come
    seen = ask("observe", snapshot=True, keys=("counts", "errors", "crashes"))
    counts, errors = seen["counts"], seen["errors"]
    c.note(f"counts={counts} errors={errors}")
    assert not seen["crashes"], crash_text(seen)
    assert isinstance(counts, dict) and counts.get("done") == IDS - 1 and counts.get("failed") == 1, t(
        "expected done 19 and failed 1, got {counts}: id 7 counts as failed only, the other 19 as done", counts=counts)
    as_tuples = [tuple(entry) if isinstance(entry, (list, tuple)) else entry for entry in errors] \
        if isinstance(errors, list) else errors
    assert as_tuples == [(7, "ValueError")], t("errors should be exactly [(7, 'ValueError')] (the id and the "
                                               "exception class name), got {errors!r}", errors=errors)
    check_no_lost_update(c)


def check_no_lost_update(c) -> None:
    """Rule 1 made visible: a fresh copy under contention (lab04_learner.contend), where each read and each write
    of counts lets the other threads in first.  An update outside mutex then loses increments
    every run; the counts the threads leave say so."""
    load()
    got = ask("contend", timeout=LONG, keys=("ids", "workers", "counts", "unlocked", "stuck", "crashes"))
    ids, workers, counts, unlocked = got["ids"], got["workers"], got["counts"], got["unlocked"]
    shaped("contend", got, ok=isinstance(counts, dict) and isinstance(unlocked, dict) and isinstance(ids, int))
    c.note(t("under contention: {workers} threads took {ids} ids from a filled queue, a thread switch allowed every "
             "{micro:g} µs and at every read and write of counts: counts={counts}", workers=workers, ids=ids,
             micro=SWITCH * 1e6, counts=counts))
    assert not got["crashes"], crash_text(got)
    assert not got["stuck"], t("the consumers did not exit after their None ({where}): consume() must return on None. "
                               "{crash_text}", where=where(got["stuck"]), crash_text=crash_text(got))
    summed = total(counts)
    if summed < ids:
        outside = "".join(t("{writes} writes to counts[{key!r}] ran in a thread that did not hold mutex. ",
                            writes=writes, key=key) for key, writes in sorted(unlocked.items()))
        raise AssertionError(t(
            "increments to counts were lost while several threads ran consume() at once: {workers} threads, {ids} "
            "ids, and done + failed = {summed} ({lost} lost). {outside}An update like counts['done'] += 1 outside "
            "with mutex is a read-modify-write two threads can interleave: both read the same value, both write it "
            "plus 1, and one increment is gone. Keep every counter update inside with mutex.", workers=workers,
            summed=summed, ids=ids, lost=ids - summed, outside=outside))
    assert counts.get("done") == ids - 1 and counts.get("failed") == 1, t(
        "under contention {ids} ids should end as done {done} and failed 1, got {counts}", ids=ids, done=ids - 1,
        counts=counts)


# ---------------------------------------------------------------- 04.2

def check_join_and_exit(c) -> None:
    load()
    _, _, left = run_consumers(counted=False)
    stuck, alive = left["stuck"], left["alive"]
    if stuck:
        c.note(t("after {workers} None stop signals, consumers still alive: {alive}: {where}", workers=WORKERS,
                 alive=alive, where=where(stuck)))
    else:
        c.note(t("after {workers} None stop signals, consumers still alive: {alive}", workers=WORKERS, alive=alive))
    assert not stuck, t("the consumers did not exit after their None ({where}): consume() must return on None. "
                        "{crash_text}", where=where(stuck), crash_text=crash_text(left))

    # Every consumer has returned: a get() that was not settled by now never will be, and Queue.join()
    # (which has no timeout) would wait for it forever.
    joined = ask("join", timeout=LONG, keys=("unfinished", "returned"))
    unsettled = joined["unfinished"]
    c.note(t("pending.unfinished_tasks={unsettled} once both consumers had returned", unsettled=unsettled))
    assert unsettled == 0, t("every id and None was taken and both consumers returned, yet {unsettled} get() calls "
                             "never had their task_done(): pending.join() would wait forever. Put task_done in "
                             "finally so the failure and None paths settle too.", unsettled=unsettled)
    assert joined["returned"] is True, t("pending.join() did not return")

    # The learner's own main block, under a watchdog: non-daemon threads, so the script ends only if
    # they all return; if they deadlock, the watchdog says where each one waits.
    ran = probe_report.run(["lab04_stuck.py", SCRIPT], LOG_DIR, "lab04_stuck", BOUND, HERE)
    assert ran.code is not None, t("python {script} did not finish within {bound:g} s (stopped). Output so far: "
                                   "{strip!r}", script=SCRIPT, bound=BOUND, strip=ran.output.strip()[-200:])
    assert not (ran.code == STUCK_EXIT and ran.report), t("python {script} never ends: {where}. Send one None per "
                                                          "thread and settle every get() with task_done().",
                                                          script=SCRIPT, where=where(ran.report))
    lines = [line for line in ran.output.splitlines() if line.strip()]
    c.note(t("python {script} -> exit {returncode}: {lines}", script=SCRIPT, returncode=ran.code, lines=lines[-3:]))
    assert ran.code == 0, t("python {script} exited {returncode}:\n{stdout}", script=SCRIPT, returncode=ran.code,
                            stdout=ran.output[-600:])
    printed = None
    for line in lines:
        match = re.search(r"'done':\s*(\d+),\s*'failed':\s*(\d+)", line)
        if match:
            printed = int(match.group(1)) + int(match.group(2))
    assert printed is not None, t("python {script} did not print counts (like {{'done': 19, 'failed': 1}})",
                                  script=SCRIPT)
    assert printed == IDS, t("the counts printed after join add up to {printed}, not {ids}: join returned before the "
                             "work settled", printed=printed, ids=IDS)


# ---------------------------------------------------------------- 04.3

def check_work_outside_lock(c) -> None:
    load()
    wall = run_consumers(track_lock=True, meet=True)[1]["elapsed"]
    spy = sleeps()[1]
    calls, in_lock, met, serial = spy["calls"], spy["in_lock"], spy["met"] is True, spy["total"]
    c.note(t("{workers} threads, {ids} ids: {calls} sleeps, {in_lock} while holding mutex; the two threads {value}",
             workers=WORKERS, ids=IDS, calls=calls, in_lock=in_lock,
             value=t('were sleeping at the same time (their first sleeps met at a barrier)') if met
             else t('never slept at the same time')))
    c.note(t("timings, recorded only: wall {wall:.2f}s, sleeps add up to {serial:.2f}s", wall=wall, serial=serial))
    assert calls >= IDS, t("each id should call time.sleep to simulate the work, but it was called {calls} times",
                           calls=calls)
    assert in_lock == 0, t("{in_lock} sleeps ran while their thread held mutex: move the slow work out of with mutex "
                           "and keep only the counter updates inside", in_lock=in_lock)
    assert met, t("the two threads were never sleeping at the same time: the first thread's sleep waited for the "
                  "other thread to sleep too, in vain (blocking inside another lock?)")


# ---------------------------------------------------------------- 04.4

def check_put_waits(c) -> None:
    own = load()
    one = own == 1
    # The learner's own pending, seen through a view that counts the puts finding it full.  With the
    # exercise's capacity, each consumer's sleep begins only once a put has found the queue full, so
    # back-pressure is certain however the threads are scheduled.  Any other capacity is judged by the
    # numbers alone, so nothing waits for a put that may never find the queue full.
    put, _, left = run_consumers(count_puts=True, gate_on_full=one)
    waits, held_back = put["waits"], put["found_full"]  # the ids' puts only, not the stop signals'
    shaped("produce", put, ok=isinstance(waits, list) and isinstance(held_back, int))
    counts, spy = sleeps()
    per_id = spy["asked"] / IDS
    c.note(t("your pending holds {own}; consume() waits {per_id:.2f}s per id ({calls} time.sleep calls)", own=own,
             per_id=per_id, calls=spy['calls']))
    if not one and per_id < 0.2 - 1e-9:
        c.skip(t("pending still holds {own} and each id still waits {per_id:.2f}s: exercise not attempted (capacity "
                 "1, and the consumers wait 0.2 s per id)", own=own, per_id=per_id))
    unbounded = isinstance(own, (int, float)) and own <= 0
    assert one, t("pending holds {own}; the exercise sets its capacity to 1{value}", own=own,
                  value=t(' (for queue.Queue, 0 means unbounded: put() never waits, so there is no back-pressure)')
                  if unbounded else '')
    assert per_id >= 0.2 - 1e-9, t("consume() waits only {per_id:.2f}s per id; the exercise makes it 0.2 s",
                                   per_id=per_id)
    c.note(t("{held_back} of {ids} puts found the queue full and waited, longest {max:.2f}s, total {sum:.2f}s "
             "(recorded only); counts={counts}", held_back=held_back, ids=IDS, max=max(waits, default=0.0),
             sum=sum(waits), counts=counts))
    assert held_back >= 1, t("with capacity 1 no put ever found the queue full: a full queue should hold the "
                             "producer back (back-pressure)")
    stuck = left["stuck"]
    assert not stuck, t("with capacity 1 all {ids} ids settled, but threads did not exit after their None: {where}",
                        ids=IDS, where=where(stuck))


if __name__ == "__main__":
    run(checks())
