"""Kit wrapper for check 08.5 (not a lesson file): the learner's api_submit app, its waits recorded.

The check starts `uvicorn lab08_api:app` instead of `api_submit:app`: the same FastAPI app, plus one
thing in this process only — every call that waits for a Celery result (AsyncResult.get / wait,
ResultSet.get / join) appends a "wait" event to $TASKLAB_LOG_DIR/api-waits.jsonl before it waits.  So
"the submit path never waits on result.get" is a recorded fact, not a guess from how long the
answer took.
"""

import os
from pathlib import Path

from celery.result import AsyncResult, ResultSet

from shared.events import append_event

EVENTS = Path(os.environ.get("TASKLAB_LOG_DIR") or ".") / "api-waits.jsonl"


def _recorded(cls, name: str) -> None:
    original = getattr(cls, name)

    def waiting(self, *args, **kwargs):
        append_event(EVENTS, "wait", call=f"{cls.__name__}.{name}", task_id=getattr(self, "id", None),
                     timeout=kwargs.get("timeout", args[0] if args else None))
        return original(self, *args, **kwargs)

    setattr(cls, name, waiting)


for _cls, _name in ((AsyncResult, "get"), (AsyncResult, "wait"), (ResultSet, "get"), (ResultSet, "join")):
    _recorded(_cls, _name)

from api_submit import app  # noqa: E402  the learner's app, after the waits are wrapped

__all__ = ["app"]
