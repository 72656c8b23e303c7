"""Lesson 06 mutants: plausible mistakes with CPU work in a spawn process pool."""

from tests.mutants import Mutant

# main()'s body in process_export.py, from the texts to the process timing (several mutants rewrite it).
BODY = '''    texts = ["product export " * 100 for _ in range(4)]

    started = perf_counter()
    serial = [score_text(text, rounds) for text in texts]
    print("serial", perf_counter() - started)

    # A fresh timer for the pool, and it includes starting the workers: that cost is real.
    started = perf_counter()
    # spawn: every worker is a new interpreter that imports cpu_work -- the same on
    # Linux, macOS and Windows, instead of whatever this platform happens to default to.
    with ProcessPoolExecutor(max_workers=2, mp_context=mp.get_context("spawn")) as pool:
        # map hands results back in input order, so the lists compare position by position.
        parallel = list(pool.map(score_text, texts, [rounds] * len(texts)))
    print("process", perf_counter() - started)
'''

MUTANTS = [
    # ---- 06.1: serial and pool results agree, and the script checks it
    Mutant(
        name="06-assert-dropped",
        file="process_export.py",
        old='\n    assert serial == parallel, f"serial {serial} != process {parallel}"\n',
        new="\n",
        fails=("06.1",),
        why="Without the assert the script prints two timings whatever the pool returned: "
            "a wrong result would pass as a finished export.",
    ),
    Mutant(
        name="06-hash-checksum",
        file="cpu_work.py",
        old="total = (total * 33 + ord(character)) % 1000000007",
        new="total = (total * 33 + hash(character)) % 1000000007",
        fails=("06.1", "06.6"),
        why="str hashes are salted per process: each spawned worker computes a different checksum "
            "from the same text, so serial and pool results never match.",
    ),
    Mutant(
        name="06-results-in-worker-global",
        file="process_export.py",
        old='''ROUNDS = 2000


def main(rounds: int = ROUNDS) -> None:
''' + BODY,
        new='''ROUNDS = 2000
RESULTS: list[int] = []  # the workers put their checksums here


def score_into_results(text: str) -> None:
    RESULTS.append(score_text(text, ROUNDS))


def main(rounds: int = ROUNDS) -> None:
''' + BODY.replace("        parallel = list(pool.map(score_text, texts, [rounds] * len(texts)))\n",
                     "        list(pool.map(score_into_results, texts))  # each worker fills RESULTS\n"
                     "    parallel = RESULTS\n"),
        fails=("06.1", "06.3", "06.4", "06.6"),
        why="Collecting results in a global list: each worker process has its own copy of RESULTS, so "
            "the parent's list stays empty and the function the pool ran returned None every time.",
        says=(("06.1", "worker process has its own copy of every global, so a list the workers fill stays empty"),
              ("06.3", "worker process has its own copy of every global, so a list the workers fill stays empty")),
        hints=(("06.1", "Processes share no memory"),),
    ),
    Mutant(
        name="06-counter-across-processes",
        file="process_export.py",
        old='''ROUNDS = 2000


def main(rounds: int = ROUNDS) -> None:
''' + BODY,
        new='''ROUNDS = 2000
CALLS = 0  # how many checksums were computed, serial and pool together


def counted_score(text: str, rounds: int) -> int:
    global CALLS
    CALLS += 1
    return score_text(text, rounds)


def main(rounds: int = ROUNDS) -> None:
''' + BODY.replace("score_text", "counted_score")
       + "    assert CALLS == 2 * len(texts), f\"expected {2 * len(texts)} calls, counted {CALLS}\"\n",
        fails=("06.3", "06.4", "06.6"),
        why="A call counter in a global, asserted in the parent: the pool's calls counted in the workers' "
            "copies of CALLS, so the parent sees only its serial calls (4, not 8) -- nothing to do with speed.",
        says=(("06.3", "worker process has its own copy of every global, so what the pool's calls did to it never"),
              ("06.6", "worker process has its own copy of every global, so what the pool's calls did to it never")),
        hints=(("06.3", "Processes share no memory"),),
    ),
    # ---- 06.2: explicit spawn, top-level target, pool only under the main guard
    Mutant(
        name="06-fork-context",
        file="process_export.py",
        old='mp_context=mp.get_context("spawn")',
        new='mp_context=mp.get_context("fork")',
        fails=("06.2",),
        why="fork works on Linux but copies the parent's threads, locks and connections, and does "
            "not exist on Windows: the lesson asks for spawn, explicitly.",
    ),
    Mutant(
        name="06-default-context",
        file="process_export.py",
        old=', mp_context=mp.get_context("spawn")',
        new="",
        fails=("06.2",),
        why="Leaving the start method to the platform: fork on Linux with Python 3.11, spawn on "
            "macOS and Windows, forkserver from 3.14 -- the same script behaves differently.",
    ),
    Mutant(
        name="06-pool-at-import",
        file="process_export.py",
        old='''ROUNDS = 2000
''',
        new='''ROUNDS = 2000
# One pool for the module, so main() does not pay the start-up every time.
POOL = ProcessPoolExecutor(max_workers=2, mp_context=mp.get_context("spawn"))
''',
        fails=("06.2",),
        why="A module-level pool is built by every import, including the import each spawned "
            "worker does of the script (pitfall: pools multiplying with their importers).",
    ),
    Mutant(
        name="06-lambda-target",
        file="process_export.py",
        old="        parallel = list(pool.map(score_text, texts, [rounds] * len(texts)))\n",
        new="        parallel = list(pool.map(lambda text: score_text(text, rounds), texts))\n",
        fails=("06.1", "06.2", "06.3", "06.6"),
        why="A lambda has no module-level name: pickle cannot send it, and a spawned worker could not "
            "find it anyway -- the batch fails before any work starts.",
        says=(("06.1", "a lambda or a function defined inside another function"),),
        hints=(("06.1", "Define the function the pool runs at the top level"),),
    ),
    Mutant(
        name="06-verify-no-guard",
        file="verify_process.py",
        old='''if __name__ == "__main__":
    try:
        main()
    except BrokenProcessPool:
        print("batch failed: worker process lost")
        raise  # a bare raise: the caller gets the original error and a non-zero exit code
''',
        new='''try:
    main()
except BrokenProcessPool:
    print("batch failed: worker process lost")
    raise
''',
        fails=("06.2",),
        why="Without the guard, importing verify_process (as every spawned worker of it does) runs "
            "the whole batch again.",
    ),
    Mutant(
        name="06-export-no-guard",
        file="process_export.py",
        old='''if __name__ == "__main__":
    # Each spawned worker imports this file again (as __mp_main__); the guard keeps
    # that import from building a pool of its own.
    main(int(sys.argv[1]) if len(sys.argv) > 1 else ROUNDS)
''',
        new="main()\n",
        fails=("06.1", "06.2", "06.3", "06.5"),
        says=(("06.1", "guard is missing"), ("06.3", "guard is missing"), ("06.5", "guard is missing")),
        why="The classic spawn mistake: each worker re-imports the script, tries to start a pool "
            "while bootstrapping and dies, so the batch breaks; importing the module also runs it.",
        hints=(("06.1", "Build the pool only inside main()"),),
    ),
    # ---- 06.3: timings measured, never assumed
    Mutant(
        name="06-process-timer-not-reset",
        file="process_export.py",
        old='''    # A fresh timer for the pool, and it includes starting the workers: that cost is real.
    started = perf_counter()
''',
        new="",
        fails=("06.3",),
        why="The process timer still runs from before the serial part, so the pool is charged "
            "for the serial computation too.",
    ),
    Mutant(
        name="06-assert-pool-faster",
        file="process_export.py",
        old='''    print("serial", perf_counter() - started)

    # A fresh timer for the pool, and it includes starting the workers: that cost is real.
    started = perf_counter()
    # spawn: every worker is a new interpreter that imports cpu_work -- the same on
    # Linux, macOS and Windows, instead of whatever this platform happens to default to.
    with ProcessPoolExecutor(max_workers=2, mp_context=mp.get_context("spawn")) as pool:
        # map hands results back in input order, so the lists compare position by position.
        parallel = list(pool.map(score_text, texts, [rounds] * len(texts)))
    print("process", perf_counter() - started)
''',
        new='''    serial_seconds = perf_counter() - started
    print("serial", serial_seconds)

    # A fresh timer for the pool, and it includes starting the workers: that cost is real.
    started = perf_counter()
    # spawn: every worker is a new interpreter that imports cpu_work -- the same on
    # Linux, macOS and Windows, instead of whatever this platform happens to default to.
    with ProcessPoolExecutor(max_workers=2, mp_context=mp.get_context("spawn")) as pool:
        # map hands results back in input order, so the lists compare position by position.
        parallel = list(pool.map(score_text, texts, [rounds] * len(texts)))
    process_seconds = perf_counter() - started
    print("process", process_seconds)
    assert process_seconds < serial_seconds, "two workers should beat one"
''',
        fails=("06.3", "06.6"),
        why="Asserting a speed-up: on small work (or a busy machine) the pool is slower, which is a "
            "valid measurement -- the script then crashes instead of reporting it.",
    ),
    # ---- 06.4: a local function cannot cross into a worker
    Mutant(
        name="06-pickle-fallback",
        file="process_export.py",
        old='''        parallel = list(pool.map(score_text, texts, [rounds] * len(texts)))
''',
        new='''        try:
            parallel = list(pool.map(score_text, texts, [rounds] * len(texts)))
        except AttributeError:  # "Can't pickle local object": compute it here instead
            parallel = [score_text(text, rounds) for text in texts]
''',
        fails=("06.4",),
        why="Falling back to the parent when the target cannot be pickled hides the mistake: "
            "the 'process' results were never computed by a worker.",
    ),
    Mutant(
        name="06-catch-all-fallback",
        file="process_export.py",
        old='''        parallel = list(pool.map(score_text, texts, [rounds] * len(texts)))
''',
        new='''        try:
            parallel = list(pool.map(score_text, texts, [rounds] * len(texts)))
        except Exception:  # keep the export going whatever the pool does
            parallel = [score_text(text, rounds) for text in texts]
''',
        fails=("06.4", "06.5"),
        why="A blanket fallback also swallows BrokenProcessPool, so a lost worker never reaches "
            "verify_process.py's batch verdict.",
    ),
    # ---- 06.5: a lost worker fails the whole batch
    Mutant(
        name="06-swallow-broken-pool",
        file="verify_process.py",
        old="        raise  # a bare raise: the caller gets the original error and a non-zero exit code\n",
        new="",
        fails=("06.5",),
        why="Printing and carrying on exits 0: the caller takes an incomplete batch for a success.",
    ),
    Mutant(
        name="06-wrong-message",
        file="verify_process.py",
        old='print("batch failed: worker process lost")',
        new='print("process pool error")',
        fails=("06.5",),
        why="The report must say the batch failed, not just that something went wrong in a pool.",
    ),
    Mutant(
        name="06-reraise-as-runtime-error",
        file="verify_process.py",
        old="        raise  # a bare raise: the caller gets the original error and a non-zero exit code\n",
        new='        raise RuntimeError("export failed") from None\n',
        fails=("06.5",),
        why="A new exception without its cause hides that a worker process was lost.",
    ),
    # ---- 06.6: the exercise, rounds 10 and 2000
    Mutant(
        name="06-pool-rounds-hard-coded",
        file="process_export.py",
        old="[rounds] * len(texts)",
        new="[2000] * len(texts)",
        fails=("06.6",),
        why="Only the serial side follows rounds: main(10) compares 10 rounds against 2000.",
    ),
]
