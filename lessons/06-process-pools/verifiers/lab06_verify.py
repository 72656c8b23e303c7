"""Verifier for lesson 06: CPU work in a spawn process pool, proved by running it.

06.1  process_export.py run as a script: the serial and the pool results are recorded
      call by call and must be equal for the same inputs; when the pool is made to
      return different numbers, the script itself must refuse (its assert)
06.2  importing cpu_work / process_export / verify_process (also the way a spawned worker
      imports a script, as __mp_main__) builds no pool and starts no process; the pool the
      script builds was given a spawn context; its target can be imported by module + name
      (and cpu_work.py defines score_text at module level)
06.3  the printed serial/process seconds really cover their own computations, and the
      script runs to the end when the pool is the slower side (no speed is assumed)
06.4  with the target replaced by a function local to another function, main() fails with
      a pickling error and the pool yields no result; process_pool_review.py runs
06.5  verify_process.py with a worker that calls os._exit: "batch failed: worker process
      lost" is printed and BrokenProcessPool comes back out
06.6  exercise (the course's: rounds 10 and 2000, compared): `python process_export.py` and
      `python process_export.py 10` are run and the rounds score_text really got are read on both sides.
      Rounds 10 and 2000 must each run on both sides with the same inputs, equal results and their own
      timings printed; rounds 10 seen nowhere = not attempted (no name is called: main() is not asked
      to take a parameter)

How: each scenario runs in a fresh interpreter (a "probe", lab06_learner.py) with real spawned workers and
writes one JSON report (shared/probe_report.py); for the fault drills the pool's target is swapped for a
top-level function of lab06_learner.py.  Timings are compared only with the learner's own timers -- never
against a speed.  The serial-versus-pool timelines of 06.3 and 06.6 are pictures, never part of a verdict.
Probe logs go to the log folder (shared/logs.py).  This file is the judge: it runs none of the learner's code
and imports nothing from the probe, so neither the probe nor its workers load the judge.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

from shared import probe_report
from shared.figures import attach, bar, lane, lanes, mark
from shared.i18n import t
from shared.logs import LOG_DIR
from shared.tap import Because, Check, once, run as run_checks  # `run` names a probe run here

WORK = Path.cwd()
PROBE = "import lab06_learner as p; p.probe()"  # a probe interpreter's program (python -c)
ROUNDS_EXERCISE = (10, 2000)
# The learner prints perf_counter() differences; allow for a value printed with 2 decimals.
PRINT_ROUNDING = 0.06
# Backstops for a probe that never ends; a probe takes a few seconds (the real computation runs
# 4 x 2000 rounds twice), and a busy machine may take many times that.
PROBE_BOUND = 60.0
HEAVY_PROBE_BOUND = 120.0


def checks() -> list[Check]:
    return [
        Check("06.1", check_results, "probes: process_export.py real, mismatch"),
        Check("06.2", check_structure, "probes: imports; process_export.py real"),
        Check("06.3", check_timings, "probes: process_export.py real, equal"),
        Check("06.4", check_local_function, "probe: local; python process_pool_review.py"),
        Check("06.5", check_broken_pool, "probe: verify_process.py with a dying worker"),
        Check("06.6", check_exercise, "probes: process_export.py real, and with 10"),
    ]


def _run(args: list[str], name: str, timeout: float) -> probe_report.Ran:
    """`python ARGS` (pool workers included) with a bounded wait: a run that does not end fails the check."""
    ran = probe_report.run(args, LOG_DIR, name, timeout, WORK)
    if ran.code is None:
        raise AssertionError(t("{argv} did not finish within {timeout:g} s:\n{tail}", argv=' '.join(args[:2]),
                               timeout=timeout, tail="\n".join(ran.output.splitlines()[-8:])))
    return ran


@once
def probe(*args: str, timeout: float = PROBE_BOUND) -> dict:
    """One probe scenario's report (several checks read the same run)."""
    ran = _run(["-c", PROBE, *args], "probe-" + "-".join(a.replace(".py", "") for a in args), timeout)
    assert ran.report is not None, t("the probe {args} gave no result (exit code {exit}):\n", args=' '.join(args),
                                     exit=ran.code) + "\n".join(ran.output.splitlines()[-12:])
    return ran.report


