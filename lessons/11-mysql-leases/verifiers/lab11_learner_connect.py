"""A probe for check 11.9 (learner code runs here, not in the judge):
`python lab11_learner_connect.py CASES_JSON`, a list of [name, url] (url null: the real DATABASE_URL).  For
each case: set DATABASE_URL, call state_store.connect(), run SELECT 1, and report (shared/probe_report.py) the outcome,
error, traceback, whether it is a ValueError and everything the learner's code printed.  The checker looks
for the password in all of it, so nothing is redacted here.
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
    from shared import probe_report
    cases = json.loads(cases_json)
    import state_store  # an import error ends the process with no report: the checker shows its output
    probe_report.write({"cases": [probe(state_store, name, url) for name, url in cases]})


if __name__ == "__main__":
    main(sys.argv[1])
