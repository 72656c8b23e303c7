"""Runs in a probe next to the learner's modules (shared/probe.py): the calls lesson 13's judge cannot
make by name — the capacity admit_export defaults to, a submit that may be refused with the learner's
own CapacityExceeded, whether api_db.py has a POST /exports.  Plain data out; the judge decides."""

import inspect


def limit_default():
    """The default of admit_export's `limit` (None when it has none)."""
    import state_store
    param = inspect.signature(state_store.admit_export).parameters.get("limit")
    return None if param is None or param.default is param.empty else param.default


def submit(product_ids: list[int]) -> dict:
    """submit_snapshot(product_ids): {"job": id}, or {"capacity": message} when it raised CapacityExceeded."""
    import state_store
    try:
        return {"job": state_store.submit_snapshot(product_ids)}
    except state_store.CapacityExceeded as exc:
        return {"capacity": str(exc)}


def api_db_has_post_exports() -> bool:
    import api_db
    return any(getattr(route, "path", None) == "/exports" and "POST" in (getattr(route, "methods", None) or ())
               for route in getattr(api_db.app, "routes", []))
