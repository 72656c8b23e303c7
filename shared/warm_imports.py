"""What a program will import, read from its text: the groups of packages a fork server imports for it
(shared/forkserver.py), and the folders where its own modules are found.  Text only: nothing is run.

Loaded by the fork server alone, under this top-level name, before it serves anyone.
"""

from __future__ import annotations

import os
import re
import sys

# What the lessons' processes spend their start-up importing, by the package a program names.  The server
# imports a group the first time a program it is asked to start needs it (a Celery worker: "celery"; a
# script whose folder imports pymysql: "pymysql"), so a box that starts only claimers never pays for
# Celery; a name that is not installed is skipped.
GROUPS = {
    "celery": ("click", "billiard", "vine", "kombu", "kombu.transport.redis", "redis", "celery",
               "celery.bin.celery", "celery.apps.worker", "celery.apps.beat", "celery.worker.consumer",
               "celery.concurrency.prefork", "celery.backends.redis", "celery.beat", "logging.handlers"),
    "fastapi": ("pydantic", "starlette", "fastapi", "asyncio", "json", "email.parser"),
    "uvicorn": ("uvicorn", "uvicorn.main", "uvicorn.config", "uvicorn.server", "uvicorn.lifespan.on",
                "uvicorn.loops.asyncio", "uvicorn.protocols.http.h11_impl", "uvicorn.protocols.websockets.auto"),
    "httpx": ("httpx",),
    "pymysql": ("pymysql",),
    "redis": ("redis",),
    "dotenv": ("dotenv",),
    "kombu": ("kombu", "kombu.transport.redis"),
}
FROM_RE = re.compile(r"(?:^|;)[ \t]*from[ \t]+([A-Za-z_]\w*)", re.M)  # at a line's start or after a ;
IMPORT_RE = re.compile(r"(?:^|;)[ \t]*import[ \t]+([^\n#;()]+)", re.M)
MODULE_ARG = re.compile(r"([A-Za-z_]\w*)(?:\.\w+)*(?::[\w.]+)?")  # an argument naming a module: x, x.y, x:app
SCAN_FILES, SCAN_BYTES = 200, 1 << 20  # up to 200 modules looked at, each read up to 1 MB


def imported(source: str) -> set[str]:
    """The top-level names a program's text imports (read as text, never run; an import inside a function
    counts too, as it may run)."""
    names = set(FROM_RE.findall(source))
    for listed in IMPORT_RE.findall(source):
        names |= {part.split(" as ")[0].strip().split(".")[0] for part in listed.split(",")}
    return {name for name in names if name.isidentifier()}


def folders(plan: dict, cwd: str) -> list[str]:
    """Where a program finds its own modules: its sys.path before the standard library, the folder it runs
    in, and any folder it is given as an argument (the kit's probe server is given the verifiers' folder
    and puts it, with the folder it runs in, on its own path)."""
    base = set(sys.path)  # the server's own path: stdlib and site-packages
    found = [entry or cwd for entry in plan["path"] if entry not in base] + [cwd]
    found += [arg for arg in plan["argv"][1:] if os.path.isabs(arg) and os.path.isdir(arg)]
    return [os.path.join(cwd, folder) for folder in dict.fromkeys(found)]


def groups_for(plan: dict, cwd: str, scanned: dict) -> set[str]:
    """The groups a program will import: named by `-m`, or by an import in its own text, or by a module
    its arguments name (`-A celery_app:app`, `api_db:app`, a probe server's first module), followed through
    the text of the modules it imports from its own folders, up to SCAN_FILES of them.  `scanned` keeps
    what each file imports, by path."""
    own = folders(plan, cwd)
    named = {match.group(1) for arg in plan["argv"][1:] if (match := MODULE_ARG.fullmatch(arg))}
    if plan["kind"] == "module":
        todo = {plan["target"].split(".")[0]} | named
        sources: list[str] = []
    elif plan["kind"] == "code":
        todo, sources = imported(plan["target"]) | named, []
    else:
        todo, sources = named, [os.path.join(cwd, plan["target"])]
    found, seen = set(), set()
    while (todo or sources) and len(seen) < SCAN_FILES:
        for name in todo - seen:
            seen.add(name)
            if name in GROUPS:
                found.add(name)
                continue
            for folder in own:
                for candidate in (os.path.join(folder, name + ".py"), os.path.join(folder, name, "__init__.py")):
                    if os.path.isfile(candidate):
                        sources.append(candidate)
                        break
                else:
                    continue
                break
        todo = set()
        for path in sources:
            if path not in scanned:
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                    with os.fdopen(fd, "rb") as stream:
                        scanned[path] = imported(stream.read(SCAN_BYTES).decode("utf-8", "replace"))
                except OSError:
                    scanned[path] = set()
            todo |= scanned[path]
        sources = []
    if "uvicorn" in found:
        found.add("fastapi")  # an app it serves
    return found
