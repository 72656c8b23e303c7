"""Runs in a probe next to the learner's modules (shared/probe.py): the calls lesson 16's judge cannot make
by name — pointing an already loaded celery_app at the stack's private broker, a read inside the learner's
own transaction(), Celery's state of a message and a send with the learner's app, the HTTP burst against the
learner's submit route, four schedule_once calls racing for one slot.  Plain data out; the judge decides."""

import functools
import os
import sys
import threading


def point_broker(url: str) -> None:
    """The stack's broker for everything the learner's code sends from here on (celery_app reads the
    environment first; an app already loaded is pointed at it too)."""
    os.environ["CELERY_BROKER_URL"] = url
    loaded = sys.modules.get("celery_app")
    if loaded is not None:
        loaded.app.conf.broker_url = url


def status_in_transaction(job_id: str):
    """SELECT status of the job through the learner's own state_store.transaction(): the row as it came."""
    import state_store
    with state_store.transaction() as cur:
        cur.execute("SELECT status FROM export_jobs WHERE id=%s", (job_id,))
        return cur.fetchone()


def _celery_app():
    loaded = sys.modules.get("celery_app")
    if loaded is None:
        import celery_app as loaded
    return loaded.app


def celery_state(task_id: str) -> str:
    """AsyncResult(task_id, app=the learner's app).state"""
    from celery.result import AsyncResult
    return AsyncResult(task_id, app=_celery_app()).state


def send_duplicates(job_id: str, queue: str, n: int) -> None:
    """n messages products.export(job_id) on `queue`, sent with the learner's app."""
    app = _celery_app()
    for _ in range(n):
        app.send_task("products.export", args=[job_id], queue=queue, retry=False)


# ---------------------------------------------------------------- the HTTP submit

def api_db_has_post_exports() -> bool:
    import api_db
    return any(getattr(r, "path", None) == "/exports" and "POST" in (getattr(r, "methods", None) or ())
               for r in api_db.app.routes)


@functools.cache
def _adapter_app():
    """accept_export behind a minimal route (the curriculum's adapter), answering 202 like the lesson's API."""
    from fastapi import Body, FastAPI

    import admission_adapter
    app = FastAPI()

    @app.post("/exports", status_code=202)
    def submit(product_ids: list[int] = Body(..., embed=True)):  # noqa: B008 - FastAPI's own idiom
        return admission_adapter.accept_export(product_ids)
    return app


def post_burst(use_api: bool, n: int, product_ids: list[int]) -> list[tuple]:
    """n concurrent POST /exports to api_db's app (else the adapter's): [(status, body text, Retry-After or
    None)] in request order."""
    import asyncio
    if use_api:
        import api_db
        app = api_db.app
    else:
        app = _adapter_app()

    async def posts():
        import httpx2
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://lab16") as client:
            return await asyncio.gather(*(client.post("/exports", json={"product_ids": product_ids})
                                          for _ in range(n)))
    answers = asyncio.run(posts())
    return [(a.status_code, a.text, a.headers.get("retry-after")) for a in answers]


# ---------------------------------------------------------------- the same slot, four callers at once

def same_slot_race(slot: str, product_ids: list[int], callers: int = 4, join_seconds: float = 180) -> list[dict]:
    """`callers` threads released together call schedule_once(slot, product_ids): per caller
    {"value": ...}, {"raised": type, "database": OperationalError?, "code": args[0], "message": ...} or
    {"alive": True} when it never returned."""
    import pymysql

    import schedule_store
    results: list[dict] = [{"alive": True} for _ in range(callers)]
    gate = threading.Barrier(callers)

    def call(i: int) -> None:
        try:
            gate.wait(120)
            results[i] = {"value": schedule_store.schedule_once(slot, product_ids)}
        except Exception as exc:  # noqa: BLE001 - reported; the judge decides
            results[i] = {"raised": type(exc).__name__, "database": isinstance(exc, pymysql.err.OperationalError),
                          "code": exc.args[0] if exc.args else "", "message": str(exc)}

    threads = [threading.Thread(target=call, args=(i,), daemon=True) for i in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(join_seconds)
    return [{"alive": True} if thread.is_alive() else results[i] for i, thread in enumerate(threads)]