def script(path: str, fake: str, *extra: str) -> dict:
    """The probe's run of `python PATH EXTRA...` with the pool's target `fake` (real: the learner's own)."""
    return probe("script", path, fake, *extra, timeout=HEAVY_PROBE_BOUND if fake == "real" else PROBE_BOUND)


def _error_text(error: dict | None) -> str:
    if not error:
        return t("no exception")
    message = error["message"].strip()
    return f"{error['type']}: {message.splitlines()[0]}" if message else error["type"]


def _secs(value: float) -> str:
    return f"{value:.4f}" if abs(value) >= 0.001 else f"{value:.1e}"


TIMING = re.compile(r"^\s*(serial|process)\b[^0-9\-]*(-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)", re.I)


def _timing_lines(run: dict) -> list[tuple[str, float, float]]:
    """(serial or process, printed seconds, when the line was written) for each timing line, in order."""
    matches = [(TIMING.match(line), stamp) for stamp, line in run.get("lines", [])]
    return [(match.group(1).lower(), float(match.group(2)), stamp) for match, stamp in matches if match]


def _timings(run: dict) -> dict:
    """label -> (printed seconds, when the line was written) for the first serial/process lines."""
    return {label: (value, stamp) for label, value, stamp in reversed(_timing_lines(run))}  # the first one wins


def _printed(c, run: dict, script: str = "process_export.py") -> None:
    lines = [line for _, line in run.get("lines", [])][:4]
    c.note(t("python {script} printed: ", script=script)
           + (" | ".join(lines) if lines else t("(nothing)")))


def _rounds_seen(run: dict) -> tuple[set, set]:
    return {entry[0][2] for entry in run["serial"]}, {call[2] for call in run["pool_calls"]}


def serial_and_pool(run: dict, title: str) -> dict:
    """One time axis: the serial score_text calls in the main process, then the pool -- the main process
    from building it to its shutdown, each result as it came back -- and a lane per worker process with a
    bar per call it ran.  Every time is perf_counter, one clock for all processes of the machine."""
    rows = [lane(t("serial (main process)"),
                 bars=[bar(start, end, f"rounds={key[2]}", "serial") for key, _, start, end in run["serial"][:200]])]
    waits, marks = [], []
    for pool in run["pools"]:
        began = pool.get("t_init", pool.get("t_submit"))
        if began is not None:
            ended = pool.get("t_shutdown") or max([r[2] for r in run["pool_results"]] + [began])
            waits.append(bar(began, ended, "ProcessPoolExecutor", "wait"))
    marks += [mark(stamp, f"result #{index + 1}", "ok") for index, _, stamp in run["pool_results"][:200]]
    marks += [mark(stamp, line.strip()[:40], "event") for stamp, line in run["lines"] if TIMING.match(line)][:20]
    rows.append(lane(t("pool (main process)"), bars=waits, marks=marks))
    workers: dict[int, list] = {}
    for pid, start, end, rounds in run.get("worker_calls", []):
        workers.setdefault(pid, []).append(bar(start, end, f"rounds={rounds}", "pool"))
    rows += [lane(t("worker process {pid}", pid=pid), bars=bars) for pid, bars in workers.items()]
    return lanes(title, rows[:20], caption=t("one time axis: first each call in turn, then the worker processes in "
                                             "parallel; the pool bar in the main process runs from building the pool "
                                             "to its shutdown (starting the workers included)"))



# ---------------------------------------------------------------- mistakes named by their cause

MUTATORS = {"append", "extend", "insert", "add", "update", "setdefault", "__setitem__"}


