"""Verifier for lesson 02: bounded concurrency with asyncio (bounded_async.py) and the asyncio note's scripts.

02.1  the normal batch: collect_products returns 20 rows keyed by the right ids, main() prints completed 20,
      four consumers took from the queue and each cleaned up once
02.2  at most, and at least once exactly, two reads run at once; every queue created has maxsize 4; no read
      keeps the event loop from running
02.3  a 0.15 s budget: asyncio.timeout was asked for, batch timed out is printed, no partial result, every
      consumer cleans up
02.4  a ValueError on item 3 fails collect_products with an ExceptionGroup, nothing completed is printed,
      every consumer cleans up
02.5  exercise: a number of bounded_async's own follows the reads really running and another their peak
      (≤ 2), on the normal and the timeout path, the count back at 0 (no such number = not attempted)
02.6  asyncio_timeout_demo.py: a budget really expires, the cleanup line is printed while its task is
      cancelled, and the result is quote:degraded
02.7  experiment_relaxed.py: a budget ends in time, nothing is asked to cancel, result: quote:100
02.8  experiment_swallow.py: a budget asks its work to cancel, the work returns a value instead, and
      wait_for hands that value back
02.9  experiment_taskgroup.py: a TaskGroup ends with an ExceptionGroup holding the ValueError and its sibling
      is cancelled, printing its cleanup
02.10 experiment_shield.py: the shielded task still runs when the outer budget expires, and the script
      cancel()s it afterwards and waits for it

02.1–02.5 run the learner's bounded_async.main() in a child process (lab02_learner.py, a "probe"; see there),
one per scenario: normal, a 0.15 s budget, and a ValueError on item 3.  It reports facts: reads running at
once, the queue's sizes, what collect_products and main() did, a stall, a consumer that swallowed its
cancellation, reads that never gave the loop back, and how the module's own numbers moved with the reads (the
exercise, 02.5).  This file is the judge and runs none of the learner's code.

02.6–02.10 are the kit's extension (the asyncio note, not the course's exercise): lab02_note.py runs each
script and records what asyncio really did -- budgets that expired, tasks cancelled, who printed what.
"""

from __future__ import annotations

from pathlib import Path

from lab02_learner import SHORT_BUDGET  # a constant only: the probe's code runs in its child
from shared import probe_report
from shared.figures import attach, bar, lane, lanes, mark, steps
from shared.i18n import t
from shared.logs import LOG_DIR
from shared.tap import Check, once, run

PROBE_TIMEOUT = 30.0  # a normal batch takes about 1 s; a batch that never ends is killed after this
SCRIPT_TIMEOUT = 30.0  # the note's scripts take about half a second
HERE = Path.cwd()


def checks() -> list[Check]:
    return [
        Check("02.1", check_normal_batch, "probe: normal"),
        Check("02.2", check_limits, "probe: normal"),
        Check("02.3", check_timeout, "probe: timeout"),
        Check("02.4", check_error, "probe: error"),
        Check("02.5", check_exercise, "probe: normal, timeout"),
        Check("02.6", check_demo, "python lab02_note.py asyncio_timeout_demo.py"),
        Check("02.7", check_relaxed, "python lab02_note.py experiment_relaxed.py"),
        Check("02.8", check_swallow, "python lab02_note.py experiment_swallow.py"),
        Check("02.9", check_taskgroup, "python lab02_note.py experiment_taskgroup.py"),
        Check("02.10", check_shield, "python lab02_note.py experiment_shield.py"),
    ]


@once
def probe_run(kind: str) -> dict:
    """One scenario in a child process: its report, {"hung": True}, or {"error": why there is none}."""
    ran = probe_report.run(["lab02_learner.py", kind], LOG_DIR, f"probe-{kind}", PROBE_TIMEOUT, HERE)
    if ran.code is None:
        return {"hung": True}
    return ran.report if ran.report is not None else {"error": f"probe exited {ran.code}:\n{ran.output[-1500:]}"}


