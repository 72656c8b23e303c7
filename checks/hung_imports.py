"""After a check ran out of time: does importing each of the learner's modules ever end?

    python hung_imports.py OUT.json SECONDS MODULE…      (a kit script: run in a box by checks/runner.py)

Code at a module's top level runs at import.  An endless loop there (a `while True:` meant for
`if __name__ == "__main__":`) makes every check that imports the module hang until its own limit, one
after another.  So once a check has timed out, each of the lesson's modules is imported alone, in a
process of its own, with the time that check had (tasks.json's limit for it): an import that alone does
not finish within a whole check's limit would make every check that imports it time out too.  The runner
then says so once instead of waiting out every remaining check.  This runs only after a check's own limit
has already run out: a folder whose imports end is never judged by it.
"""

import json
import subprocess
import sys
from pathlib import Path

def main() -> int:
    out, limit, names = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
    hung = []
    for name in names:
        try:
            subprocess.run([sys.executable, "-c", f"import {name}"], cwd=Path.cwd(), timeout=limit,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            hung.append(name)
    out.write_text(json.dumps({"hung": hung, "limit": limit}), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