def _assigned(node) -> list:
    """What an assignment statement writes to (none for other statements)."""
    if isinstance(node, ast.Assign):
        return node.targets
    return [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []


def _worker_globals() -> list[str]:
    """Module globals of cpu_work.py and process_export.py that a function changes (ast): declared `global`
    there, or a module-level name whose value a function appends to, updates or assigns an item of."""
    names: set[str] = set()
    for file in ("cpu_work.py", "process_export.py"):
        try:
            tree = ast.parse((WORK / file).read_bytes(), file)
        except (OSError, SyntaxError, ValueError):
            continue
        top = {target.id for node in tree.body if not isinstance(node, ast.AugAssign)
               for target in _assigned(node) if isinstance(target, ast.Name)}
        for func in (node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)):
            for node in ast.walk(func):
                if isinstance(node, ast.Global):
                    names.update(node.names)
                elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                      and node.func.attr in MUTATORS and isinstance(node.func.value, ast.Name)
                      and node.func.value.id in top):
                    names.add(node.func.value.id)
                else:
                    names.update(x.value.id for x in _assigned(node) if isinstance(x, ast.Subscript)
                                 and isinstance(x.value, ast.Name) and x.value.id in top)
    return sorted(names)


def _global_hint() -> str:
    return t("Processes share no memory: return each value from the function the pool runs and use the list "
             "pool.map hands back (len(parallel) counts the pool's calls); never collect or count in a global.")


def _named_mistake(run: dict) -> Because | None:
    """The run's failure named by its cause, when the evidence shows one: a target no worker can find (a
    lambda or local function), results or counts kept in a global the workers only change in their own copy,
    or a script without its __main__ guard (each spawned worker builds a pool again)."""
    error = run["error"]
    lost = [x for x in run["targets"] if not x["importable"]]
    if lost and error and error["pickle"]:
        return Because(t("the pool was sent {target}, a lambda or a function defined inside another function: a "
                         "worker finds the function it runs by importing its module and looking up its name, and "
                         "this one has none, so pickling it failed ({error_text}).",
                         target=f"{lost[0]['module']}.{lost[0]['qualname']}", error_text=_error_text(error)),
                       t("Define the function the pool runs at the top level of an importable module (like "
                         "score_text in cpu_work.py) and send it by name, with its arguments: "
                         "pool.map(score_text, texts, [rounds] * len(texts))."))
    changed = _worker_globals()
    serial = [entry[1] for entry in run["serial"]]
    results = [value for _, value, _ in run["pool_results"]]
    if results and all(value is None for value in results) and any(value is not None for value in serial):
        targets = sorted({x["qualname"] for x in run["targets"]})
        return Because(t("the function the pool ran ({targets}) returned None for each of its {n} call(s), while "
                         "score_text returns a number: it keeps its result somewhere else ({names}). A worker "
                         "process has its own copy of every global, so a list the workers fill stays empty in the "
                         "parent.", targets=", ".join(targets), n=len(results),
                         names=", ".join(changed) or t("not a return value")), _global_hint())
    line = (error or {}).get("line", "")
    named = [name for name in changed if re.search(rf"\b{re.escape(name)}\b", line)]
    if named:
        return Because(t("the script failed on its own line `{line}`, which reads {names}: a module global that a "
                         "function changes. A worker process has its own copy of every global, so what the pool's "
                         "calls did to it never reaches the parent (the parent sees only its own calls): "
                         "{error_text}.", line=line.strip(), names=", ".join(named), error_text=_error_text(error)),
                       _global_hint())
    if error and error["bpp"]:
        imports = probe("imports")
        tripped = [step["name"] for step in imports["steps"] if step["pools"] or step["processes"]]
        if tripped:
            return Because(t("the pool broke ({error_text}) because {name} already builds a pool: every spawned "
                             "worker imports the script again (as __mp_main__), tries to start a pool of its own "
                             "while it is still starting up, and dies. The if __name__ == \"__main__\": guard is "
                             "missing.", error_text=_error_text(error), name=tripped[0]),
                           t("Build the pool only inside main(), and call main() only under "
                             "if __name__ == \"__main__\": -- a spawned worker imports the script under the name "
                             "__mp_main__, so the guard keeps its import from building a pool."))
    return None


# ---------------------------------------------------------------- 06.1