def probe(kind: str) -> dict:
    """A scenario's report, once it is one to judge: a run that hung, broke, stalled or swallowed a
    cancellation fails the check here, saying so."""
    report = probe_run(kind)
    assert not report.get("hung"), t("the {kind} run did not finish within {probe_timeout:g} s (it takes about 1 s): "
                                     "does a task keep busy without ever giving the event loop back?", kind=kind,
                                     probe_timeout=PROBE_TIMEOUT)
    assert "error" not in report, t("running bounded_async failed:\n") + report["error"]
    assert not report.get("stalled"), t("the {kind} run stalled: main() had not returned, yet nothing on the event "
                                        "loop could run and no timer was pending -- every task waited for another, "
                                        "forever: {stalled}. Is a consumer missing its None sentinel?", kind=kind,
                                        stalled='; '.join(report['stalled']))
    assert not report.get("swallowed"), t("in the {kind} run, consumer(s) {swallowed} came back to queue.get() for "
                                          "more work after being asked to cancel: the CancelledError was swallowed, "
                                          "nothing can stop them, and the batch would hang forever. Let "
                                          "CancelledError leave the consumer (clean up in finally).", kind=kind,
                                          swallowed=report.get('swallowed'))
    return report


# ----- figures: pictures of what the probe recorded, never part of a verdict

def permit_lanes(report: dict, title: str) -> dict:
    """One lane per task that read or took from the queue: a "hold" bar while each read ran (inside its
    permit), a mark where a read or a task was cancelled or failed; the budget's deadline as a line."""
    line = report["timeline"]
    reads, ends = line["reads"], line["ends"]
    getters = set(line["consumers"])
    known = [read["start"] for read in reads] + [read["end"] for read in reads if read["end"] is not None]
    last = max(known + [at for _, at, _ in ends]) if known or ends else 0.0
    rows = []
    for number in range(len(line["tasks"])):
        bars, marks = [], []
        for read in (r for r in reads if r["task"] == number):
            if read["outcome"] == "injected":
                marks.append(mark(read["start"], f"read {read['id']}: ValueError", "fail"))
                continue
            end = read["end"] if read["end"] is not None else last
            bars.append(bar(read["start"], end, f"read {read['id']}", "hold"))
            if read["outcome"] == "cancelled":
                marks.append(mark(end, f"read {read['id']} cancelled", "cancel"))
            elif read["outcome"] == "error":
                marks.append(mark(end, f"read {read['id']} raised", "fail"))
        for _, at, how in (e for e in ends if e[0] == number and e[2] != "done"):
            marks.append(mark(at, t("task cancelled") if how == "cancelled" else t("task failed"),
                              "cancel" if how == "cancelled" else "fail"))
        rows.append(lane(t("consumer {number}", number=number + 1) if number in getters or not reads
                         else t("task {number}", number=number + 1), bars=bars, marks=marks))
    lines = [mark(line["deadline"], t("budget {short_budget:g} s due", short_budget=SHORT_BUDGET), "deadline")] \
        if line.get("deadline") is not None else []
    return lanes(title, rows, lines=lines, caption=t("each bar: a read_product running (inside its Semaphore "
                                                     "permit); at most two may overlap in time"))


def permit_count(report: dict) -> dict:
    """The number of reads running, at each change, against the ceiling of two."""
    points = [(at, n) for at, n in report["timeline"]["running"]]
    return steps(t("reads running at once (holding a permit)"),
                 points[:1] and [(points[0][0], 0)] + points, limit=2, label=t("reads"))


def blocked_loop(report: dict) -> str:
    """The reason for reads that never gave the event loop back."""
    blocking = report["blocking"]
    calls = "; ".join(blocking["sleeps"])
    if calls:
        return t("blocking call in async code: {blocked} of {reads} reads never gave the event loop back -- while "
                 "one ran, the loop ran no other task, so the other reads could only wait ({calls}). In a coroutine "
                 "use await asyncio.sleep(...), not time.sleep; hand really blocking calls to a thread (lesson 05).",
                 blocked=blocking['reads'], reads=report['reads'], calls=calls)
    return t("blocking call in async code: {blocked} of {reads} reads never gave the event loop back -- while one "
             "ran, the loop ran no other task, so the other reads could only wait. In a coroutine use await "
             "asyncio.sleep(...), not time.sleep; hand really blocking calls to a thread (lesson 05).",
             blocked=blocking['reads'], reads=report['reads'])


def count(lines: list[str], text: str) -> int:
    return sum(1 for line in lines if line == text)


def completed_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("completed")]


