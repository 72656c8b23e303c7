"""Learner code runs in a probe, never in the judge: the one bridge between them.

The judge (a lesson's verifier, see checks/judge.py) never imports a learner module.  When a check must
call the learner's function, it asks a probe: a separate Python process started in the work folder
with the learner's files on its path.  The probe calls the function and answers with what happened —
the return value as plain data, or the exception's type and message.  Observations, never verdicts:
nothing a probe says means "passed"; the judge decides, and checks against rows, files and answers it
sees itself wherever it can.

    learner = Probe()                              # one per judge; started on first use
    store = learner.module("state_store")          # a stand-in: attribute calls go to the probe
    job_id = store.submit_snapshot([5])            # runs in the probe; a plain value comes back
    learner.call("lab05_learner:to_thread_exit", 3)   # a function of the kit's, run next to learner code
    learner.ask("lab04_learner:load", keys=("capacity",))   # the same, its answer a dict holding these keys

Calls may come from several judge threads at once; the probe runs each in a thread of its own, so
"many threads claim at once" still happens at once.  Every call is bounded (a learner function that
never returns fails its check and the probe is started afresh), every answer is bounded in size and
checked for shape.

The probe process is shared/probe_server.py; what travels between them, shared/probe_wire.py.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from shared.probe_wire import LearnerRaised, Opaque, decode, encode, rebuild
from shared.warm import WarmPopen

# The names a lesson's judge imports from here.
__all__ = ["Answer", "AppClient", "LearnerRaised", "ModuleStandIn", "Opaque", "Probe", "ProbeError", "shaped"]

KIT = Path(__file__).resolve().parent.parent
ANSWER_LIMIT = 4 * 1024 * 1024   # one answer (a list of rows fits easily)
CALL_TIMEOUT = 30.0              # one call; a check may ask for less or more
START_TIMEOUT = 30.0


class ProbeError(AssertionError):
    """The probe broke down (no answer in time, an answer of the wrong shape, the process gone): a finding
    about learner code that ran in it, said in the learner's terms.  An AssertionError, so the check fails."""


class _Call:
    def __init__(self):
        self.done = threading.Event()
        self.answer: dict | None = None


