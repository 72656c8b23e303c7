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

    def publish(plan: dict) -> dict:
        try:
            with publishing():  # the matrix worker's claims wait meanwhile (lab16_worker)
                return {"published": bool(publish_one())}
        except Exception as exc:  # noqa: BLE001 - reported to the checker, which decides
            return handshake.error_of(exc)

    # Told to stop (or the matrix never got to the row): it ends without publishing.
    handshake.serve(folder, CACHE_PUBLISHER, publish, lifetime=LIFETIME)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