def assert_everyone_cleaned_up(report: dict) -> None:
    closed = count(report["lines"], "consumer closed")
    assert report["consumers"] > 0, t("no consumer was seen taking from the queue")
    assert closed == report["consumers"], t("{consumers} consumers but {closed} consumer closed lines (print it in "
                                            "finally)", consumers=report['consumers'], closed=closed)
    assert report["consumers_done"] and not report["leftover_tasks"], t(
        "tasks still pending after main() ended: {leftover_tasks}", leftover_tasks=report['leftover_tasks'])


def check_normal_batch(c) -> None:
    report = probe("normal")
    lines = report["lines"]
    c.note(t("output: {lines}", lines=lines))
    main = report.get("main", {})
    assert main.get("returned"), t("main() raised on the normal batch: {text}", text=main.get('text'))
    collect = report.get("collect", {})
    assert collect.get("returned"), t("collect_products did not return rows")
    c.note(t("collect_products returned a {type} of {len} rows; rows[i]['id'] for i in 0..19: {ids}",
             type=collect['type'], len=collect['len'], ids=collect['ids']))
    assert collect["len"] == 20 and collect["ids"] == list(range(20)), t(
        "expected 20 rows with rows[i]['id'] == i (keyed by product_id)")
    assert "completed 20" in lines, t("main() did not print completed 20")
    c.note(t("consumers that took from the queue: {consumers}; most tasks alive during a read: {max_alive}",
             consumers=report['consumers'], max_alive=report['max_alive']))
    assert report["consumers"] == 4, t("expected exactly four consumers, got {consumers}",
                                       consumers=report['consumers'])
    assert report["max_alive"] <= 4, t("{max_alive} tasks were alive during a read: do not create a task per product",
                                       max_alive=report['max_alive'])
    assert count(lines, "consumer closed") == 4, t("consumer closed should print 4 times, got {count}",
                                                   count=count(lines, 'consumer closed'))
    assert_everyone_cleaned_up(report)


def check_limits(c) -> None:
    report = probe("normal")
    attach(c, lambda: [permit_lanes(report, t("consumers and the two read permits")),
                       permit_count(report)])
    c.note(t("reads running at once, at most: {peak} (over {reads} reads)", peak=report['peak'], reads=report['reads']))
    c.note(t("queues created: {queues}", queues=report['queues']))
    assert not report["blocking"]["reads"], blocked_loop(report)
    assert report["peak"] <= 2, t("{peak} reads ran at once, over 2: Semaphore(2) must wrap the await of read_product",
                                  peak=report['peak'])
    assert report["peak"] == 2, t("only {peak} read ran at once: two slots should let two reads overlap",
                                  peak=report['peak'])
    assert report["queues"], t("no asyncio.Queue was created")
    for queue in report["queues"]:
        assert queue["maxsize"] == 4, t("the queue's maxsize should be 4, got {maxsize} (0 = unbounded)",
                                        maxsize=queue['maxsize'])
        assert queue["largest"] <= 4, t("the queue once held {largest}", largest=queue['largest'])


def check_timeout(c) -> None:
    report = probe("timeout")
    attach(c, lambda: permit_lanes(report, t("the {short_budget:g} s budget expires: reads and consumers cancelled",
                                             short_budget=SHORT_BUDGET)))
    lines = report["lines"]
    assert report["asyncio_view"], t("bounded_async has no module-level asyncio (use import asyncio and "
                                     "asyncio.timeout)")
    assert "budget_requested" in report, t("main() never called asyncio.timeout(...)")
    c.note(t("main asked for {budget_requested} s; ran with {short_budget} s; returned after {seconds} s, {reads} "
             "reads started", budget_requested=report['budget_requested'], short_budget=SHORT_BUDGET,
             seconds=report['seconds'], reads=report['reads']))
    c.note(t("output: {lines}", lines=lines))
    assert "batch timed out" in lines, t("batch timed out was not printed")
    assert not completed_lines(lines), t("after the timeout it still printed {completed_lines}: a partial result is "
                                         "not a result", completed_lines=completed_lines(lines))
    assert not report.get("collect", {}).get("returned"), t(
        "collect_products returned a partial result after the timeout")
    assert_everyone_cleaned_up(report)


