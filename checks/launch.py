"""Start one verifier so that nothing in the learner's folder can stand in for the kit.

    python -I checks/launch.py labNN_verify.py   (cwd: the work dir; started by checks/inbox.py)

`-I` keeps PYTHONPATH, the user's site-packages and the work dir off the path while this file sets up.
The verdict key is read from its pipe and the channel is opened before the folder joins sys.path, and the
folder joins it after the standard library (a learner's `json.py` or `hmac.py` shadows nothing the
kit uses) and after the kit itself (a learner's `shared/` or `checks/` is never imported).
"""

import os
import runpy
import sys
import sysconfig
from pathlib import Path

KIT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(KIT))

from checks.verdicts import Signer, read_key  # noqa: E402
from shared import tap  # noqa: E402  (and with it everything tap needs, before the folder is on the path)


def main() -> None:
    key = read_key(int(os.environ.pop("TASKLAB_VERDICT_KEY_FD")))
    channel = int(os.environ.pop("TASKLAB_VERDICT_FD"))
    os.set_inheritable(channel, False)  # the learner's processes started from here never get it
    signer = Signer(channel, key, os.environ.pop("TASKLAB_VERDICT_RUN"))
    del key
    verifier = sys.argv[1]
    # This process is the verifier: only its own records count (a fork of it, made by learner code, has
    # another pid), and it says so first, before any learner code can run.
    signer.send({"type": "launch", "verifier": verifier})
    tap.install_channel(signer)
    work = str(Path.cwd())
    stdlib = {sysconfig.get_path(name) for name in ("stdlib", "platstdlib")}
    # After the kit and the standard library, before site-packages: where the verifier finds its own
    # helper modules and the learner's files, as `python labNN_verify.py` would in the folder.
    after = max((i for i, p in enumerate(sys.path) if p in stdlib or p.endswith("lib-dynload")), default=0)
    sys.path.insert(after + 1, work)
    sys.argv = [str(Path(work) / verifier), *sys.argv[2:]]
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
