import sys
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parent.parent
if str(KIT_ROOT) not in sys.path:
    sys.path.insert(0, str(KIT_ROOT))


def uses_services(lesson_id: str) -> bool:
    from shared import manifest
    return bool(manifest.lesson(lesson_id).get("services"))


def service_safe(value, lesson_id: str):
    """A test parameter; lessons that share the one Redis/MySQL run one at a time in a single xdist worker."""
    import pytest
    marks = [pytest.mark.xdist_group("services")] if uses_services(lesson_id) else []
    return pytest.param(value, marks=marks)


def pytest_sessionfinish(session, exitstatus):
    # A run that collected nothing proved nothing: fail it instead of pytest's quiet exit 5.
    if exitstatus == 5:
        session.exitstatus = 1
        print("\nno tests were collected — failing the run", file=sys.stderr)