def check_error(c) -> None:
    report = probe("error")
    attach(c, lambda: permit_lanes(report, t("read 3 fails: the TaskGroup cancels the other consumers")))
    lines = report["lines"]
    collect, main = report.get("collect", {}), report.get("main", {})
    returned = t("returned rows") if collect.get("returned") else "?"
    c.note(f"collect_products: {collect.get('text', returned)}")
    c.note(t("main(): {text}; output: {lines}", text=main.get('text', t('returned')), lines=lines))
    assert not collect.get("returned"), t("collect_products still returned rows after item 3 failed (was the error "
                                          "swallowed?)")
    assert collect.get("group") and collect.get("value_error"), t(
        "the batch should fail with an ExceptionGroup holding the ValueError, got {text}", text=collect.get('text'))
    assert not completed_lines(lines), t("a failed batch must not print {completed_lines}",
                                         completed_lines=completed_lines(lines))
    assert_everyone_cleaned_up(report)


def check_exercise(c) -> None:
    normal = probe("normal")
    numbers = normal["numbers"]
    if not numbers:
        c.skip(t("nothing of bounded_async's own changes while the reads run: exercise not attempted (the exercise: "
                 "a running count and its peak for read_product)"))
    c.note(t("numbers that change while the batch runs: {numbers}", numbers=', '.join(numbers)))
    counter = next((label for label, seen in numbers.items() if seen["running"]), None)
    peak = next((label for label, seen in numbers.items() if seen["peak"] and label != counter), None)
    if counter is None:
        label, seen = next(iter(numbers.items()))
        really, said = seen["off_running"]
        raise AssertionError(t("none of these numbers follows the reads really running: e.g. {label} was {said} "
                               "while {really} read(s) ran. Count inside the Semaphore, around the real I/O: add one "
                               "before it, subtract one in finally.", label=label, said=said, really=really))
    if peak is None:
        others = [(label, seen) for label, seen in numbers.items() if label != counter]
        example = t(": e.g. {others} was {off_peak} when {off_peak2} reads had been seen at once", others=others[0][0],
                    off_peak=others[0][1]['off_peak'][1], off_peak2=others[0][1]['off_peak'][0]) if others else ""
        raise AssertionError(t("found the running count {counter}, but no peak that keeps its highest "
                               "value{example}. Update the peak right after each increment.", counter=counter,
                               example=example))
    for kind, report in (("normal", normal), ("timeout", probe("timeout"))):
        seen = report["numbers"]
        running, top = seen.get(counter, {}), seen.get(peak, {})
        c.note(t("{kind}: {counter} ends at {final}, {peak} = {final2} (reads really running at once: {peak2})",
                 kind=kind, counter=counter, final=running.get('final'), peak=peak, final2=top.get('final'),
                 peak2=report['peak']))
        assert running.get("running"), t("in the {kind} run {counter} did not follow the real reads: it was "
                                         "{off_running} while {off_running2} read(s) ran (subtract in finally, so a "
                                         "cancel or failure gives it back)", kind=kind, counter=counter,
                                         off_running=running['off_running'][1],
                                         off_running2=running['off_running'][0]) \
            if running else t("in the {kind} run {counter} never changed", kind=kind, counter=counter)
        assert running.get("final") == 0, t("after the {kind} run {counter} should be 0, got {final}", kind=kind,
                                            counter=counter, final=running.get('final'))
        assert top.get("peak"), t("in the {kind} run {peak} is not the most reads seen at once: it was {off_peak} "
                                  "when {off_peak2} had been seen", kind=kind, peak=peak, off_peak=top['off_peak'][1],
                                  off_peak2=top['off_peak'][0]) if top else t(
                "in the {kind} run {peak} never changed", kind=kind, peak=peak)
        assert top.get("final") <= 2, t("the {kind} run's peak {final} is over 2", kind=kind, final=top.get('final'))


# ----- the kit's extension: the asyncio note's demo and experiments (not the course's exercise)

GUIDE = "lessons/02-asyncio-bounded/README.md"


