"""Kit helper process for check 12.4 (not a lesson file): a publisher's claims, run on the checker's word.

    python lab12_claimer.py FOLDER NAME

Says it is ready and waits for the checker's go (shared/handshake.py); the plan says how many times to
call the learner's publisher.claim_event() ({"rounds": n}); the results, [{"event": id or None} |
{"error": …}], are written as this helper's result.

With {"hold": true} in the plan, the first claim stops right after its first statement that takes row
locks (a locking read or a write): its transaction stays open with every lock it took.  The helper writes
held-NAME (that statement as sent to the server) and goes on only at the checker's go for round 2.  So
"publisher A is inside its claim" is a file A wrote, not a moment the checker guessed, and A can be held
as long as the checker needs: no statement is running, so no statement time limit applies.
"""

import sys

from shared.handshake import error_of, hold_after_first_lock, serve


def main(folder: str, name: str) -> None:
    from publisher import claim_event  # an import error ends the process before it says ready

    def claims(plan: dict) -> list[dict]:
        if plan.get("hold"):
            hold_after_first_lock(folder, name)
        results = []
        for _ in range(int(plan.get("rounds", 1))):
            try:
                event = claim_event()
                results.append({"event": None if event is None else str(event["id"])})
            except Exception as exc:  # noqa: BLE001 - reported to the checker, which decides
                results.append(error_of(exc, 200))
        return results
    serve(folder, name, claims)


if __name__ == "__main__":
    main(*sys.argv[1:3])
