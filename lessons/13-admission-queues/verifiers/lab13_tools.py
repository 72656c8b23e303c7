"""Kit helper processes for lesson 13's checks (not a lesson file).  Each runs the learner's code.

    python lab13_tools.py produce FOLDER NAME   a producer: submit_snapshot in rounds, each started by a go file
    python lab13_tools.py publish FOLDER        a publisher loop: publish_one() until FOLDER/stop exists
    python lab13_tools.py admit                 admit_export(cur) inside transaction(), the way a schedule
                                                or a replay calls it; prints {"ok": "admitted"} or {"capacity": …}
    python lab13_tools.py limit                 the default of admit_export's limit parameter in this environment

Every loop is bounded (no file, no work: the process ends by itself).
"""

import json
import os
import sys
import time

LIFETIME = 60.0  # no helper outlives this, whatever happens to the checker


def outcome(fn) -> dict:
    import state_store
    try:
        return {"ok": str(fn())}
    except state_store.CapacityExceeded as exc:
        return {"capacity": str(exc)[:200]}
    except Exception as exc:  # noqa: BLE001 - reported to the checker, which decides
        code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
        return {"error": f"{type(exc).__name__}: {exc}"[:300], "code": code}


def write_json(path: str, value) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(value, handle)
    os.replace(tmp, path)


def produce(folder: str, name: str) -> None:
    import state_store
    open(os.path.join(folder, f"ready-{name}"), "w").close()
    give_up = time.monotonic() + LIFETIME
    round_no = 1
    while time.monotonic() < give_up and not os.path.exists(os.path.join(folder, "stop")):
        go = os.path.join(folder, f"go-{name}-{round_no}")
        if not os.path.exists(go):
            time.sleep(0.002)
            continue
        with open(go, encoding="utf-8") as handle:
            plan = json.load(handle)
        results = []
        for _ in range(plan["n"]):
            started = time.monotonic()
            result = outcome(lambda: state_store.submit_snapshot(list(plan["ids"])))
            result["seconds"] = round(time.monotonic() - started, 4)
            results.append(result)
        write_json(os.path.join(folder, f"res-{name}-{round_no}"), results)
        round_no += 1


def publish(folder: str) -> None:
    from publisher import publish_one
    sent = 0
    give_up = time.monotonic() + LIFETIME
    print("publisher loop running", flush=True)
    while time.monotonic() < give_up and not os.path.exists(os.path.join(folder, "stop")):
        try:
            busy = publish_one()
        except Exception as exc:  # noqa: BLE001 - shown in the log, the loop goes on
            print(f"publish failed: {type(exc).__name__}: {exc}"[:300], flush=True)
            busy = False
            time.sleep(0.2)
        if busy:
            sent += 1
        else:
            time.sleep(0.02)
    print(f"publisher loop stopped after {sent} events", flush=True)


def admit() -> None:
    import state_store

    def attempt():
        with state_store.transaction() as cur:
            state_store.admit_export(cur)
        return "admitted"
    print(json.dumps(outcome(attempt)))


def limit() -> None:
    import inspect

    import state_store
    param = inspect.signature(state_store.admit_export).parameters.get("limit")
    default = None if param is None or param.default is inspect.Parameter.empty else param.default
    print(json.dumps({"default": default}, default=repr))


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    {"produce": produce, "publish": publish, "admit": admit, "limit": limit}[command](*args)
