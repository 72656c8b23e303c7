"""What travels between a judge and its probe (shared/probe.py, shared/probe_server.py): values as plain JSON
with tags for the few kinds rows and results carry, and a learner's exception as data, rebuilt on the
judge's side (LearnerRaised) as a subclass of the class it had when the judge knows that class."""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import os
import uuid
from pathlib import Path


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


def rebuild(raised: dict) -> BaseException:
    """The exception a probe answered with (exception_data), as a LearnerRaised the judge can catch."""
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


def exception_data(exc: BaseException) -> dict:
    """An exception as data: its type and ancestry, message, args and traceback (both bounded)."""
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
