"""make monitor: lesson 16's observability on one page that refreshes itself.

    python -m checks monitor [--port 8016] [--source auto|soak|services]

What it shows, the numbers lesson 16's monitor_exports.sql teaches: jobs by status, the oldest queued
and running jobs' ages, the outbox lag (unsent events and the oldest one's age), expired leases, dead
letters by reason, and each Redis queue's depth (plus messages delivered but not yet acknowledged).

The database is read through `monitor_ro`, an account that can only SELECT (servicectl makes it, its
password in .state/services/monitor.env, 0600).  Two sources:

  services  the kit's servers on this machine (make services): for your own worker and publisher;
  soak      a running `make soak`.  The soak runs in a box with servers of its own, unreachable from
            here by design, so inside the box a feeder (`python -m checks.monitor feed`) writes the same
            numbers to the soak's log folder once a second; the page reads that file.

auto picks the soak while its numbers are fresh, else the services.  The page stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import html
import json
import sys
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

from checks import boxfiles

FEED_NAME = "monitor.json"
HISTORY_NAME = "monitor-history.jsonl"
STALE_SECONDS = 5.0  # a feed older than this is a soak that has ended (or hangs): said on the page
DEFAULT_PORT = 8016

QUERIES = {  # name -> (SQL, one row or many).  Ages stay NULL when nothing waits (never 0).
    "by_status": ("SELECT status, COUNT(*) AS total FROM export_jobs GROUP BY status", False),
    "oldest": ("SELECT TIMESTAMPDIFF(MICROSECOND, MIN(CASE WHEN status='queued' THEN created_at END), NOW(6))"
               " / 1000000 AS oldest_queued_seconds,"
               " TIMESTAMPDIFF(MICROSECOND, MIN(CASE WHEN status='running' THEN created_at END), NOW(6))"
               " / 1000000 AS oldest_running_seconds,"
               " SUM(status='running' AND lease_until < NOW(6)) AS expired_leases"
               " FROM export_jobs WHERE status IN ('queued','running')", True),
    "outbox": ("SELECT COUNT(*) AS unsent, TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(6)) / 1000000"
               " AS oldest_unsent_seconds FROM export_outbox WHERE sent_at IS NULL", True),
    "dead_letters": ("SELECT reason, COUNT(*) AS total FROM export_dead_letters GROUP BY reason", False),
}


def _number(value):
    return None if value is None else float(value)


def collect_database(conn) -> dict:
    """The SQL half.  A table the lesson has not made yet is shown as missing, not as an error."""
    out: dict = {}
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        for name, (query, one) in QUERIES.items():
            try:
                cur.execute(query)
                rows = cur.fetchall()
            except Exception as exc:  # noqa: BLE001 - e.g. no export_dead_letters before lesson 15
                out[name] = {"missing": str(exc)[:160]}
                continue
            out[name] = rows[0] if one else {r[0]: int(r[1]) for r in rows}
    oldest = out.get("oldest")
    if isinstance(oldest, tuple):
        out["oldest"] = {"oldest_queued_seconds": _number(oldest[0]), "oldest_running_seconds": _number(oldest[1]),
                         "expired_leases": int(oldest[2] or 0)}
    outbox = out.get("outbox")
    if isinstance(outbox, tuple):
        out["outbox"] = {"unsent": int(outbox[0]), "oldest_unsent_seconds": _number(outbox[1])}
    return out


def collect_redis(client) -> dict:
    """Queue depths: every list in the broker's database is a queue; `unacked` holds delivered messages."""
    queues = {}
    for key in client.scan_iter(_type="list", count=200):
        name = key.decode() if isinstance(key, bytes) else key
        queues[name] = int(client.llen(key))
    return {"queues": dict(sorted(queues.items())), "unacked": int(client.hlen("unacked"))}