def note_run(c, name: str, budgets: bool = True) -> dict:
    """Run one of the note's scripts under lab02_note.py and return what asyncio really did in it; budgets: note
    how each of its budgets ended."""
    if not (HERE / name).exists():  # the note's scripts are an extension beyond the course
        c.skip(t("not taken up: no {name}. What to write: {guide}, section \"Extension: the asyncio note's scripts\" "
                 "(the code and the lines to print)", name=name, guide=GUIDE))
    ran = probe_report.run(["lab02_note.py", name], LOG_DIR, Path(name).stem, SCRIPT_TIMEOUT, HERE, limit=None)
    assert ran.code is not None, t("python {name} did not end within {script_timeout:g} s (it takes about half a "
                                   "second)", name=name, script_timeout=SCRIPT_TIMEOUT)
    run = ran.report
    assert run is not None, t("running {name} left no record:\n{stdout}", name=name, stdout=ran.output[-800:])
    run["texts"] = [line["text"] for line in run["lines"] if line["text"]]
    run["by_id"] = {task["id"]: task for task in run["tasks"]}
    c.note(t("python {name} -> {outcome}, output: {texts}", name=name, outcome=run['outcome'], texts=run['texts'][-8:]))
    assert run["outcome"] == "ok", t("{name} failed: {outcome}\n{stdout}", name=name, outcome=run['outcome'],
                                     stdout=ran.output[-600:])
    for budget in run["budgets"] if budgets else ():  # lab02_note records a value only with the outcome it came with
        if "outcome" not in budget:
            c.note(t("asyncio.{kind}({delay}) ended: never", kind=budget['kind'], delay=budget['delay']))
        elif "value" in budget:
            c.note(t("asyncio.{kind}({delay}) ended: {outcome}, returning {value!r}", kind=budget['kind'],
                     delay=budget['delay'], outcome=budget['outcome'], value=budget['value']))
        else:
            c.note(t("asyncio.{kind}({delay}) ended: {outcome}", kind=budget['kind'], delay=budget['delay'],
                     outcome=budget['outcome']))
    return run


def printed_while_cancelled(run: dict, ending: str) -> list[dict]:
    """Lines ending with `ending` that a task printed while it was being cancelled."""
    return [line for line in run["lines"] if line["text"].endswith(ending) and line["cancelling"]]


def in_order(lines: list[str], wanted: list[str]) -> bool:
    """True when every wanted line appears, in this order (other lines may sit between)."""
    position = 0
    for line in lines:
        if position < len(wanted) and line == wanted[position]:
            position += 1
    return position == len(wanted)


def check_demo(c) -> None:
    run = note_run(c, "asyncio_timeout_demo.py")
    expired = [b for b in run["budgets"] if b.get("outcome") == "TimeoutError"]
    assert expired, t("no asyncio.wait_for / asyncio.timeout ended in TimeoutError: no budget really expired "
                      "(printing the lines is not enough: the script must do what they say)")
    budget = expired[0]
    cleanup = printed_while_cancelled(run, "cancelled; cleanup")
    assert cleanup, t("no task printed ... cancelled; cleanup while it was being cancelled: clean up and print in "
                      "the slow call's except asyncio.CancelledError, then raise")
    printer = run["by_id"].get(cleanup[0]["task"], {})
    c.note(t("the cleanup line was printed by task #{id} while being cancelled; it ended {state}",
             id=printer.get('id'), state=printer.get('state')))
    assert printer.get("state") == "cancelled" or printer.get("id") == budget["task"], t(
        "the task that printed the cleanup ended {state}, not cancelled: re-raise after the cleanup, so the "
        "cancellation completes", state=printer.get('state'))
    assert cleanup[0]["at"] < budget["end"], t("the TimeoutError came before the cleanup: wait_for waits for the "
                                               "cancelled task to clean up first")
    wanted = ["quote cancelled; cleanup", "timeout", "result: quote:degraded"]
    assert in_order(run["texts"], wanted), t("expected these lines in order: {wanted}", wanted=wanted)
    results = [line for line in run["texts"] if line.startswith("result:")]
    assert results == ["result: quote:degraded"], t("expected one result line, got {results}", results=results)


def check_relaxed(c) -> None:
    run = note_run(c, "experiment_relaxed.py")
    in_time = [b for b in run["budgets"] if b.get("outcome") == "returned"]
    assert in_time, t("no asyncio.wait_for / asyncio.timeout ended in time (printing the lines is not enough: the "
                      "script must do what they say)")
    asked = [task["id"] for task in run["tasks"] if task["cancel_calls"]]
    assert not asked, t("a sufficient budget must cancel nothing, yet task(s) {asked} were asked to cancel",
                        asked=asked)
    assert "result: quote:100" in run["texts"], t("expected result: quote:100")
    noise = [line for line in run["texts"] if "cancelled" in line or line == "timeout"]
    assert not noise, t("a sufficient budget must not cancel or time out: {noise}", noise=noise)


