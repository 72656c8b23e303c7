"""Lesson 07: the export message — the only thing that crosses to another process.

Run:  python message_contract.py   ->  prints the encoded size in bytes (well under 65536)

The contract, enforced by encode_message() before anything is sent:
  - the message holds exactly two keys: job_id (a non-empty string) and rows;
  - every row is a snapshot with exactly id, name, description, is_active, price_cents;
  - id and price_cents are integers (price in cents, never a float or Decimal);
  - every value is plain JSON: no datetime, Decimal, bytes, connection or request object;
  - nothing looks like a credential (a password/token key or value, a URL with user:password@);
  - the UTF-8 JSON bytes stay under 64 KiB.
A worker in another process (or another language) can read such a message, and a
redelivery reads the very same snapshot.
"""

from __future__ import annotations

import json
import re
from uuid import uuid4

MAX_BYTES = 64 * 1024  # the encoded message must be strictly smaller than this
MESSAGE_KEYS = frozenset({"job_id", "rows"})
ROW_FIELDS = frozenset({"id", "name", "description", "is_active", "price_cents"})

# Key names that only ever hold secrets.
SECRET_KEY = re.compile(r"pass(word|wd)?|pwd|secret|token|api[_-]?key|auth|credential|cookie|session", re.I)
# Values that carry a secret inline: scheme://user:password@host, "password=...", "Bearer abc...".
SECRET_VALUE = [
    ("a URL with user:password@", re.compile(r"[a-z][a-z0-9+.-]*://[^/\s:@]*:[^/\s@]+@", re.I)),
    ("a password/token assignment", re.compile(r"\b(pass(word|wd)?|pwd|secret|token|api[_-]?key)\s*[=:]\s*\S", re.I)),
    ("a bearer token", re.compile(r"\bbearer\s+[a-z0-9._~+/-]{8,}", re.I)),
]


class MessageError(ValueError):
    """The message breaks the contract; the text says which rule and where."""


def _is_integer(value) -> bool:
    # bool is a subclass of int in Python, but True is not a price.
    return isinstance(value, int) and not isinstance(value, bool)


def _check_shape(message) -> None:
    if not isinstance(message, dict):
        raise MessageError(f"the message must be a dict, got {type(message).__name__}")
    if set(message) != MESSAGE_KEYS:
        raise MessageError(f"the message must hold exactly job_id and rows, got keys {sorted(map(str, message))}")
    if not isinstance(message["job_id"], str) or not message["job_id"]:
        raise MessageError("job_id must be a non-empty string")
    rows = message["rows"]
    if not isinstance(rows, list):
        raise MessageError(f"rows must be a list, got {type(rows).__name__}")
    for index, row in enumerate(rows):
        if not isinstance(row, dict):
            raise MessageError(f"rows[{index}] must be a dict, got {type(row).__name__}")
        extra, missing = set(row) - ROW_FIELDS, ROW_FIELDS - set(row)
        if extra or missing:
            raise MessageError(
                f"rows[{index}] must hold exactly the five product fields "
                f"(extra: {sorted(map(str, extra))}, missing: {sorted(missing)})")
        for field in ("id", "price_cents"):
            if not _is_integer(row[field]):
                raise MessageError(
                    f"rows[{index}].{field} must be an integer, got {type(row[field]).__name__} {row[field]!r}")


def _check_no_credentials(value, path: str = "message") -> None:
    """Walk every key and string; refuse anything that looks like a secret."""
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and SECRET_KEY.search(key):
                raise MessageError(f"{path}: key {key!r} looks like a credential; secrets never go into a message")
            _check_no_credentials(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_no_credentials(item, f"{path}[{index}]")
    elif isinstance(value, str):
        for what, pattern in SECRET_VALUE:
            if pattern.search(value):
                # Do not echo the value: it may be the very secret we refuse.
                raise MessageError(f"{path}: the text looks like a credential ({what})")


def _first_non_json(value, path: str = "message"):
    """Where the first value JSON cannot represent sits, for a readable error."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path} key {key!r}"
            found = _first_non_json(item, f"{path}.{key}")
            if found:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _first_non_json(item, f"{path}[{index}]")
            if found:
                return found
    elif not (value is None or isinstance(value, (str, int, float, bool))):
        return f"{path} ({type(value).__name__})"
    return None


def encode_message(message: dict) -> bytes:
    """Check message against the contract and return the bytes to send; raise MessageError if it breaks it."""
    _check_shape(message)
    _check_no_credentials(message)
    try:
        # No default=str: an object JSON does not know must fail here, not turn into "<object at 0x...>".
        text = json.dumps(message, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise MessageError(f"not plain JSON at {_first_non_json(message) or 'message'}: {exc}") from exc
    encoded = text.encode("utf-8")
    # Count bytes, not characters: one Chinese character is three bytes in UTF-8.
    if len(encoded) >= MAX_BYTES:
        raise MessageError(f"the message is {len(encoded)} bytes; it must stay under {MAX_BYTES}")
    return encoded


# A small, fixed snapshot for this job: a redelivery sends these same rows again.
message = {
    "job_id": str(uuid4()),
    "rows": [
        {"id": 1, "name": "product", "description": "", "is_active": False, "price_cents": 0},
    ],
}


if __name__ == "__main__":
    encoded = encode_message(message)
    assert json.loads(encoded) == message  # what the worker reads is what we meant
    print(len(encoded))
