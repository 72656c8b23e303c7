"""Kit runner for lesson 03's checks 03.2 and 03.5 (not a lesson file): `python lab03_demo.py registry_demo.py`.

Runs the learner's registry_demo.py as `python registry_demo.py` would (runpy, as __main__), with the course's
task_registry.start wrapped to see, per task: whether start() put it into task_registry.running, and how its
coroutine ended (returned, cancelled, the exception it raised; the task and its exception stay the learner's,
nothing here reads it).  At the end, one report in a file of its own (`report`, shared with
lab03_failing_task.py; shared/probe_report.py): the tasks, what is left in `running`, the error records of
the learner's loggers and, apart, asyncio's own reports ("Task exception was never retrieved", "Exception in
callback").
"""

import gc
import logging
import sys

from shared.learner_spies import run_as_main


class Keep(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.records = []

    def emit(self, record):
        self.records.append(record)


def keep_logs() -> Keep:
    """Every log record kept from now on (called before task_registry is imported, so nothing it logs is
    missed); the learner still sees their log lines on stderr."""
    keep = Keep()
    root = logging.getLogger()
    root.addHandler(keep)
    root.addHandler(logging.StreamHandler(sys.stderr))
    root.setLevel(logging.INFO)
    return keep


def text(record) -> str:
    extra = record.exc_info[1] if record.exc_info and record.exc_info[1] else None
    return record.getMessage() + (f" [{extra!r}]" if extra is not None else "")


def report(keep: Keep, cut: int, **facts) -> None:
    """The report (shared/probe_report.py): the facts, the learner's error records, asyncio's own reports (cut
    to `cut`)."""
    from shared import probe_report
    probe_report.write({
        **facts,
        "logged": [text(r) for r in keep.records if r.name != "asyncio" and r.levelno >= logging.ERROR],
        "loop": [r.getMessage()[:cut] for r in keep.records if r.name == "asyncio"],
    })


def main() -> None:
    keep = keep_logs()
    import task_registry

    started = []  # one record per task started through task_registry.start
    real_start = task_registry.start

    def start(coro):
        record = {"ended": "running"}
        started.append(record)

        async def observed():
            try:
                value = await coro
            except BaseException as exc:
                record["ended"] = type(exc).__name__
                record["error"], record["message"] = repr(exc)[:160], str(exc)[:160]
                raise
            record["ended"] = "returned"
            return value

        task = real_start(observed())
        record["registered"] = task in task_registry.running
        return task

    task_registry.start = start
    outcome = run_as_main(sys.argv[1], print_crash=False)  # a crash: say how, keep the facts gathered so far
    gc.collect()  # a task nobody read is reported when it is collected
    sys.stdout.flush()
    report(keep, 300, outcome=outcome, started=started, left=len(task_registry.running))


if __name__ == "__main__":
    main()