def collect(db_connect, redis_connect) -> dict:
    """One sample.  A server that is down (the soak restarts both) is a fact to show, not a crash."""
    sample: dict = {"at": time.time()}
    for name, connect, read in (("db", db_connect, collect_database), ("redis", redis_connect, collect_redis)):
        try:
            handle = connect()
            try:
                sample[name] = read(handle)
            finally:
                handle.close()
        except Exception as exc:  # noqa: BLE001
            sample[f"{name}_error"] = f"{type(exc).__name__}: {str(exc)[:160]}"
    return sample


def connectors(env_file: Path | None = None):
    """(db_connect, redis_connect) for the servers this process can reach: the monitor account on the
    database named by .env.tasks, and the broker's Redis database."""
    import redis

    from shared.credentials import ensure_credentials, monitor_credentials, read_env_file
    from shared.services_clients import mysql_connect
    secret = ensure_credentials()
    user, password = monitor_credentials()
    values = read_env_file(env_file) if env_file and env_file.is_file() else {}
    database = urlsplit(values.get("DATABASE_URL") or secret["DATABASE_URL"]).path.lstrip("/")
    broker = urlsplit(values.get("CELERY_BROKER_URL") or secret["CELERY_BROKER_URL"])

    def db_connect():
        return mysql_connect(user, password, database, host=secret["MYSQL_HOST"], port=secret["MYSQL_PORT"])

    def redis_connect():
        return redis.Redis(host=broker.hostname, port=broker.port, password=unquote(broker.password or ""),
                           db=int(broker.path.lstrip("/") or 0), socket_timeout=2, socket_connect_timeout=2)
    return db_connect, redis_connect


# --- inside the soak's box: the feeder -------------------------------------------------------------

def feed(out: Path, env_file: Path, interval: float = 1.0) -> None:
    """Write a sample to `out` every `interval` seconds until stopped (atomically: never half a file)."""
    db_connect, redis_connect = connectors(env_file)
    tmp = out.with_name(out.name + ".tmp")
    history = out.with_name(HISTORY_NAME)
    while True:
        sample = collect(db_connect, redis_connect)
        tmp.write_text(json.dumps(sample, default=str), encoding="utf-8")
        tmp.replace(out)
        with open(history, "a", encoding="utf-8") as log:  # the soak's report draws the backlog from it
            log.write(json.dumps({"at": sample["at"], "backlog": backlog(sample)}) + "\n")
        time.sleep(interval)


def backlog(sample: dict) -> int | None:
    """Queued + running jobs + unsent outbox events: work accepted and not yet done (None: no database)."""
    db = sample.get("db")
    if not isinstance(db, dict) or not isinstance(db.get("by_status"), dict):
        return None
    unsent = db.get("outbox", {}).get("unsent", 0) if isinstance(db.get("outbox"), dict) else 0
    return int(db["by_status"].get("queued", 0) + db["by_status"].get("running", 0) + (unsent or 0))


def read_history(path: Path) -> list[tuple[float, int]]:
    points = []
    try:
        lines = boxfiles.read(path, 16 << 20).decode("utf-8", errors="replace").splitlines()  # a box wrote it
    except OSError:
        return points
    for line in lines:
        try:
            item = json.loads(line)
        except ValueError:
            continue  # the last line of a killed feeder may be half written
        if item.get("backlog") is not None:
            points.append((float(item["at"]), int(item["backlog"])))
    return points


# --- the page ----------------------------------------------------------------------------------------

def soak_feed() -> Path:
    from checks.workdir import STATE_DIR
    return STATE_DIR / "logs" / "soak" / FEED_NAME


def read_feed(path: Path) -> dict | None:
    """The soak's last sample, or None when there is none or it is stale (the soak is not running)."""
    try:
        sample = json.loads(boxfiles.read(path, 1 << 20))  # written in the soak's box: read as data
    except (OSError, ValueError):
        return None
    return sample if time.time() - float(sample.get("at", 0)) <= STALE_SECONDS else None