def check_results(c) -> None:
    run = script("process_export.py", "real")
    _printed(c, run)
    error = run["error"]
    if not run["pools"] or len(run["pool_results"]) < len(run["pool_calls"]) or not run["pool_calls"]:
        c.note_lines((error or {}).get("tail", []))
        if finding := _named_mistake(run):
            raise finding
        raise AssertionError(t("the pool did not hand back every result ({n_pools} pool(s), {n_pool_calls} call(s) "
                               "submitted, {n_pool_results} result(s) received); the script ended with {error_text}.",
                               n_pools=len(run['pools']), n_pool_calls=len(run['pool_calls']),
                               n_pool_results=len(run['pool_results']), error_text=_error_text(error)))
    assert run["serial"], t("the serial part never called score_text from cpu_work: both sides must use the same "
                            "function.")
    serial_calls = [entry[0] for entry in run["serial"]]
    pooled = [value for _, value, _ in sorted(run["pool_results"], key=lambda r: r[0])]
    if serial_calls != run["pool_calls"] or [entry[1] for entry in run["serial"]] != pooled:
        if finding := _named_mistake(run):
            raise finding
    assert serial_calls == run["pool_calls"], t("the two sides got different inputs: serial {n_serial_calls} call(s) "
                                                "with rounds {rounds_seen}, pool {n_pool_calls} call(s) with rounds "
                                                "{rounds_seen2}. Use the same texts and rounds on both sides.",
                                                n_serial_calls=len(serial_calls),
                                                rounds_seen=sorted(_rounds_seen(run)[0], key=str),
                                                n_pool_calls=len(run['pool_calls']),
                                                rounds_seen2=sorted(_rounds_seen(run)[1], key=str))
    serial = [entry[1] for entry in run["serial"]]
    c.note(t("serial results  {serial}", serial=serial))
    c.note(t("process results {pooled}", pooled=pooled))
    assert serial == pooled, t("same inputs, different results: score_text must depend on text and rounds only "
                               "(ord() is the same everywhere; hash() of a str differs from process to process).")
    if error:
        c.note(t("(results match; the script then ended with {error_text}, see 06.3)", error_text=_error_text(error)))

    # The script must check this itself: hand it pool results that are one off.
    odd = script("process_export.py", "mismatch")
    odd_error = odd["error"]
    c.note(t("with every pool result one off: the script ended with {error_text}", error_text=_error_text(odd_error)))
    assert odd["pool_results"], t("in the comparison drill the pool handed back no results: {error_text}",
                                  error_text=_error_text(odd_error))
    assert odd_error is not None and not odd_error["bpp"], t(
        "the script finished normally although the results differed: keep assert serial == parallel, so a wrong "
        "result can never pass as a success.")


# ---------------------------------------------------------------- 06.2

def check_structure(c) -> None:
    # The target: a module-level def in cpu_work.py (ast: nested defs are not in tree.body).  Parsed from
    # bytes, so a BOM or a coding line is read as Python itself reads the file.
    tree = ast.parse((WORK / "cpu_work.py").read_bytes(), "cpu_work.py")
    top = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert "score_text" in top, t("cpu_work.py has no module-level def score_text: a worker can only import a "
                                  "top-level function by module and name.")
    c.note(t("cpu_work.py defines score_text at module level (ast)"))

    # Importing must start nothing -- also the way spawn re-imports a script in each worker.
    imports = probe("imports")
    for step in imports["steps"]:
        error = step["error"]
        tripped = step["pools"] or step["processes"]
        if tripped:
            c.note(f"{step['name']}: " + t("{pools} pool(s), {processes} process(es)", pools=step['pools'],
                                           processes=step['processes']))
        assert not tripped, t("{name} already built a pool or started a process. Every spawned worker imports the "
                              "script again (as __mp_main__), so the pool must only be built inside a function that "
                              "if __name__ == \"__main__\": calls.", name=step['name'])
        assert error is None, t("{name} failed: {error_text}", name=step['name'], error_text=_error_text(error))
    c.note(t("no pool and no process while: ")
           + ", ".join(step["name"] for step in imports["steps"]))

    run = script("process_export.py", "real")
    assert run["pools"], t("python process_export.py built no pool ({error_text}): the __main__ guard must call "
                           "main().", error_text=_error_text(run['error']))
    for pool in run["pools"]:
        c.note(t("pool: max_workers={max_workers}, mp_context={explicit}, start method in use {effective}",
                 max_workers=pool['max_workers'], explicit=pool['explicit'], effective=pool['effective']))
        assert pool["explicit"] == "spawn", t("spawn is not passed explicitly (mp_context={explicit}, this "
                                              "platform's default is {effective}). The default changes with platform "
                                              "and Python version: pass mp_context=mp.get_context(\"spawn\").",
                                              explicit=pool['explicit'], effective=pool['effective'])
    targets = {(x["module"], x["qualname"], x["importable"]) for x in run["targets"]}
    for module, qualname, importable in sorted(targets, key=str):
        c.note(t("function sent to the pool: {module}.{qualname} ({importable} by name in a worker)", module=module,
                 qualname=qualname, importable=t('importable') if importable else t('not importable')))
        assert importable, t("{module}.{qualname} is not a top-level function of an importable module (a lambda, "
                             "closure or local function): put it at the top of cpu_work.py.", module=module,
                             qualname=qualname)
    assert targets, t("the pool never received a function.")


