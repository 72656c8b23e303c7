"""Runs in a probe next to the learner's api_states (shared/probe.py): reads and sets the in-memory
records the way lesson 01's checks need.  Plain data out; the judge decides."""

import api_states


def job(job_id: str) -> dict:
    """A copy of the stored record (the judge compares it before and after a refused move)."""
    return dict(api_states.jobs[job_id])


def job_ids() -> list[str]:
    return list(api_states.jobs)


def set_status(job_id: str, status: str) -> None:
    """Set the stored status directly: a derived flag must follow it on the next read."""
    api_states.jobs[job_id]["status"] = status
