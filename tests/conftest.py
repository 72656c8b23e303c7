import os
import signal
import sys
from pathlib import Path

# pytest keeps the test modules it has rewritten (assertion rewriting: ~0.9 CPU-s for each of the five
# pytest processes) only where bytecode may be written, and this machine kind sets PYTHONDONTWRITEBYTECODE.
# The suite's own processes may write it (__pycache__, ignored by git); what they start keeps the
# environment as it is.
sys.dont_write_bytecode = False

KIT_ROOT = Path(__file__).resolve().parent.parent
if str(KIT_ROOT) not in sys.path:
    sys.path.insert(0, str(KIT_ROOT))

# Each parallel worker (gw0, gw1, …) gets its own isolation slot: its own Redis databases and MySQL
# schema, so lessons on the shared servers can run side by side (see checks/runner.py lab_slot).
_worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
# Slots 2..7, one per worker (make test runs six): slot 0 is the learner's own and slot 1 the default of
# hand-run checks, so `make test` can run beside both.
# LAB_TEST_SLOT pins one slot instead (a developer running a few tests beside other runs).
os.environ["LAB_SLOT"] = os.environ.get("LAB_TEST_SLOT") or str(2 + int(_worker[2:] or 0) % 6)

# Tests that press Ctrl-C (SIGINT) on a process they start need it heard as a terminal delivers it.  A suite
# started with SIGINT ignored (put in the background by a shell without job control) would hand that on
# to every process it starts; a handler here is not inherited, so each starts with the default instead.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _controller() -> bool:
    return os.environ.get("PYTEST_XDIST_WORKER") is None


def _own_servers_running() -> bool:
    """The kit's native servers (make services) are up: the ones tests/test_services.py starts."""
    from shared.services import mode
    from shared.services_native import MYSQL, REDIS
    return mode() == "native" and any(s.pid() for s in (REDIS, MYSQL))


_SERVERS_WERE_UP: list[bool] = []


def pytest_sessionstart(session):
    if _controller():
        _SERVERS_WERE_UP.append(_own_servers_running())


def pytest_sessionfinish(session, exitstatus):
    # A run that collected nothing proved nothing: fail it instead of pytest's quiet exit 5.
    if exitstatus == 5:
        session.exitstatus = 1
        print("\nno tests were collected — failing the run", file=sys.stderr)
    # The machine as the run found it: servers the tests started are stopped; a learner's are left alone.
    if _controller() and _SERVERS_WERE_UP == [False] and _own_servers_running():
        from shared import servicectl
        servicectl.down()


def pytest_report_header(config):
    from tests import daily
    return daily.header()


def pytest_configure(config):
    # Once, in the controller, before any worker: the browser tests need Chromium (installed when root).
    if _controller():
        from tests import webdriver
        webdriver.install_if_root()


# The longest tests (15–45 s each on two cores) are handed out first: pytest-xdist gives tests to its
# workers in collection order, and one of these left for the end would run alone while the others idle.
LONGEST_FIRST = ("tests/test_distributed.py::test_short_drill", "tests/test_soak.py::",
                 "tests/test_lessons.py::test_reference_lesson_passes_every_check", "tests/test_learner_walk.py::")


def _group(item) -> str:
    """Tests that wait alike: a file, or a lesson's mutants (lesson 04's and 05's wait out their bounds)."""
    path = item.nodeid.split("::")[0]
    if path == "tests/test_mutants.py":
        return path + item.nodeid.split("[", 1)[-1][:2]
    return path


def _interleaved(items: list) -> list:
    """Round-robin over the groups, each keeping its order: side by side, tests that mostly wait (a hung
    mutant running out its bound, a learner walk of lesson 04) meet tests that compute, instead of four
    of a kind idling the machine together (a 20-second dip to 20 % busy, in the 2-second timeline)."""
    groups: dict[str, list] = {}
    for item in sorted(items, key=_group):  # stable: each group keeps its order
        groups.setdefault(_group(item), []).append(item)
    # Neighbours in the round are far apart in the course: lesson 04's mutants run beside 12's, not 05's.
    ordered = list(groups)
    half = (len(ordered) + 1) // 2
    second = ordered[half:] + [""] * (2 * half - len(ordered))
    queues = [groups[key] for pair in zip(ordered[:half], second, strict=True) for key in pair if key]
    mixed = []
    while queues:
        for queue in queues:
            mixed.append(queue.pop(0))
        queues = [queue for queue in queues if queue]
    return mixed


def pytest_collection_modifyitems(config, items):
    # Stable sorts after the mix: the longest first, and last of all the tests that hold the kit's shared
    # servers alone (servicectl.in_use(exclusive=True)): handed out mid-run, each waited up to 11 s for a
    # soak test's shared hold to end while later shared runs queued behind it and their workers idled.
    items[:] = _interleaved(items)
    items.sort(key=lambda item: "running_alone" in getattr(item, "fixturenames", ()))
    items.sort(key=lambda item: 0 if item.nodeid.startswith(LONGEST_FIRST[:2]) else
               1 if item.nodeid.startswith(LONGEST_FIRST) else 2)
