"""Lesson 06, step 4: one verdict for the whole batch.

Run:  python verify_process.py

When a worker process dies (crash, OOM kill, os._exit), the pool is broken and
every result it had not delivered is gone.  The batch is then incomplete, so it
has failed as a whole: say so, and hand the same exception back to the caller.
"""

from concurrent.futures.process import BrokenProcessPool

from process_export import main

if __name__ == "__main__":
    try:
        main()
    except BrokenProcessPool:
        print("batch failed: worker process lost")
        raise  # a bare raise: the caller gets the original error and a non-zero exit code