class Probe:
    """The judge's handle on one probe process (started on first use, again after it breaks)."""

    def __init__(self, cwd: Path | str | None = None, env: dict | None = None, verifiers: Path | str | None = None):
        self.cwd = Path(cwd or Path.cwd())
        self.env = env
        self.verifiers = Path(verifiers) if verifiers else _verifiers_dir()
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._pending: dict[int, tuple[subprocess.Popen, _Call]] = {}
        self._ids = itertools.count(1)
        self._out = None

    # -- life

    def _start(self, first_module: str) -> None:
        req_r, req_w = os.pipe()
        ans_r, ans_w = os.pipe()
        # What learner code prints goes to the run's probe.log (never into the judge's own output).
        logs = (self.env or os.environ).get("TASKLAB_LOG_DIR")
        output = open(os.path.join(logs, "probe.log"), "ab") if logs else subprocess.DEVNULL
        try:
            self._proc = WarmPopen(  # forked warm in a box when it can be (shared/warm.py)
                [sys.executable, "-I", str(KIT / "shared" / "probe_server.py"), str(req_r), str(ans_w),
                 str(self.verifiers), first_module],  # the module named first: a warm start imports what it does
                cwd=self.cwd, env=self.env, pass_fds=(req_r, ans_w), stdin=subprocess.DEVNULL,
                stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            os.close(req_r)
            os.close(ans_w)
            if output is not subprocess.DEVNULL:
                output.close()
        self._out = os.fdopen(req_w, "wb", buffering=0)
        reader = threading.Thread(target=self._read, args=(self._proc, os.fdopen(ans_r, "rb")), daemon=True)
        reader.start()

    def _read(self, proc: subprocess.Popen, answers) -> None:
        with answers:
            self._read_answers(proc, answers)

    def _read_answers(self, proc: subprocess.Popen, answers) -> None:
        buffer = b""
        while True:
            chunk = answers.read1(65536) if hasattr(answers, "read1") else answers.read(65536)
            if not chunk:
                break
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            if len(buffer) > ANSWER_LIMIT or any(len(line) > ANSWER_LIMIT for line in lines):
                self._fail_all(proc, "over-long answer")
                return
            for line in lines:
                try:
                    answer = json.loads(line)
                    owner, call = self._pending[int(answer["id"])]
                except (ValueError, KeyError, TypeError):
                    continue  # not an answer to anything we asked: ignored, the call still waits for its own
                if owner is not proc:
                    continue  # only the process asked may answer
                del self._pending[int(answer["id"])]
                call.answer = answer
                call.done.set()
        self._fail_all(proc, "the probe process ended")

    def _fail_all(self, proc: subprocess.Popen, why: str) -> None:
        """That probe process is done for: stop it, and every call still waiting on it gets `why`."""
        with self._lock:
            if self._proc is proc:
                self._stop_locked()
            for number, (owner, call) in list(self._pending.items()):
                if owner is proc:
                    del self._pending[number]
                    call.answer = {"gone": why}
                    call.done.set()

    def _stop_locked(self) -> None:
        proc, self._proc = self._proc, None
        if self._out is not None:
            try:
                self._out.close()
            except OSError:
                pass
            self._out = None
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, 9)
            except ProcessLookupError:
                pass
            proc.wait()

    def stop(self) -> None:
        with self._lock:
            self._stop_locked()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    # -- asking

    def _ask(self, request: dict, timeout: float) -> dict:
        from shared.i18n import t
        call = _Call()
        with self._lock:
            if self._proc is None:
                self._start(request["target"].partition(":")[0])
            number = next(self._ids)
            self._pending[number] = (self._proc, call)
            proc, out = self._proc, self._out
        data = (json.dumps(dict(request, id=number)) + "\n").encode()
        try:
            with self._write_lock:
                out.write(data)
        except (OSError, ValueError):
            call.answer = {"gone": "the probe process ended"}
            call.done.set()
        target = request["target"]
        if not call.done.wait(timeout):
            self._fail_all(proc, "timeout")
            raise ProbeError(t("{target} did not return within {timeout:g}s", target=target, timeout=timeout))
        answer = call.answer or {}
        if "gone" in answer:
            raise ProbeError(t("the process running your code ended during {target} ({gone})", target=target,
                               gone=answer['gone']))
        return answer

    def call(self, target: str, *args, timeout: float = CALL_TIMEOUT, **kwargs):
        """Call "module:function" (or "module:Class.method" ...) in the probe; its return value, or the
        exception it raised, rebuilt here (LearnerRaised)."""
        answer = self._ask({"op": "call", "target": target, "args": encode(list(args)),
                            "kwargs": encode(kwargs)}, timeout)
        return self._result(answer, target)

    def ask(self, target: str, *args, keys: tuple[str, ...] = (), timeout: float = CALL_TIMEOUT, **kwargs) -> dict:
        """call() a kit probe function whose answer the judge reads by `keys`: a dict holding them, else the
        check fails (shaped)."""
        return shaped(target.rpartition(":")[2], self.call(target, *args, timeout=timeout, **kwargs), keys)

    def get(self, target: str, timeout: float = CALL_TIMEOUT) -> dict:
        """What "module:name" is in the probe: {"callable": True} or {"value": ...}; importing the module
        may raise (rebuilt here)."""
        answer = self._ask({"op": "get", "target": target}, timeout)
        if "raised" in answer:
            raise rebuild(answer["raised"])
        if answer.get("callable") is True:
            return {"callable": True}
        if "value" in answer:
            return {"value": self._decoded(answer["value"], target)}
        raise ProbeError(f"unexpected answer for {target}")

    def module(self, name: str, *functions: str, values: tuple[str, ...] = (),
               timeout: float = CALL_TIMEOUT) -> ModuleStandIn:
        """A stand-in for the learner's module `name`: imported in the probe now (an import error fails the
        check, said in the learner's terms), checked to define `functions` (callables) and `values` (any)."""
        from shared.settings import redact
        from shared.i18n import t
        for function in functions or ("__name__",):
            try:
                got = self.get(f"{name}:{function}", timeout)
            except LearnerRaised as exc:
                if exc.type_name in ("AttributeError",) and function != "__name__":
                    raise AssertionError(t("{name}.py has no {function}", name=name, function=function)) from None
                said = redact(f"{exc.type_name}: {exc}")  # an import error may quote a URL with its password
                raise AssertionError(t("cannot import {name}: {said}", name=name, said=said)) from None
            if function != "__name__":
                assert got.get("callable"), t("{name}.py has no {function}", name=name, function=function)
        for value in values:
            try:
                self.get(f"{name}:{value}", timeout)
            except LearnerRaised:
                raise AssertionError(t("{name}.py has no {value}", name=name, value=value)) from None
        return ModuleStandIn(self, name, timeout)

    def app(self, target: str, opener: str = "shared.asgi_probe:open") -> AppClient:
        """The learner's ASGI app ("module:attr"), asked over HTTP inside the probe.  `opener`: a probe-side
        function that builds the app from `target` its own way and returns shared.asgi_probe.serve(app)."""
        return AppClient(self, target, opener)

    def _result(self, answer: dict, target: str):
        if "raised" in answer:
            raise rebuild(answer["raised"])
        if "value" not in answer:
            raise ProbeError(f"unexpected answer for {target}")
        return self._decoded(answer["value"], target)

    @staticmethod
    def _decoded(value, target: str):
        try:
            return decode(value)
        except (ValueError, TypeError, KeyError) as exc:
            raise ProbeError(f"unexpected value from {target}: {exc}") from None


