"""Lesson 03 mutants: plausible mistakes with background work and its owner."""

from tests.mutants import Mutant

MUTANTS = [
    # ---- 03.1: BackgroundTasks export on a real uvicorn
    Mutant(
        name="03-work-inside-request",
        file="api_background.py",
        old="    background.add_task(local_export, job_id)\n",
        new="    await local_export(job_id)\n",
        fails=("03.1",),
        why="Awaiting the export in the handler makes the client wait and hides running: "
            "polls only ever see succeeded.",
    ),
    Mutant(
        name="03-never-running",
        file="api_background.py",
        old='    transition(job_id, "running")\n    try:\n',
        new="    try:\n",
        fails=("03.1",),
        why="Skipping queued → running makes every later transition illegal; the error only reaches "
            "the server log and the job stays queued (pitfall: the 202 is sent, the error is invisible).",
    ),
    Mutant(
        name="03-rows-not-counted",
        file="api_background.py",
        old='row["result"] = {"rows": len(row["product_ids"])}',
        new='row["result"] = {"rows": row["product_ids"]}',
        fails=("03.1",),
        why="The result stores the id list instead of the number of rows.",
    ),
    Mutant(
        name="03-background-200",
        file="api_background.py",
        old='@app.post("/exports/background", status_code=202)',
        new='@app.post("/exports/background")',
        fails=("03.1",),
        why="Without status_code=202 FastAPI answers 200, which claims the export is done.",
    ),
    Mutant(
        name="03-blocking-sleep-in-export",
        file="api_background.py",
        old="        await asyncio.sleep(1)  # stands in for building the two-row list\n",
        new="        __import__(\"time\").sleep(1)  # a blocking wait inside the coroutine\n",
        fails=("03.1",),
        why="time.sleep in local_export blocks the event loop: the server answers nobody while the export "
            "runs; 03.1 says 'blocking call in async code' with the place of the call.",
    ),
    Mutant(
        name="03-add-task-given-a-call",
        file="api_background.py",
        old="    background.add_task(local_export, job_id)\n",
        new="    background.add_task(local_export(job_id))\n",
        fails=("03.1",),
        why="add_task gets a coroutine object instead of the function: the server log shows TypeError: the "
            "first argument must be callable and the job stays queued; 03.1 says so at once.",
    ),
    # ---- 03.2: registry_demo shutdown
    Mutant(
        name="03-cancel-without-gather",
        file="registry_demo.py",
        old="    await asyncio.gather(*pending, return_exceptions=True)\n",
        new="",
        fails=("03.2",),
        why="cancel() is only a request: counting right after it prints remaining 1, and cleanup runs "
            "later, when asyncio.run tears the loop down.",
    ),
    Mutant(
        name="03-observe-keeps-reference",
        file="task_registry.py",
        old="    running.discard(task)  # first, so the set empties whatever the outcome\n",
        new="",
        fails=("03.2", "03.3", "03.5"),
        why="A done callback that never discards keeps every finished task in running (the exercise's too).",
    ),
    # ---- 03.3: a failing task is observed
    Mutant(
        name="03-exception-never-read",
        file="task_registry.py",
        old="""    error = task.exception()  # reading it marks the failure as handled
    if error is not None:
        # Log, never raise: an exception escaping a callback only lands in the loop's handler.
        logging.error("background task %s failed: %r", task.get_name(), error, exc_info=error)
""",
        new="",
        fails=("03.3", "03.5"),
        why="Nobody reads the exception: nothing is logged and asyncio prints "
            "'Task exception was never retrieved' when the task is collected (the exercise's ValueError too).",
    ),
    Mutant(
        name="03-discard-only-on-success",
        file="task_registry.py",
        old="""    running.discard(task)  # first, so the set empties whatever the outcome
    if task.cancelled():
        return  # we asked for it; nothing to report (and task.exception() would raise)
    error = task.exception()  # reading it marks the failure as handled
    if error is not None:
        # Log, never raise: an exception escaping a callback only lands in the loop's handler.
        logging.error("background task %s failed: %r", task.get_name(), error, exc_info=error)
""",
        new="""    if task.cancelled():
        running.discard(task)
        return
    error = task.exception()
    if error is not None:
        logging.error("background task %s failed: %r", task.get_name(), error)
        return
    running.discard(task)
""",
        fails=("03.2", "03.3", "03.5"),
        why="The early return on failure skips the discard, so a failed task stays referenced forever "
            "(registry_demo's exercise task too: it ends with remaining 1).",
    ),
    Mutant(
        name="03-callback-reraises",
        file="task_registry.py",
        old="""    error = task.exception()  # reading it marks the failure as handled
    if error is not None:
        # Log, never raise: an exception escaping a callback only lands in the loop's handler.
        logging.error("background task %s failed: %r", task.get_name(), error, exc_info=error)
""",
        new="    task.result()  # surface the failure\n",
        fails=("03.3", "03.5"),
        why="Re-raising from the done callback logs nothing of ours; asyncio only reports "
            "'Exception in callback'.",
    ),
    Mutant(
        name="03-start-forgets-add",
        file="task_registry.py",
        old="    running.add(task)\n",
        new="",
        fails=("03.2", "03.3", "03.5"),
        why="start() without running.add: no strong reference, and registry_demo.py finds nothing to wait for "
            "or cancel -- the checks name task_registry.start as the cause, not registry_demo.py.",
    ),
    # ---- 03.4: restart drill
    Mutant(
        name="03-jobs-saved-to-file",
        file="api_background.py",
        old="log = logging.getLogger(__name__)\n",
        new="""log = logging.getLogger(__name__)

import json
from pathlib import Path

_saved = Path("jobs.json")
if _saved.exists():
    jobs.update(json.loads(_saved.read_text()))


@app.middleware("http")
async def _save_jobs(request, call_next):
    response = await call_next(request)
    _saved.write_text(json.dumps(jobs))
    return response
""",
        fails=("03.4",),
        why="Home-made file persistence makes the old id survive the crash: the drill no longer shows "
            "the in-memory loss boundary (durable state is lesson 11).",
    ),
    Mutant(
        name="03-stale-lock-file",
        file="api_background.py",
        old="log = logging.getLogger(__name__)\n",
        new="""log = logging.getLogger(__name__)

import atexit
import os
from pathlib import Path

_lock = Path("export.lock")
if _lock.exists():
    raise RuntimeError(f"another export server holds {_lock}")
_lock.write_text(str(os.getpid()))
atexit.register(_lock.unlink)
""",
        fails=("03.4",),
        why="A lock file removed only by atexit survives SIGKILL, so the server refuses to restart "
            "after a crash.",
    ),
    # ---- 03.5: the course's exercise (a ValueError in a task registry_demo starts)
    Mutant(
        name="03-exercise-bypasses-registry",
        file="registry_demo.py",
        old="    start(failing_work())  # the exercise: its error is logged, not lost\n",
        new="    asyncio.create_task(failing_work())  # started past the registry\n",
        fails=("03.5",),
        why="The failing task is started with a bare create_task: nobody reads its exception and asyncio "
            "reports 'Task exception was never retrieved'.",
    ),
]
