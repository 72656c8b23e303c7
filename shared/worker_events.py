"""Runs in a learner's Celery worker (imported by a lesson's kit probe): every run of a task, recorded.

    record_task_runs(record)                                   # a "start" and an "end" event per run
    record_task_runs(record, started=where, ended=where)       # plus what the lesson adds

"start": the task's name, message id, arguments; "end": also its state and return value (plain data,
or its repr cut to 200 characters).  `started(task, args, kwargs)` and `ended(task, state, retval)`
return extra fields; `ended` may replace "retval" (a lesson that reports a raised exception its own way).
The checker reads these events as facts: who ran what, in which order, how it ended.
"""

from __future__ import annotations

from celery import signals

PLAIN = (dict, list, str, int, float, bool, type(None))


def plain(value):
    return value if isinstance(value, PLAIN) else repr(value)[:200]


def record_task_runs(record, started=None, ended=None) -> None:
    # weak=False: Celery keeps weak references to receivers, and these live only here.
    @signals.task_prerun.connect(weak=False)
    def _on_start(task_id=None, task=None, args=None, kwargs=None, **_):
        args, kwargs = list(args or []), kwargs or {}
        fields = {"task": getattr(task, "name", None), "task_id": task_id, "args": args, "kwargs": kwargs}
        fields.update(started(task, args, kwargs) if started else {})
        record("start", **fields)

    @signals.task_postrun.connect(weak=False)
    def _on_end(task_id=None, task=None, state=None, retval=None, **_):
        extra = dict(ended(task, state, retval)) if ended else {}
        retval = extra.pop("retval", retval)
        record("end", task=getattr(task, "name", None), task_id=task_id, state=state, retval=plain(retval),
               **extra)