# ---------------------------------------------------------------- 06.3

def check_timings(c) -> None:
    run = script("process_export.py", "real")
    attach(c, lambda: serial_and_pool(run, t("serial and pool: python process_export.py")))
    found = _timings(run)
    _printed(c, run)
    for label in ("serial", "process"):
        if label not in found and (finding := _named_mistake(run)):
            raise finding
        assert label in found, t("no {label} timing was printed (like \"{label} 0.42\"): {error_text}", label=label,
                                 error_text=_error_text(run['error']))
    serial_value, serial_line = found["serial"]
    process_value, process_line = found["process"]

    # The first serial/process pair is judged against its own work: the serial calls before the first
    # pool, that pool's results (a script that compares several sizes in one run prints a pair for each).
    pools = sorted((pool for pool in run["pools"] if "t_submit" in pool), key=lambda pool: pool["t_submit"])
    first_pool = pools[0]["t_submit"] if pools else float("inf")
    next_pool = pools[1]["t_submit"] if len(pools) > 1 else float("inf")
    calls = [call for call in run["serial"] if call[3] <= first_pool] or run["serial"]
    # Serial: the printed value must at least cover the score_text calls themselves.
    assert calls, t("no serial score_text call was recorded.")
    serial_work = max(call[3] for call in calls) - min(call[2] for call in calls)
    c.note(t("serial: printed {serial_value:.3f} s; the score_text calls themselves took {serial_work:.3f} s",
             serial_value=serial_value, serial_work=serial_work))
    assert serial_value >= serial_work - PRINT_ROUNDING, t(
        "serial prints {serial_value:.3f} s, less than the serial computation itself ({serial_work:.3f} s): the "
        "timer must wrap the whole serial computation.", serial_value=serial_value, serial_work=serial_work)

    # Process: from the first submit (workers start then) to the last result, and nothing
    # from before the pool's work began.
    results = [r for r in run["pool_results"] if first_pool <= r[2] < next_pool]
    assert pools and results, t("the pool handed back no results: {error_text}", error_text=_error_text(run['error']))
    began = first_pool
    pool_work = max(r[2] for r in results) - began
    before = [call[3] for call in calls if call[3] <= began]
    earliest = max(before) if before else run["t_start"]
    window = process_line - earliest
    c.note(t("process: printed {process_value:.3f} s; first submit to last result {pool_work:.3f} s, last step "
             "before the pool's work to that line {window:.3f} s", process_value=process_value, pool_work=pool_work,
             window=window))
    assert process_value >= pool_work - PRINT_ROUNDING, t("process prints {process_value:.3f} s, less than "
                                                          "submitting the work and getting every result "
                                                          "({pool_work:.3f} s): start the timer before the pool and "
                                                          "stop it after the results -- starting the workers is part "
                                                          "of what you measure.", process_value=process_value,
                                                          pool_work=pool_work)
    assert process_value <= window + PRINT_ROUNDING, t("process prints {process_value:.3f} s, yet only {window:.3f} "
                                                       "s passed between the step before the pool and that line: the "
                                                       "timer includes the serial part. Reset started = "
                                                       "perf_counter() before the pool.", process_value=process_value,
                                                       window=window)
    ratio = process_value / serial_value if serial_value > 0 else float("inf")
    c.note(t("this run: the pool took {ratio:.2f}x the serial time (recorded, not judged)", ratio=ratio))

    # A pool that is slower than serial is a valid result: the script must still run to the end.
    slow = script("process_export.py", "equal")
    slow_found = _timings(slow)
    if "serial" in slow_found and "process" in slow_found:
        c.note(t("with the computation made nearly free (the pool pays only its start-up): serial {secs}, process "
                 "{secs2}", secs=_secs(slow_found['serial'][0]), secs2=_secs(slow_found['process'][0])))
    c.note_lines((slow["error"] or {}).get("tail", []))
    if slow["error"] is not None and (finding := _named_mistake(run) or _named_mistake(slow)):
        raise finding
    assert slow["error"] is None, t("the script failed when the pool was the slower side: {error_text}. A slower "
                                    "pool on small work is a valid measurement: never assert that the pool is "
                                    "faster, only that the results match.", error_text=_error_text(slow['error']))
    assert "serial" in slow_found and "process" in slow_found, t(
        "with the slower pool the two timings were not printed.")


