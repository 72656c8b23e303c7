"""The result-cache row's own publisher (kit helper process for lesson 16's matrix, not a lesson file).

    python lab16_cache_publisher.py FOLDER

The learner's publisher.publish_one with the cache worker's broker (the row's job must run on the worker
that keeps results only briefly).  Started with the workers, since importing Celery takes a while; on the
checker's go (shared.handshake) it publishes once and writes what happened as its result.
"""

import sys

from lab16_publishing import CACHE_PUBLISHER, publishing

from shared import handshake

LIFETIME = 1800.0  # waits for the row as long as a whole matrix may take; FOLDER/stop ends it sooner


def main(folder: str) -> int:
    from publisher import publish_one  # the learner's module, from the work dir
    handshake.ready(folder, CACHE_PUBLISHER)
    if handshake.wait_go(folder, CACHE_PUBLISHER, lifetime=LIFETIME) is None:
        return 0  # told to stop (or the matrix never got to the row)
    try:
        with publishing():  # the matrix worker's claims wait meanwhile (lab16_probe)
            outcome = {"published": bool(publish_one())}
    except Exception as exc:  # noqa: BLE001 - reported to the checker, which decides
        outcome = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    handshake.write_result(folder, CACHE_PUBLISHER, outcome)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
