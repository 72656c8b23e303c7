"""Kit helper process for check 11.9 (not a lesson file): the learner's connect() on each DATABASE_URL.

    python lab11_urlprobe.py CASES_JSON

CASES_JSON is a list of [name, url]; url null keeps the environment's real DATABASE_URL.  For each case the
process sets DATABASE_URL, calls state_store.connect() and runs SELECT 1, capturing everything the learner's
code prints, and writes one JSON line: name, outcome ("connected" or the exception's type), the error text,
its traceback, whether it is a ValueError, and the captured output.  The checker looks for the password in
all of them, so nothing is redacted here.
"""

import contextlib
import io
import json
import os
import sys
import traceback


def probe(state_store, name: str, url: str | None) -> dict:
    if url is not None:
        os.environ["DATABASE_URL"] = url
    captured = io.StringIO()
    error, trace, value_error = "", "", False
    with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
        try:
            conn = state_store.connect()
            try:
                with conn.cursor() as cur:
                    cur.execute("SELECT 1")
            finally:
                conn.close()
            outcome = "connected"
        except BaseException as exc:  # noqa: BLE001 - whatever connect() raises is the finding
            outcome, error, trace = type(exc).__name__, str(exc), traceback.format_exc()
            value_error = isinstance(exc, ValueError)
    return {"name": name, "outcome": outcome, "error": error, "trace": trace, "value_error": value_error,
            "output": captured.getvalue()}


def main(cases_json: str) -> None:
    cases = json.loads(cases_json)
    import state_store  # an import error ends the process with no line: the checker shows its output
    for name, url in cases:
        print(json.dumps(probe(state_store, name, url)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
