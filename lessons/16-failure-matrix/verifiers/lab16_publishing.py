"""While the kit publishes, the matrix worker's claims wait (kit module for lesson 16, not a lesson file).

Both publishers of the kit use it: the judge's publish_one (through its probe) and the result-cache row's
publisher process (lab16_cache_publisher, which the matrix finds by CACHE_PUBLISHER, its handshake name).
lab16_probe, in the worker, holds a claim while a marker below names a live process.  No learner code and
no other lab16 module is imported here.
"""

from __future__ import annotations

import contextlib
import os

from shared.lesson_celery import LOG_DIR

CACHE_PUBLISHER = "cache-publisher"  # the result-cache row's publisher, in shared.handshake's folder


@contextlib.contextmanager
def publishing():
    """While the kit runs the learner's publish_one, the matrix worker's claims wait (lab16_probe): the
    confirm's lock on the job row is never met by chance.  A file per process, removed at the end.  The
    judge's publish_one runs in its probe while the judge waits for it: the judge's pid marks it (alive
    all along), as the cache publisher's own pid marks its publish."""
    marker = LOG_DIR / f"lab16-publishing-{os.getpid()}"
    marker.touch()
    try:
        yield
    finally:
        marker.unlink(missing_ok=True)
