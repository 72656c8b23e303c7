"""The learner's task through a probe (shared.lesson_celery: learner_task, send_in_probe, result_in_probe,
state_in_probe, LearnerTask with its value and settled; lessons 08–11) and a server stopped for a drill
(shared.servicectl.stop_for_drill; lessons 11 and 12), each with a small test of its own."""

import sys
import textwrap

import pytest

from shared import lesson_celery, servicectl
from shared.lesson_celery import LearnerTask, learner_task, result_in_probe, send_in_probe, state_in_probe

# A stand-in for a learner's Celery task: what apply_async was given, and AsyncResult's answers.
TASKS_MODULE = textwrap.dedent('''
    class Result:
        def __init__(self, task_id):
            self.id, self.state = task_id, "SUCCESS"

        def get(self, timeout):
            if timeout < 1:
                raise TimeoutError("no result yet")
            return {"id": self.id, "timeout": timeout}


    class Task:
        sent = []

        def apply_async(self, args=None, **options):
            self.sent.append((args, options))
            return Result(options.get("task_id", "generated"))

        def AsyncResult(self, task_id):
            return Result(task_id)


    export_products = Task()
''')


@pytest.fixture
def tasks_module(tmp_path, monkeypatch):
    (tmp_path / "h2_learner_tasks.py").write_text(TASKS_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "h2_learner_tasks:export_products"
    sys.modules.pop("h2_learner_tasks", None)


def test_the_probe_side_sends_waits_and_reads_with_the_learner_s_task(tasks_module):
    task = learner_task(tasks_module)
    assert task is sys.modules["h2_learner_tasks"].export_products
    # task_id and queue go to apply_async only when given (lesson 10 lets Celery pick the id).
    assert send_in_probe(tasks_module, ["job", [1]], "id-1", "drill") == "id-1"
    assert send_in_probe(tasks_module, ["job", 5.0, 2]) == "generated"
    assert task.sent == [(["job", [1]], {"task_id": "id-1", "queue": "drill"}), (["job", 5.0, 2], {})]
    assert result_in_probe(tasks_module, "id-1", 20) == {"id": "id-1", "timeout": 20}
    with pytest.raises(TimeoutError):  # what get raises goes up, for the probe to report
        result_in_probe(tasks_module, "id-1", 0.5)
    assert state_in_probe(tasks_module, "id-1") == "SUCCESS"


class FakeProbe:
    """A stand-in for shared.probe.Probe: what the judge asked of it."""

    def __init__(self):
        self.asked = []

    def module(self, name, *functions):
        self.asked.append(("module", name, functions))

    def call(self, target, *args, timeout=30.0):
        self.asked.append(("call", target, args, timeout))
        return f"answer of {target.rpartition(':')[2]}"


def test_learner_task_asks_the_probe_for_each_use_of_the_task():
    probe = FakeProbe()
    task = LearnerTask(probe, "export_tasks:export_products")
    task.load()
    assert task.send(["job", []], "id-1") == "answer of send_in_probe"
    task.result("id-1", 1.5)
    task.state("id-1")
    where = "export_tasks:export_products"
    assert probe.asked == [
        ("module", "export_tasks", ("export_products",)),
        ("call", "shared.lesson_celery:send_in_probe", (where, ["job", []], "id-1", None), 30.0),
        # The wait on the result, plus the margin a probe call may take beyond it.
        ("call", "shared.lesson_celery:result_in_probe", (where, "id-1", 1.5), 16.5),
        ("call", "shared.lesson_celery:state_in_probe", (where, "id-1"), 30.0),
    ]
    # Every target the judge names is a function of this module, as the probe resolves it.
    for _, target, *_ in probe.asked[1:]:
        assert callable(getattr(lesson_celery, target.partition(":")[2]))


def test_value_fails_the_check_in_the_lesson_s_words_with_what_get_raised(monkeypatch):
    monkeypatch.setenv("CELERY_RESULT_BACKEND", "redis://:h2-secret-word@127.0.0.1:6384/1")

    class Raising(FakeProbe):
        def call(self, target, *args, timeout=30.0):
            raise RuntimeError("no backend at redis://:h2-secret-word@127.0.0.1:6384/1")

    task = LearnerTask(FakeProbe(), "export_tasks:export_products")
    assert task.value("id-1", 5, lambda why: f"failed: {why}") == "answer of result_in_probe"
    task = LearnerTask(Raising(), "export_tasks:export_products")
    with pytest.raises(AssertionError) as raised:
        task.value("id-1", 5, lambda why: f"task id-1 did not succeed: {why}")
    assert str(raised.value) == "task id-1 did not succeed: RuntimeError: no backend at ***"


def test_settled_waits_for_an_ended_state_and_gives_the_state_it_got():
    class Changing(FakeProbe):
        def __init__(self, states):
            super().__init__()
            self.states = states

        def call(self, target, *args, timeout=30.0):
            self.asked.append(target)
            return self.states.pop(0) if len(self.states) > 1 else self.states[0]

    probe = Changing(["PENDING", "STARTED", "FAILURE"])
    assert LearnerTask(probe, "export_tasks:export_products").settled("id-1", 10) == "FAILURE"
    assert probe.asked == ["shared.lesson_celery:state_in_probe"] * 4  # three looks, then the state it returns
    # Never ended within the bound: the state as it is then (the check judges it), not a time-out.
    assert LearnerTask(Changing(["PENDING"]), "export_tasks:export_products").settled("id-2", 0.2) == "PENDING"


def test_stop_for_drill_stops_and_restarts_or_says_the_item_cannot_be_proved(monkeypatch):
    done = []
    monkeypatch.setattr(servicectl, "stop_service", lambda name: done.append(("stop", name)) or f"{name} pid 7 stopped")
    monkeypatch.setattr(servicectl, "up", lambda names: done.append(("up", names)) or "native")
    assert servicectl.stop_for_drill("redis") == "redis pid 7 stopped"
    assert servicectl.stop_for_drill("mysql", restart=True) == "mysql pid 7 stopped"
    assert done == [("stop", "redis"), ("stop", "mysql"), ("up", ["mysql"])]

    def refuse(name):
        raise servicectl.ServiceError(f"LAB_SERVICES=external: the checker cannot stop a {name} you run yourself")
    monkeypatch.setattr(servicectl, "stop_service", refuse)
    with pytest.raises(AssertionError, match="^this item cannot be proved: LAB_SERVICES=external"):
        servicectl.stop_for_drill("redis")

    # A restart that cannot start the server again is unprovable too (lesson 11's database restart).
    monkeypatch.setattr(servicectl, "stop_service", lambda name: "stopped")

    def cannot_start(names):
        raise servicectl.ServiceError("mysql is not reachable")
    monkeypatch.setattr(servicectl, "up", cannot_start)
    with pytest.raises(AssertionError, match="cannot be proved: mysql is not reachable"):
        servicectl.stop_for_drill("mysql", restart=True)
