"""Runs in a probe next to the learner's modules (shared/probe.py): what lesson 14's judge asks of them that a
plain call cannot give.  An outcome is {"value": v} or {"raised": {"type": class name, "text": message, "is":
[the asked-about classes it is an instance of]}}; the judge decides.
"""

import contextlib
import datetime as dtmod
import types

TICK = "products.schedule_tick"
UTC = dtmod.timezone.utc


def _outcome(call, kinds: dict | None = None) -> dict:
    try:
        return {"value": call()}
    except Exception as exc:  # noqa: BLE001 - reported to the judge, which decides
        return {"raised": {"type": type(exc).__name__, "text": str(exc)[:4000],
                           "is": [name for name, cls in (kinds or {}).items()
                                  if isinstance(cls, type) and isinstance(exc, cls)]}}


# ---------------------------------------------------------------- 14.2

def tick_entries() -> dict:
    """celery_app.app's beat_schedule entries that send products.schedule_tick: [name, str(schedule), queue]
    each ({"app": False} when celery_app.py has no app)."""
    import celery_app
    app = getattr(celery_app, "app", None)
    if app is None:
        return {"app": False}
    schedule = getattr(app.conf, "beat_schedule", None) or {}
    found = [(name, entry) for name, entry in schedule.items() if isinstance(entry, dict) and entry.get("task") == TICK]
    return {"app": True, "entries": [[str(name), str(entry.get("schedule")), (entry.get("options") or {}).get("queue")]
                                     for name, entry in found]}


# ---------------------------------------------------------------- 14.6

def schedule_once_counting(slot_key: str, product_ids: list[int]) -> dict:
    """schedule_once(slot_key, product_ids) with schedule_store.transaction counted: the outcome, and how
    many transactions it opened ("opened")."""
    import schedule_store
    real = schedule_store.transaction
    opened = []

    @contextlib.contextmanager
    def counting(*args, **kwargs):
        opened.append(1)
        with real(*args, **kwargs) as cur:
            yield cur

    schedule_store.transaction = counting
    try:
        seen = _outcome(lambda: schedule_store.schedule_once(slot_key, product_ids), {"ValueError": ValueError})
    finally:
        schedule_store.transaction = real
    return dict(seen, opened=len(opened))


# ---------------------------------------------------------------- 14.7

def has_capacity_exceeded() -> bool:
    import state_store
    return isinstance(getattr(state_store, "CapacityExceeded", None), type)


def schedule_once_at_capacity(slot_key: str, product_ids: list[int]) -> dict:
    """schedule_once's outcome; "is" says whether what it raised is a state_store.CapacityExceeded."""
    import schedule_store
    import state_store
    return _outcome(lambda: schedule_store.schedule_once(slot_key, product_ids),
                    {"CapacityExceeded": getattr(state_store, "CapacityExceeded", None)})


# ---------------------------------------------------------------- 14.4

class _FrozenClock(dtmod.datetime):
    """datetime whose now() answers a moment the kit chose (an aware UTC datetime)."""

    moment = dtmod.datetime(2000, 1, 1, tzinfo=UTC)

    @classmethod
    def now(cls, tz=None):
        # Instances of this class, so an isinstance(when, datetime) in the learner's code still holds.
        aware = cls.fromtimestamp(cls.moment.timestamp(), UTC)
        return aware.astimezone(tz) if tz is not None else aware.replace(tzinfo=None)

    @classmethod
    def utcnow(cls):
        return cls.now().replace(tzinfo=None)


def ticks_at(moments: list) -> dict:
    """schedule_tick() once at each moment, schedule_tasks' `datetime` pointed at the kit's clock meanwhile:
    {"runs": [outcome, ...]}, or {"clock": False} when the module reads the time some other way."""
    import schedule_tasks
    original = schedule_tasks.__dict__.get("datetime")
    if original is dtmod.datetime:
        replacement = _FrozenClock
    elif original is dtmod:
        replacement = types.SimpleNamespace(**{k: getattr(dtmod, k) for k in dir(dtmod) if not k.startswith("__")})
        replacement.datetime = _FrozenClock
    else:
        return {"clock": False}
    schedule_tasks.datetime = replacement
    runs = []
    try:
        for when in moments:
            _FrozenClock.moment = when
            runs.append(_outcome(lambda: schedule_tasks.schedule_tick()))
    finally:
        schedule_tasks.datetime = original
    return {"runs": runs}
