"""Lesson 06, step 2: the same checksums computed serially and by two worker processes.

Run:  python process_export.py        (rounds = 2000)
      python process_export.py 10     (the exercise: a tiny job, where start-up dominates)

Both timings are printed exactly as measured.  With small inputs the pool is often
the slower one -- that is a valid measurement, not a bug.  Only the results are asserted.
"""

import multiprocessing as mp
import sys
from concurrent.futures import ProcessPoolExecutor
from time import perf_counter

from cpu_work import score_text

ROUNDS = 2000


def main(rounds: int = ROUNDS) -> None:
    texts = ["product export " * 100 for _ in range(4)]

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

    assert serial == parallel, f"serial {serial} != process {parallel}"


if __name__ == "__main__":
    # Each spawned worker imports this file again (as __mp_main__); the guard keeps
    # that import from building a pool of its own.
    main(int(sys.argv[1]) if len(sys.argv) > 1 else ROUNDS)