def make_app(source: str):
    from fastapi import FastAPI
    from fastapi.responses import HTMLResponse, JSONResponse

    app = FastAPI(title="Task Lab monitor", docs_url=None, redoc_url=None, openapi_url=None)
    direct = {}

    def sample() -> dict:
        if source in ("auto", "soak"):
            fed = read_feed(soak_feed())
            if fed is not None:
                return dict(fed, source="soak")
            if source == "soak":
                return {"at": time.time(), "source": "soak",
                        "db_error": "no fresh numbers from a soak: start `make soak` in another terminal"}
        if "connect" not in direct:
            try:
                direct["connect"] = connectors()
            except Exception as exc:  # noqa: BLE001 - e.g. services never started
                return {"at": time.time(), "source": "services",
                        "db_error": f"{exc} (start them with `make services`)"}
        return dict(collect(*direct["connect"]), source="services")

    @app.get("/api/stats")
    def stats():
        return JSONResponse(sample(), headers={"Cache-Control": "no-store"})

    @app.get("/", response_class=HTMLResponse)
    def index():
        return HTMLResponse(page_html(), headers={"Content-Security-Policy": CSP})

    return app


CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; connect-src 'self'"

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Task Lab monitor</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:15px/1.45 system-ui,sans-serif;margin:1.2rem auto;max-width:62rem;padding:0 1rem;color:#1d2228}
h1{font-size:1.4rem;margin:0 0 .3rem}h2{font-size:1.05rem;margin:1.1rem 0 .3rem;border-bottom:1px solid #ddd}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(11rem,1fr));gap:.5rem}
.tile{border:1px solid #ddd;border-radius:6px;padding:.4rem .6rem;background:#fafafa}
.tile .v{font-size:1.5rem;font-variant-numeric:tabular-nums}.tile .k{color:#555;font-size:.85em}
.tile.stuck{background:#ffe3e0;border-color:#d23b3b}.err{color:#b00020}#meta{color:#555;font-size:.9em}
svg{width:100%;height:80px;background:#fcfcfc;border:1px solid #e2e2e2}
</style></head><body>
<h1>Task Lab monitor <span style="font-size:.6em;color:#666">[[Task Lab monitor]]</span></h1>
<div id="meta">loading…</div><div id="errors" class="err"></div>
<h2>Backlog over the last minutes <span class="k">(queued + running + unsent events)</span></h2>
<svg id="spark" viewBox="0 0 600 80" preserveAspectRatio="none"><polyline id="line" fill="none" stroke="#4c78a8"
 stroke-width="2" points=""/></svg>
<h2>Jobs by status · [[Jobs by status]]</h2><div class="grid" id="status"></div>
<h2>Ages and lag · [[Ages and lag]]</h2><div class="grid" id="ages"></div>
<h2>Redis queues · [[Redis queues]]</h2><div class="grid" id="queues"></div>
<h2>Dead letters · [[Dead letters]]</h2><div class="grid" id="dead"></div>
<script>
"use strict";
const history = [], STUCK_AFTER = 10;
const since = {};  // queue -> [depth, first time seen at that depth (non-zero)]
function tile(key, value, stuck) {
  const d = document.createElement("div"); d.className = "tile" + (stuck ? " stuck" : "");
  d.dataset.stat = key;
  const v = document.createElement("div"); v.className = "v"; v.textContent = value;
  const k = document.createElement("div"); k.className = "k"; k.textContent = key + (stuck ? " — not moving" : "");
  d.append(v, k); return d;
}
function fill(id, entries) {
  const box = document.getElementById(id); box.replaceChildren();
  if (!entries.length) box.append(tile("none", "–"));
  for (const [k, v, stuck] of entries) box.append(tile(k, v, stuck));
}
function age(s) { return s === null || s === undefined ? "nothing waiting" : Number(s).toFixed(1) + " s"; }
async function tick() {
  let s;
  try { const r = await fetch("/api/stats", {cache: "no-store"}); s = await r.json(); }
  catch (e) { document.getElementById("errors").textContent = "monitor not reachable: " + e; return; }
  const now = s.at;
  document.getElementById("meta").textContent = "source: " + s.source + " · sampled " +
    new Date(now * 1000).toLocaleTimeString();
  document.getElementById("errors").textContent = [s.db_error, s.redis_error].filter(Boolean).join(" · ");
  const db = s.db || {}, byStatus = db.by_status || {}, oldest = db.oldest || {}, outbox = db.outbox || {};
  fill("status", ["queued", "running", "succeeded", "failed", "cancelled"].map(k => [k, byStatus[k] || 0]));
  fill("ages", [["oldest queued", age(oldest.oldest_queued_seconds)],
                ["oldest running", age(oldest.oldest_running_seconds)],
                ["expired leases", oldest.expired_leases ?? "–"], ["unsent events", outbox.unsent ?? "–"],
                ["outbox lag", age(outbox.oldest_unsent_seconds)]]);
  const queues = (s.redis || {}).queues || {};
  const qs = Object.entries(queues).map(([q, n]) => {
    if (!since[q] || since[q][0] !== n) since[q] = [n, now];
    return [q, n, n > 0 && now - since[q][1] >= STUCK_AFTER];
  });
  qs.push(["unacked (delivered)", (s.redis || {}).unacked ?? "–", false]);
  fill("queues", qs);
  const dead = db.dead_letters || {};
  fill("dead", dead.missing ? [] : Object.entries(dead));
  const backlog = (byStatus.queued || 0) + (byStatus.running || 0) + (outbox.unsent || 0);
  document.body.dataset.backlog = backlog;
  history.push(backlog); if (history.length > 300) history.shift();
  const top = Math.max(1, ...history);
  document.getElementById("line").setAttribute("points",
    history.map((v, i) => (i * 600 / Math.max(1, history.length - 1)).toFixed(1) + ","
                          + (78 - 74 * v / top).toFixed(1)).join(" "));
}
tick(); setInterval(tick, 1500);
</script></body></html>
"""


def page_html() -> str:
    """PAGE with its headings' Chinese (checks/zh.po) beside the English: the page shows both on purpose."""
    from shared.i18n import t_in
    chinese = {"Task Lab monitor": t_in("zh", "Task Lab monitor"), "Jobs by status": t_in("zh", "Jobs by status"),
               "Ages and lag": t_in("zh", "Ages and lag"), "Redis queues": t_in("zh", "Redis queues"),
               "Dead letters": t_in("zh", "Dead letters")}
    text = PAGE
    for english, translated in chinese.items():
        text = text.replace(f"[[{english}]]", html.escape(translated))
    return text


def serve(port: int, source: str) -> int:
    import uvicorn

    from shared.i18n import t
    from shared.proc import port_open
    if port_open(port):
        print(t("port {port} is taken: choose another, e.g. make monitor PORT={port2}", port=port, port2=port + 1),
              file=sys.stderr)
        return 2
    print(t("monitor: http://127.0.0.1:{port}/ (Ctrl-C to stop)", port=port),
          flush=True)
    uvicorn.run(make_app(source), host="127.0.0.1", port=port, log_level="warning")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m checks.monitor")
    sub = parser.add_subparsers(dest="command", required=True)
    page = sub.add_parser("serve")
    page.add_argument("--port", type=int, default=DEFAULT_PORT)
    page.add_argument("--source", choices=("auto", "soak", "services"), default="auto")
    feeder = sub.add_parser("feed")
    feeder.add_argument("--out", type=Path, required=True)
    feeder.add_argument("--env-file", type=Path, required=True, help="the run's .env.tasks (which database)")
    args = parser.parse_args(argv)
    if args.command == "feed":
        feed(args.out, args.env_file)
        return 0
    return serve(args.port, args.source)


if __name__ == "__main__":
    sys.exit(main())