# ---------------------------------------------------------------- 06.4

def check_local_function(c) -> None:
    ran = _run(["process_pool_review.py"], "process_pool_review", PROBE_BOUND)
    code, lines = ran.code, ran.output.splitlines()
    c.note(t("python process_pool_review.py → exit code {code}", code=code))
    c.note_lines(lines, last=4)
    assert code == 0, t("process_pool_review.py should run cleanly (it only confirms score_text comes from cpu_work "
                        "and is callable).")

    run = probe("local")
    error = run["error"]
    targets = sorted({f"{x['module']}.{x['qualname']}" for x in run["targets"]})
    c.note(t("main() with score_text swapped for a function local to another function: the pool was sent {targets}",
             targets=targets or t('nothing')))
    c.note(t("outcome: {error_text}", error_text=_error_text(error)))
    assert targets and any("<locals>" in name for name in targets), t(
        "the pool never received the local function: main() should hand score_text from cpu_work to the pool.")
    printed = [line for _, line in run["lines"]]
    if error is None and printed:
        raise AssertionError(t("the target was a local function, yet main() finished normally (it even printed "
                               "{last!r}): the pickling error was swallowed or replaced by some other result. Let it "
                               "propagate -- a function that cannot cross into a worker must not count as success.",
                               last=printed[-1]))
    assert error is not None, t(
        "the target was a local function, yet main() finished normally: the pickling error was swallowed or "
        "replaced by some other result. Let it propagate -- a function that cannot cross into a worker must not "
        "count as success.")
    assert error["pickle"], t("expected a pickling error, got {error_text}", error_text=_error_text(error))
    assert not run["pool_results"], t("the pool still handed back {n_pool_results} result(s).",
                                      n_pool_results=len(run['pool_results']))
    assert "process" not in _timings(run), t("the process timing was printed after the pickling failure: a failed "
                                             "batch must not look finished.")
    c.note(t("the pool handed back no result and no process timing was printed."))


# ---------------------------------------------------------------- 06.5

def check_broken_pool(c) -> None:
    run = script("verify_process.py", "die")
    printed = [line for _, line in run["lines"]]
    error = run["error"]
    c.note(t("python verify_process.py with the pool's target swapped for one that calls os._exit(17) (the worker "
             "just vanishes):"))
    c.note_lines(printed[-4:] or [t("(no output)")])
    c.note(t("exception handed back to the caller: {error_text}", error_text=_error_text(error)))
    assert run["pool_calls"], t("the pool received no work: {error_text}", error_text=_error_text(error))
    wanted = "batch failed: worker process lost"
    if not any(wanted in line for line in printed) and (finding := _named_mistake(run)):
        raise finding
    assert any(wanted in line for line in printed), t("{wanted!r} was not printed: in verify_process.py, report the "
                                                      "whole batch as failed in except BrokenProcessPool.",
                                                      wanted=wanted)
    assert error is not None, t("the exception was swallowed after the message, so a caller sees success (exit code "
                                "0): re-raise it with a bare raise after printing.")
    assert error["bpp"], t("{type} came back instead of BrokenProcessPool: re-raise it unchanged with a bare raise "
                           "so the caller can tell what happened.", type=error['type'])
    done = [line for line in printed if TIMING.match(line) and line.lower().startswith("process")]
    assert not done, t("the process timing was printed although a worker was lost.")


