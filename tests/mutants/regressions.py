"""Regressions: lesson NN's folder with a break in code an earlier lesson built, which NN rewrote or still
relies on.  NN's own checks may not notice; the earlier lesson's check, re-run on NN's files (tasks.json's
`regressions`), must."""

from tests.mutants import Mutant

FINISH_LIVE = ("                 AND lease_until>NOW(6) AND deadline_at>NOW(6) AND cancel_requested=FALSE\"\"\",\n"
               "            (result_ref, job_id, token),")
FINISH_NO_LEASE = ("                 AND deadline_at>NOW(6) AND cancel_requested=FALSE\"\"\",\n"
                   "            (result_ref, job_id, token),")
WHY_LEASE = "finish no longer requires a live lease: an executor whose lease expired still publishes its result."

MUTANTS = [
    Mutant(name="09-api-waits-again", on="09", file="api_submit.py",
           old="        export_products.apply_async(args=[job_id, rows], task_id=job_id)\n",
           new="        export_products.apply_async(args=[job_id, rows], task_id=job_id).get(timeout=10)\n",
           fails=("08.5",), why="Lesson 08's API submit path waits on the result again in a lesson-09 folder."),
    Mutant(name="10-prefetch-default-again", on="10", file="celery_app.py",
           old="    worker_prefetch_multiplier=1,\n", new="    worker_prefetch_multiplier=4,\n",
           fails=("09.3",), why="Lesson 10 rewrote celery_app.py and lost lesson 09's prefetch of one."),
    Mutant(name="11-retry-every-exception-again", on="11", file="retry_tasks.py",
           old="    except TemporaryReadError as exc:  # only this type is worth waiting for\n",
           new="    except Exception as exc:\n",
           fails=("10.3",), why="Lesson 10's retry task, carried into lesson 11, retries a permanent error."),
    Mutant(name="12-finish-without-lease", on="12", file="state_store.py", old=FINISH_LIVE, new=FINISH_NO_LEASE,
           fails=("11.3",), why=WHY_LEASE + " (The issue's own example: lesson 12 rewrote state_store.py.)"),
    Mutant(name="13-finish-without-lease", on="13", file="state_store.py", old=FINISH_LIVE, new=FINISH_NO_LEASE,
           fails=("11.3",), why=WHY_LEASE),
    Mutant(name="14-count-then-insert-without-gate", on="14", file="state_store.py",
           old="    lock_admission(cur)\n    # READ COMMITTED", new="    # READ COMMITTED",
           fails=("13.1",), why="Lesson 13's admission gate, which lesson 14's schedules rely on, no longer locks."),
    Mutant(name="15-finish-without-lease", on="15", file="state_store.py", old=FINISH_LIVE, new=FINISH_NO_LEASE,
           fails=("11.3",), why=WHY_LEASE),
    Mutant(name="16-finish-without-lease", on="16", file="state_store.py", old=FINISH_LIVE, new=FINISH_NO_LEASE,
           fails=("11.3",), why=WHY_LEASE + " Lesson 16 carries lesson 15's state_store.py."),
]
