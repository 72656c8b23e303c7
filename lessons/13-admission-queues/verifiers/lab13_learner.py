"""Runs in a probe next to the learner's modules (shared/probe.py): the calls lesson 13's judge cannot
make by name — a submit that may be refused with the learner's own CapacityExceeded, whether api_db.py has a
POST /exports (the capacity admit_export defaults to: shared.lesson_db.limit_default).  Plain data out; the judge
decides."""


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