def check_swallow(c) -> None:
    run = note_run(c, "experiment_swallow.py")
    # A budget that asked its work to cancel and still returned: the work swallowed the cancel.  Python 3.11's
    # wait_for cancels the task it waits for; from 3.12 it cancels the task that waits, which passes the
    # cancel on to what it awaits -- either way the cancel() call falls inside the budget.
    cancels = [call for task in run["tasks"] for call in task["cancel_calls"]]
    swallowed = [b for b in run["budgets"] if b.get("outcome") == "returned"
                 and any(b["start"] < call < b["end"] for call in cancels)]
    assert swallowed, t(
        "no task went on to return after it was asked to cancel: the counter-example's slow call swallows "
        "CancelledError (return in the except, no raise) (printing the lines is not enough: the script must do what "
        "they say)")
    value = swallowed[0].get("value")
    assert f"result: {value}" in run["texts"], t("expected result: {value} (the cancel was swallowed and wait_for "
                                                 "got that value)", value=value)
    assert "timeout" not in run["texts"] and "result: quote:degraded" not in run["texts"], t(
        "the counter-example must show no timeout and no degraded result")


def check_taskgroup(c) -> None:
    run = note_run(c, "experiment_taskgroup.py", budgets=False)
    groups = [g for g in run["groups"] if g.get("raised") in ("ExceptionGroup", "BaseExceptionGroup")
              and any(inner.startswith("ValueError") for inner in g["inner"])]
    for group in run["groups"]:
        c.note(t("TaskGroup (tasks {tasks}) raised on exit: {raised} {inner}", tasks=group['tasks'],
                 raised=group.get('raised'), inner=group.get('inner')))
    assert groups, t("no asyncio.TaskGroup ended with an ExceptionGroup holding a ValueError (printing the lines is "
                     "not enough: the script must do what they say)")
    group = groups[0]
    siblings = [run["by_id"][n] for n in group["tasks"] if n in run["by_id"]
                and run["by_id"][n]["cancel_calls"] and run["by_id"][n]["state"] == "cancelled"]
    assert siblings, t("no sibling in the group was cancelled: when one child fails, the TaskGroup cancels the rest")
    sibling = siblings[0]["id"]
    cleanup = [line for line in printed_while_cancelled(run, "cancelled; cleanup") if line["task"] == sibling]
    assert cleanup, t("the cancelled sibling did not print ... cancelled; cleanup while being cancelled")
    assert cleanup[0]["at"] < group["end"], t("the sibling should finish its cleanup before the ExceptionGroup "
                                              "leaves the TaskGroup")
    caught = [line for line in run["lines"] if line["text"].startswith("caught ExceptionGroup")
              and "ValueError" in line["text"] and line["at"] > group["end"]]
    assert caught, t("no caught ExceptionGroup: ValueError(...) line (catch it with except*)")
    assert "sibling cancelled: True" in run["texts"], t("expected sibling cancelled: True")


def check_shield(c) -> None:
    run = note_run(c, "experiment_shield.py")
    assert run["shields"], t("asyncio.shield was never called (printing the lines is not enough: the script must do "
                             "what they say)")
    inner = run["shields"][0]["inner"]
    expired = [b for b in run["budgets"] if b.get("outcome") == "TimeoutError" and b["start"] > run["shields"][0]["at"]]
    assert expired, t("the outer budget around the shield never expired")
    assert inner in expired[0]["unfinished"], t("the shielded task had already ended when the outer budget expired: "
                                                "it should outlive the timeout")
    task = run["by_id"].get(inner, {})
    main_end = run["by_id"].get(1, {}).get("ended", float("inf"))
    ours = [at for at in task.get("cancel_calls", []) if expired[0]["end"] < at < main_end]
    c.note(t("shielded task #{inner}: still running at the timeout; cancel() called {n_ours} time(s) after it, ended "
             "{state}", inner=inner, n_ours=len(ours), state=task.get('state')))
    assert ours, t("your code never cancel()ed the task after the timeout (asyncio.run's own clean-up does not "
                   "count): whoever shields it must cancel it")
    assert task.get("state") == "cancelled" and task.get("ended", float("inf")) < main_end, t(
        "the cancelled task was not awaited to its end before main() finished: await it after cancel()")
    wanted = ["outer timeout", "inner done after timeout: False", "inner cancelled: True"]
    assert in_order(run["texts"], wanted), t("expected these lines in order: {wanted} -- the inner task outlives the "
                                             "outer timeout until it is cancelled and awaited", wanted=wanted)


if __name__ == "__main__":
    run(checks())