# ---------------------------------------------------------------- 06.6

def _one_size(run: dict, rounds) -> tuple[list, list]:
    """(serial calls, pool calls) of one rounds value, each as [input key, result], in call order."""
    serial = [[key, value] for key, value, *_ in run["serial"] if key[2] == rounds]
    results = {index: value for index, value, _ in run["pool_results"]}
    pool = [[key, results.get(index, "<no result>")] for index, key in enumerate(run["pool_calls"]) if key[2] == rounds]
    return serial, pool


def check_exercise(c) -> None:
    runs = [("python process_export.py", script("process_export.py", "real")),
            ("python process_export.py 10", script("process_export.py", "real", "10"))]
    attach(c, lambda: [serial_and_pool(run, t("serial and pool: {label}", label=label))
                       for label, run in runs if run["serial"] or run.get("worker_calls")])
    for label, run in runs:
        serial_rounds, pool_rounds = _rounds_seen(run)
        serial, pool = sorted(serial_rounds, key=str), sorted(pool_rounds, key=str)
        if run["error"]:
            c.note(t("{label}: serial rounds {serial}, pool rounds {pool}, ended with {error_text}", label=label,
                     serial=serial, pool=pool, error_text=_error_text(run['error'])))
        else:
            c.note(t("{label}: serial rounds {serial}, pool rounds {pool}", label=label, serial=serial, pool=pool))
    if not any(ROUNDS_EXERCISE[0] in side for _, run in runs for side in _rounds_seen(run)):
        c.skip(t("neither run used rounds={rounds_exercise}: exercise not attempted (set rounds to 10 and to 2000 "
                 "and compare; e.g. python process_export.py 10 runs 10 and no argument runs 2000, or one run does "
                 "both in turn)", rounds_exercise=ROUNDS_EXERCISE[0]))
    for rounds in ROUNDS_EXERCISE:
        both = [(label, run) for label, run in runs if all(rounds in side for side in _rounds_seen(run))]
        assert both, t("no run used rounds={rounds} on both the serial and the pool side: between the two sizes "
                       "change only rounds, and on both sides.", rounds=rounds)
        label, run = both[0]
        c.note_lines((run["error"] or {}).get("tail", []))
        if run["error"] is not None and (finding := _named_mistake(run)):
            raise finding
        assert run["error"] is None, t("{label} (rounds={rounds}) failed: {error_text}", label=label, rounds=rounds,
                                       error_text=_error_text(run['error']))
        serial, pool = _one_size(run, rounds)
        assert [key for key, _ in serial] == [key for key, _ in pool], t(
            "with rounds={rounds} the two sides got different inputs (serial {n_serial} call(s), pool {n_pool}): "
            "keep the inputs and the workers the same, change only rounds.", rounds=rounds, n_serial=len(serial),
            n_pool=len(pool))
        assert [value for _, value in serial] == [value for _, value in pool], t(
            "with rounds={rounds} the results differ: serial {value}, pool {value2}", rounds=rounds,
            value=[v for _, v in serial], value2=[v for _, v in pool])
        sizes = len({key[2] for key in run["pool_calls"]} | {entry[0][2] for entry in run["serial"]})
        printed = Counter(label for label, _, _ in _timing_lines(run))
        assert printed["serial"] >= sizes and printed["process"] >= sizes, t(
            "{label} ran {sizes} rounds value(s) but printed {serial} serial and {process} process timing line(s): "
            "record both timings of each run.", label=label, sizes=sizes, serial=printed['serial'],
            process=printed['process'])
        c.note(t("rounds={rounds} ({label}): same inputs on both sides, equal results, timings printed", rounds=rounds,
                 label=label))


if __name__ == "__main__":
    run_checks(checks())
