"""Runs in a learner's Celery worker (imported by a lesson's worker wrapper): every run of a task, recorded.

    record_task_runs(record)                                   # a "start" and an "end" event per run
    record_task_runs(record, started=where, ended=where)       # plus what the lesson adds
    record_task_runs(record, only="products.retry_demo", retried=why)   # one task; its retries too

"start": the task's name, message id, arguments; "end": also its state and return value (plain data,
or its repr cut to 200 characters).  `started(task, args, kwargs)` and `ended(task, state, retval)`
return extra fields; `ended` may replace "retval" (a lesson that reports a raised exception its own way).
`retried(task, request, reason)`, when given, adds a "retry" event per planned retry with its fields.
`only` names the one task recorded (every task when None).
The checker reads these events as facts: who ran what, in which order, how it ended.
`delivered_to(task)`: the worker's node and the message's queue, for a lesson that records where a task ran.
"""

from __future__ import annotations

from celery import signals

PLAIN = (dict, list, str, int, float, bool, type(None))


def plain(value):
    return value if isinstance(value, PLAIN) else repr(value)[:200]


def delivered_to(task) -> dict:
    """The running task's worker node name and the queue its message came from (the routing key)."""
    request = getattr(task, "request", None)
    info = getattr(request, "delivery_info", None) or {}
    return {"node": getattr(request, "hostname", None), "queue": info.get("routing_key")}


def record_task_runs(record, started=None, ended=None, retried=None, only: str | None = None) -> None:
    def wanted(task) -> bool:
        return only is None or getattr(task, "name", None) == only

    # weak=False: Celery keeps weak references to receivers, and these live only here.
    @signals.task_prerun.connect(weak=False)
    def _on_start(task_id=None, task=None, args=None, kwargs=None, **_):
        if not wanted(task):
            return
        args, kwargs = list(args or []), kwargs or {}
        fields = {"task": getattr(task, "name", None), "task_id": task_id, "args": args, "kwargs": kwargs}
        fields.update(started(task, args, kwargs) if started else {})
        record("start", **fields)

    @signals.task_postrun.connect(weak=False)
    def _on_end(task_id=None, task=None, state=None, retval=None, **_):
        if not wanted(task):
            return
        extra = dict(ended(task, state, retval)) if ended else {}
        retval = extra.pop("retval", retval)
        record("end", task=getattr(task, "name", None), task_id=task_id, state=state, retval=plain(retval),
               **extra)

    if retried is not None:
        @signals.task_retry.connect(weak=False)
        def _on_retry(sender=None, request=None, reason=None, **_):
            if wanted(sender):
                record("retry", task=getattr(sender, "name", None), task_id=getattr(request, "id", None),
                       **retried(sender, request, reason))
