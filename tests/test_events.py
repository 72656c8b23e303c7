"""shared/events.py: event files appended by many processes at once and read back as facts."""

from shared.events import append_event, job_events, job_runs, read_events, task_runs


def test_read_events_keeps_only_the_events_that_match(tmp_path):
    path = tmp_path / "events.jsonl"
    append_event(path, "start", task_id="a", path="x")
    append_event(path, "end", task_id="a")
    append_event(path, "start", task_id="b")
    assert [e["task_id"] for e in read_events(path, kind="start")] == ["a", "b"]
    assert [e["kind"] for e in read_events(path, task_id="a")] == ["start", "end"]
    assert read_events(path, kind="start", path="x")[0]["task_id"] == "a"  # a field named path
    assert read_events(path, kind="retry") == []


def test_job_events_are_one_jobs_starts_in_file_order(tmp_path):
    path = tmp_path / "events.jsonl"
    for kind, task, task_id, args in (("start", "products.export", "a", ["job-1", 2]), ("start", "tick", "b", []),
                                      ("end", "products.export", "a", ["job-1"]), ("start", "other", "c", ["job-1"]),
                                      ("start", "products.export", "d", ["job-2"]),
                                      ("start", "products.export", "e", ["job-1"])):
        append_event(path, kind, task=task, task_id=task_id, args=args)
    assert [e["task_id"] for e in job_events(path, "job-1")] == ["a", "c", "e"]
    assert [e["task_id"] for e in job_events(str(path), "job-1", task="products.export")] == ["a", "e"]
    assert [e["task_id"] for e in job_events(path, "job-1", kind="end")] == ["a"]
    events = read_events(path) + [{"kind": "start", "args": None}, {"kind": "start"}]
    assert [e["task_id"] for e in job_events(events, "job-1", task_id="e")] == ["e"]
    assert job_events(tmp_path / "missing.jsonl", "job-1") == []


def test_task_runs_pair_the_kth_start_of_a_message_in_a_process_with_its_kth_end():
    def event(kind, task_id, pid, job="j1"):
        return {"kind": kind, "task_id": task_id, "pid": pid, "args": [job]}
    events = [event("start", "m1", 10), event("start", "m1", 11), event("end", "m1", 10),  # 11 was killed
              event("start", "m1", 10), event("start", "m2", 10, job="j2"), event("end", "m2", 10, job="j2")]
    runs = task_runs(events)
    assert [(s["pid"], e is not None) for s, e in runs] == [(10, True), (11, False), (10, False), (10, True)]
    assert runs[0][1] is events[2] and runs[3][1] is events[5]
    assert [(s["pid"], e) for s, e in job_runs(events, "j1")] == [(10, events[2]), (11, None), (10, None)]
