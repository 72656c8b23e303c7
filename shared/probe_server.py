"""The probe process: learner code runs here, never in the judge (shared/probe.py is the judge's handle).

    python -I shared/probe_server.py REQUEST_FD ANSWER_FD VERIFIERS_DIR [FIRST_MODULE]   (cwd: the work folder)

FIRST_MODULE, the module the first request names, is not used here: a warm start (shared/forkserver.py)
reads what it imports, to import that before forking this process.

Each request ("call" or "get" of "module:name") runs in a thread of its own; the answer is the value as
plain data, or the exception as data (shared/probe_wire.py).  Observations, never verdicts.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

KIT = Path(__file__).resolve().parent.parent


def _resolve(target: str):
    import importlib
    module_name, _, path = target.partition(":")
    obj = importlib.import_module(module_name)
    for part in filter(None, path.split(".")):
        obj = getattr(obj, part)
    return obj


def _serve(request_fd: int, answer_fd: int) -> None:
    from shared.probe_wire import decode, encode, exception_data  # the kit's, found before the work folder (main)
    answers = os.fdopen(answer_fd, "wb", buffering=0)
    os.set_inheritable(answer_fd, False)
    lock = threading.Lock()

    def answer(payload: dict) -> None:
        try:
            data = (json.dumps(payload) + "\n").encode()
        except (TypeError, ValueError) as exc:
            data = (json.dumps({"id": payload.get("id"), "raised": exception_data(exc)}) + "\n").encode()
        with lock:
            answers.write(data)

    def handle(request: dict) -> None:
        number = request.get("id")
        try:
            target = _resolve(request["target"])
            if request["op"] == "get":
                answer({"id": number, "callable": True} if callable(target) else
                       {"id": number, "value": encode(target)})
                return
            value = target(*decode(request.get("args", [])), **decode(request.get("kwargs", {})))
            answer({"id": number, "value": encode(value)})
        except BaseException as exc:  # noqa: BLE001 - whatever learner code raises is an observation
            answer({"id": number, "raised": exception_data(exc)})

    with os.fdopen(request_fd, "rb") as requests:
        for line in requests:
            request = json.loads(line)
            threading.Thread(target=handle, args=(request,), daemon=True).start()
    os._exit(0)  # the judge closed its end: stop now, whatever learner threads still run


def main() -> None:
    request_fd, answer_fd, verifiers = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    os.set_inheritable(request_fd, False)
    import sysconfig
    work = str(Path.cwd())
    # Like `python file.py` in the folder, after the standard library (a learner's json.py shadows
    # nothing this file needs) and with the kit's verifiers folder for kit probe functions.
    stdlib = {sysconfig.get_path(name) for name in ("stdlib", "platstdlib")}
    after = max((i for i, p in enumerate(sys.path) if p in stdlib or p.endswith("lib-dynload")), default=0)
    sys.path[after + 1:after + 1] = [verifiers, str(KIT), work]
    _serve(request_fd, answer_fd)


if __name__ == "__main__":
    main()
