"""Runs in a probe next to the learner's api_states (shared/probe.py): sets an in-memory record the way lesson
01's checks need (the judge reads the records itself, as api_states.jobs)."""

import api_states


def set_status(job_id: str, status: str) -> None:
    """Set the stored status directly: a derived flag must follow it on the next read."""
    api_states.jobs[job_id]["status"] = status