def shaped(function: str, got, keys: tuple[str, ...] = (), ok: bool = True):
    """`got`, a kit probe function's answer, when it has the shape the judge reads: a dict holding `keys`, and
    `ok` (any further test of its shape the caller made); else the check fails, saying what came back."""
    from shared.i18n import t
    assert ok and isinstance(got, dict) and all(key in got for key in keys), t(
        "the process running your code answered {function} out of shape: {got!r:.200}", function=function, got=got)
    return got


class ModuleStandIn:
    """store.name(...) calls the learner's function in the probe; store.NAME reads a plain value.  Every
    call is bounded by `timeout`."""

    def __init__(self, probe: Probe, name: str, timeout: float = CALL_TIMEOUT):
        self._probe, self._name, self._timeout = probe, name, timeout
        self._callable: set[str] = set()  # names already seen to be functions: no second look

    def __getattr__(self, attr: str):
        if attr.startswith("_"):
            raise AttributeError(attr)
        target = f"{self._name}:{attr}"
        if attr not in self._callable:
            got = self._probe.get(target, self._timeout)
            if not got.get("callable"):
                return got["value"]
            self._callable.add(attr)
        return lambda *args, **kwargs: self._probe.call(target, *args, timeout=self._timeout, **kwargs)

    def __repr__(self) -> str:
        return f"<learner module {self._name} (in a probe)>"


def _verifiers_dir() -> Path:
    """The kit's verifiers folder of the judge running now (its helper modules run in probes too)."""
    here = os.environ.get("TASKLAB_JUDGE_VERIFIERS")
    return Path(here) if here else KIT


class Answer:
    """An HTTP answer the learner's app gave in the probe: what a TestClient response offers the checks."""

    def __init__(self, data: dict):
        self.status_code = int(data["status"])
        self.headers = _Headers((str(k), str(v)) for k, v in data["headers"])
        self.text = str(data["text"])
        self.request = _Request(str(data["url"]))

    def json(self):
        import json as _json
        return _json.loads(self.text)


class _Headers(dict):
    """Header names in any case, as HTTP has them (the last of repeated ones)."""

    def __init__(self, pairs):
        super().__init__((k.lower(), v) for k, v in pairs)

    def get(self, name: str, default=None):
        return super().get(name.lower(), default)

    def __getitem__(self, name: str):
        return super().__getitem__(name.lower())

    def __contains__(self, name) -> bool:
        return super().__contains__(str(name).lower())


class _Request:
    def __init__(self, url: str):
        self.url = url


class AppClient:
    """The learner's ASGI app, served in the probe by a TestClient (no server, no port); the judge sees only
    the answers.  `with probe.app("api_states:app") as client: client.post("/exports", json=...)`."""

    def __init__(self, probe: Probe, target: str, opener: str = "shared.asgi_probe:open"):
        self._probe, self._target, self._opener, self._handle = probe, target, opener, None

    def __enter__(self):
        self._handle = self._probe.call(self._opener, self._target)
        return self

    def __exit__(self, *exc):
        if self._handle is not None:
            handle, self._handle = self._handle, None
            try:
                self._probe.call("shared.asgi_probe:close", handle)
            except (ProbeError, LearnerRaised):
                pass  # a shutdown that fails is the learner's app's; the checks already have their answers

    def request(self, method: str, url: str, **kwargs) -> Answer:
        return Answer(self._probe.call("shared.asgi_probe:request", self._handle, method, url, **kwargs))

    def get(self, url: str, **kwargs) -> Answer:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs) -> Answer:
        return self.request("POST", url, **kwargs)
