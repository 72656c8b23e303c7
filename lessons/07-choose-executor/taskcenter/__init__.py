"""A durable, single-process task center: asyncio for the work, one SQLite file for the truth.

Modules, from the inside out:
    models      the five states and the transitions between them
    store       SQLite (WAL): submit with an idempotency key, claim, mark, crash recovery
    downstream  the HTTP port and three adapters (fake, httpx2 async, blocking client in a thread)
    retry       which outcomes are worth another try, and how long to wait first
    worker      the asyncio loop: bounded concurrency, cancellation, graceful stop
    log         one JSON object per line
    api         the FastAPI surface: POST /tasks, GET /tasks/{id}, POST /tasks/{id}/cancel
    main        `python -m taskcenter.main` (demo) and `python -m taskcenter.main serve`
"""
