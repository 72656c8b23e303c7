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
    learner.call("lab11_probe:race", 8)            # a kit probe function, run next to learner code

Calls may come from several judge threads at once; the probe runs each in a thread of its own, so
"many threads claim at once" still happens at once.  Every call is bounded (a learner function that
never returns fails its check and the probe is started afresh), every answer is bounded in size and
checked for shape.

    python -I shared/probe.py REQUEST_FD ANSWER_FD VERIFIERS_DIR   (cwd: the work folder)
"""

from __future__ import annotations

import base64
import datetime
import decimal
import itertools
import json
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path

KIT = Path(__file__).resolve().parent.parent
ANSWER_LIMIT = 4 * 1024 * 1024   # one answer (a list of rows fits easily)
CALL_TIMEOUT = 30.0              # one call; a check may ask for less or more
START_TIMEOUT = 30.0


# ---------------------------------------------------------------- values on the wire (both sides)

def encode(value, depth: int = 0):
    """Plain JSON, with tags for the few kinds of value rows and results carry."""
    if depth > 40:
        raise ValueError("value nested too deeply")
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else {"$float": repr(value)}
    if isinstance(value, (list, tuple)):
        items = [encode(v, depth + 1) for v in value]
        return items if isinstance(value, list) else {"$tuple": items}
    if isinstance(value, (set, frozenset)):
        return {"$set": [encode(v, depth + 1) for v in value]}
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value) and not any(k.startswith("$") for k in value):
            return {k: encode(v, depth + 1) for k, v in value.items()}
        return {"$dict": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if isinstance(value, datetime.datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, datetime.date):
        return {"$date": value.isoformat()}
    if isinstance(value, datetime.timedelta):
        return {"$timedelta": value.total_seconds()}
    if isinstance(value, decimal.Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, (bytes, bytearray)):
        return {"$bytes": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, os.PathLike):
        return {"$path": os.fspath(value)}
    return {"$object": type(value).__qualname__, "repr": _short_repr(value)}


def _short_repr(value) -> str:
    try:
        return repr(value)[:300]
    except Exception:  # noqa: BLE001 - a learner's __repr__ may raise
        return f"<{type(value).__qualname__}>"


class Opaque:
    """A value that is not plain data (a learner's own object): its type name and repr, nothing more."""

    def __init__(self, type_name: str, text: str):
        self.type_name, self.text = type_name, text

    def __repr__(self) -> str:
        return self.text


TAGS = {
    "$tuple": lambda v: tuple(decode(x) for x in v),
    "$set": lambda v: {decode(x) for x in v},
    "$dict": lambda v: {decode(k): decode(x) for k, x in v},
    "$datetime": datetime.datetime.fromisoformat,
    "$date": datetime.date.fromisoformat,
    "$timedelta": lambda v: datetime.timedelta(seconds=float(v)),
    "$decimal": decimal.Decimal,
    "$bytes": base64.b64decode,
    "$float": float,
    "$path": Path,
}


def decode(value):
    """The inverse of encode, on the judge's side: anything unexpected is refused, never guessed."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [decode(v) for v in value]
    if not isinstance(value, dict):
        raise ValueError(f"unexpected value {type(value).__name__}")
    if len(value) == 1 and next(iter(value)) in TAGS:
        tag, inner = next(iter(value.items()))
        return TAGS[tag](inner)
    if set(value) == {"$object", "repr"}:
        return Opaque(str(value["$object"]), str(value["repr"]))
    if any(k.startswith("$") for k in value):
        raise ValueError(f"unknown tag in {sorted(value)[:3]}")
    return {k: decode(v) for k, v in value.items()}


# ---------------------------------------------------------------- the judge's side

class ProbeError(AssertionError):
    """The probe broke down (no answer in time, an answer of the wrong shape, the process gone): a finding
    about learner code that ran in it, said in the learner's terms.  An AssertionError, so the check fails."""


class LearnerRaised(Exception):
    """An exception the learner's function raised, seen from the judge.  When its class is one the judge
    knows (a builtin, PyMySQL's, Celery's ...), the exception raised here is of a subclass of that class
    too, so `except pymysql.err.OperationalError` catches it."""

    type_name = "Exception"
    learner_traceback = ""


# Modules whose exception classes the judge may rebuild (never the learner's own modules).
TRUSTED_EXCEPTION_MODULES = ("builtins", "pymysql.err", "redis.exceptions", "celery.exceptions",
                             "kombu.exceptions", "billiard.exceptions", "concurrent.futures",
                             "asyncio.exceptions", "json.decoder", "sqlite3")


def _rebuild(raised: dict) -> BaseException:
    module, name = str(raised.get("module", "")), str(raised.get("type", "Exception"))
    message = str(raised.get("message", ""))[:4000]
    args = decode(raised.get("args", [message]))
    base: type = Exception
    # The nearest class in its ancestry the judge knows (a learner's InvalidMove(ValueError) is a ValueError).
    ancestry = [[module, name], *(raised.get("mro") or [])][:30]
    for where, what in (a for a in ancestry if isinstance(a, list) and len(a) == 2):
        found = _trusted_class(str(where), str(what))
        if found is not None:
            base = found
            break
    cls = type(name.split(".")[-1], (LearnerRaised, base) if base is not Exception else (LearnerRaised,),
               {"__module__": f"learner:{module}", "__str__": lambda self: message})
    exc = cls.__new__(cls)
    exc.args = tuple(args) if isinstance(args, list) else (message,)
    exc.type_name = name
    exc.learner_traceback = str(raised.get("traceback", ""))[-4000:]
    return exc


def _trusted_class(module: str, name: str) -> type | None:
    if module not in TRUSTED_EXCEPTION_MODULES or "." in name:
        return None
    import importlib
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None
    if isinstance(found, type) and issubclass(found, Exception) and found is not Exception:
        return found
    return None


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

    def _start(self) -> None:
        req_r, req_w = os.pipe()
        ans_r, ans_w = os.pipe()
        # What learner code prints goes to the run's probe.log (never into the judge's own output).
        logs = (self.env or os.environ).get("LAB_LOG_DIR")
        output = open(os.path.join(logs, "probe.log"), "ab") if logs else subprocess.DEVNULL
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", str(KIT / "shared" / "probe.py"), str(req_r), str(ans_w), str(self.verifiers)],
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
                self._start()
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
            raise ProbeError(t(f"{target} 在 {timeout:g} 秒内没有返回", f"{target} did not return within {timeout:g}s"))
        answer = call.answer or {}
        if "gone" in answer:
            raise ProbeError(t(f"调用 {target} 时运行你代码的进程结束了（{answer['gone']}）",
                               f"the process running your code ended during {target} ({answer['gone']})"))
        return answer

    def call(self, target: str, *args, timeout: float = CALL_TIMEOUT, **kwargs):
        """Call "module:function" (or "module:Class.method" ...) in the probe; its return value, or the
        exception it raised, rebuilt here (LearnerRaised)."""
        answer = self._ask({"op": "call", "target": target, "args": encode(list(args)),
                            "kwargs": encode(kwargs)}, timeout)
        return self._result(answer, target)

    def get(self, target: str, timeout: float = CALL_TIMEOUT) -> dict:
        """What "module:name" is in the probe: {"callable": True} or {"value": ...}; importing the module
        may raise (rebuilt here)."""
        answer = self._ask({"op": "get", "target": target}, timeout)
        if "raised" in answer:
            raise _rebuild(answer["raised"])
        if answer.get("callable") is True:
            return {"callable": True}
        if "value" in answer:
            return {"value": self._decoded(answer["value"], target)}
        raise ProbeError(f"unexpected answer for {target}")

    def module(self, name: str, *functions: str, values: tuple[str, ...] = (),
               timeout: float = CALL_TIMEOUT) -> "ModuleStandIn":
        """A stand-in for the learner's module `name`: imported in the probe now (an import error fails the
        check, said in the learner's terms), checked to define `functions` (callables) and `values` (any)."""
        from shared.celerylab import redact
        from shared.i18n import t
        for function in functions or ("__name__",):
            try:
                got = self.get(f"{name}:{function}", timeout)
            except LearnerRaised as exc:
                if exc.type_name in ("AttributeError",) and function != "__name__":
                    raise AssertionError(t(f"{name}.py 里没有 {function}", f"{name}.py has no {function}")) from None
                said = redact(f"{exc.type_name}: {exc}")  # an import error may quote a URL with its password
                raise AssertionError(t(f"无法导入 {name}：{said}", f"cannot import {name}: {said}")) from None
            if function != "__name__":
                assert got.get("callable"), t(f"{name}.py 里没有 {function}", f"{name}.py has no {function}")
        for value in values:
            try:
                self.get(f"{name}:{value}", timeout)
            except LearnerRaised:
                raise AssertionError(t(f"{name}.py 里没有 {value}", f"{name}.py has no {value}")) from None
        return ModuleStandIn(self, name, timeout)

    def app(self, target: str, opener: str = "shared.asgi_probe:open") -> "AppClient":
        """The learner's ASGI app ("module:attr"), asked over HTTP inside the probe.  `opener`: a probe-side
        function that builds the app from `target` its own way and returns shared.asgi_probe.serve(app)."""
        return AppClient(self, target, opener)

    def _result(self, answer: dict, target: str):
        if "raised" in answer:
            raise _rebuild(answer["raised"])
        if "value" not in answer:
            raise ProbeError(f"unexpected answer for {target}")
        return self._decoded(answer["value"], target)

    @staticmethod
    def _decoded(value, target: str):
        try:
            return decode(value)
        except (ValueError, TypeError, KeyError) as exc:
            raise ProbeError(f"unexpected value from {target}: {exc}") from None


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
    here = os.environ.get("LAB_JUDGE_VERIFIERS")
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


# ---------------------------------------------------------------- the probe's side

def _resolve(target: str):
    import importlib
    module_name, _, path = target.partition(":")
    obj = importlib.import_module(module_name)
    for part in filter(None, path.split(".")):
        obj = getattr(obj, part)
    return obj


def _raised(exc: BaseException) -> dict:
    import traceback
    cls = type(exc)
    try:
        args = encode(list(exc.args))
        json.dumps(args)
    except Exception:  # noqa: BLE001 - an exception's args may be anything
        args = [_short_repr(exc)]
    return {"type": cls.__qualname__, "module": cls.__module__, "message": _short_text(exc), "args": args,
            "mro": [[k.__module__, k.__qualname__] for k in cls.__mro__[1:]],
            "traceback": "".join(traceback.format_exception(exc))[-4000:]}


def _short_text(exc: BaseException) -> str:
    try:
        return str(exc)[:4000]
    except Exception:  # noqa: BLE001
        return f"<{type(exc).__qualname__}>"


def _serve(request_fd: int, answer_fd: int) -> None:
    answers = os.fdopen(answer_fd, "wb", buffering=0)
    os.set_inheritable(answer_fd, False)
    lock = threading.Lock()

    def answer(payload: dict) -> None:
        try:
            data = (json.dumps(payload) + "\n").encode()
        except (TypeError, ValueError) as exc:
            data = (json.dumps({"id": payload.get("id"), "raised": _raised(exc)}) + "\n").encode()
        with lock:
            answers.write(data)

    def handle(request: dict) -> None:
        number = request.get("id")
        try:
            target = _resolve(request["target"])
            if request["op"] == "get":
                answer({"id": number, "callable": True} if callable(target) else
                       {"id": number, "value": encode(target)})
                return
            value = target(*decode(request.get("args", [])), **decode(request.get("kwargs", {})))
            answer({"id": number, "value": encode(value)})
        except BaseException as exc:  # noqa: BLE001 - whatever learner code raises is an observation
            answer({"id": number, "raised": _raised(exc)})

    with os.fdopen(request_fd, "rb") as requests:
        for line in requests:
            request = json.loads(line)
            threading.Thread(target=handle, args=(request,), daemon=True).start()
    os._exit(0)  # the judge closed its end: stop now, whatever learner threads still run


def main() -> None:
    request_fd, answer_fd, verifiers = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    os.set_inheritable(request_fd, False)
    import sysconfig
    work = str(Path.cwd())
    # Like `python file.py` in the folder, after the standard library (a learner's json.py shadows
    # nothing this file needs) and with the kit's verifiers folder for kit probe functions.
    stdlib = {sysconfig.get_path(name) for name in ("stdlib", "platstdlib")}
    after = max((i for i, p in enumerate(sys.path) if p in stdlib or p.endswith("lib-dynload")), default=0)
    sys.path[after + 1:after + 1] = [verifiers, str(KIT), work]
    _serve(request_fd, answer_fd)


if __name__ == "__main__":
    main()
