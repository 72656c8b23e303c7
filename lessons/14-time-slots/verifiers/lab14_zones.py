"""Kit helper process for check 14.3 (not a lesson file): the learner's execution_slot in this process's zone.

    TZ=LAB-8 python lab14_zones.py

Run in two local time zones; it reports (shared/probe_report.py) the slot name of each moment below (one
instant in three zones, a different instant, one instant on both sides of a date line) and what a naive
datetime gives.
"""

from datetime import datetime, timedelta, timezone


def zone(hours: int) -> timezone:
    return timezone(timedelta(hours=hours))


MOMENTS = {
    "plus8": datetime(2026, 1, 1, 18, 0, 59, tzinfo=zone(8)),
    "utc": datetime(2026, 1, 1, 10, 0, 59, tzinfo=timezone.utc),
    "minus5": datetime(2026, 1, 1, 5, 0, 59, tzinfo=zone(-5)),
    "wall_as_utc": datetime(2026, 1, 1, 18, 0, 59, tzinfo=timezone.utc),
    "new_year_plus8": datetime(2026, 1, 1, 3, 30, tzinfo=zone(8)),
    "new_year_utc": datetime(2025, 12, 31, 19, 30, tzinfo=timezone.utc),
}


def main() -> None:
    from schedule_tasks import execution_slot
    out = {}
    for name, when in MOMENTS.items():
        try:
            out[name] = execution_slot(when)
        except Exception as exc:  # noqa: BLE001 - reported to the checker, which decides
            out[name] = f"error: {type(exc).__name__}: {str(exc)[:120]}"
    try:
        out["naive"] = "accepted: " + str(execution_slot(datetime(2026, 1, 1, 10, 0, 59)))
    except (ValueError, TypeError) as exc:
        out["naive"] = "refused: " + type(exc).__name__
    except Exception as exc:  # noqa: BLE001
        out["naive"] = f"error: {type(exc).__name__}: {str(exc)[:120]}"
    from shared import probe_report
    probe_report.write(out)


if __name__ == "__main__":
    main()
