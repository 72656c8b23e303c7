"""Verifier for lesson 14: durable time slots — at most one scheduled job per slot, and where that ends.

14.1  schedule_once(key, [id]) twice for a fresh key: a job_id, then None; the slot row points at that job,
      queued with the snapshot and exactly one unsent outbox event; the tables grew by exactly one job, one
      slot and one event (no orphan job from the second call)
14.2  a real `celery beat` (its schedule file in the kit's log dir, the tick interval shortened to 1 s in that
      process only) sends products.schedule_tick; the fast worker (-Q exports.fast) runs it and creates the
      slot's job; `python publisher.py` sends its event; the bulk worker (-Q exports.bulk) writes the file with
      the job's payload.  Beat itself runs no task; only this check's events (TASKLAB_EVENTS_RUN) are read
14.3  execution_slot refuses a naive datetime; in two processes with different local time zones one instant
      written in +08:00, UTC and -05:00 gives one name, a different instant another
14.4  schedule_tick run by the kit with its clock at 10:00:30 and 10:03:10 of a far-away day (beat "stopped"
      between): exactly those two minutes' slots exist, none for 10:01 and 10:02, no job without its slot
14.5  python verify_schedule_slots.py prints first / same_slot=None / a different later_slot, and the kit
      repeats the experiment: one signal at 10:00:59 and 10:01:01 → two slots, two jobs
14.6  "", a non-ASCII key and 161 characters: ValueError, and no job, slot or event is written;
      160 ASCII characters are accepted
14.7  the admission gate filled to its limit (kit rows): a new slot raises CapacityExceeded, the existing
      slot still returns None (that it writes nothing is 14.1's count)
14.8  exercise: four lab14_racer.py processes call schedule_once for one fresh key, let go together while the
      kit holds the gate table (LOCK TABLES … READ) until the server shows all four waiting at it (or done):
      exactly one job_id, three None, no error, one slot, one job (the racers' sessions wait as long as the
      kit holds, so a slow machine cannot turn the hold into a timeout)

Every check cleans up its rows; the kit reads the database through its own connections and never prints
credentials; no server is restarted.  lab14_fixture.py holds the lab the checks run in (database view and
cleanup, the learner's calls in the probe, the kit's clock, the admission gate), lab14_beat.py 14.2's chain.
"""

from __future__ import annotations

import contextlib
import datetime as dtmod
import time
from uuid import uuid4

from lab14_beat import (TICK, drop_leftover_ticks, new_slots, publish_until_sent, queued_ticks, start_chain,
                        tick_chain_runs, wait_finished, wait_first_slot)
from lab14_fixture import (UTC, admission_limit, at_capacity, celery_app, counts, describe, far_day, hold_gate,
                           job_ids, learner, outcome, outcome_of, own_rows, remove_jobs, schedule_store,
                           schedule_tasks, script_lines, slot_keys, slot_of, slots_of_job, state_store, ticks_at,
                           waiting_at_gate, zone_run)

from shared import handshake, probe_report
from shared.logs import LOG_DIR
from shared.events import short
from shared.scripts import log_lines, printed_dicts
from shared.settings import WORK, redact
from shared.i18n import t
from shared.lesson_db import fill_admission, first_product, job_row, outbox_of, payload_of, result_file, sql
from shared.proc import Process, WaitTimeout, wait_until
from shared.tap import Check, run


BULK = "exports.bulk"  # where a scheduled export is announced (its outbox event's queue_name)


def checks() -> list[Check]:
    return [
        Check("14.1", check_slot_once, "MariaDB"),
        Check("14.2", check_beat_chain, "celery beat; a fast and a bulk worker; python publisher.py; Redis"),
        Check("14.3", check_utc, "two lab14_zones.py processes, TZ=LAB-8 and TZ=LAB+5"),
        Check("14.4", check_no_backfill, "MariaDB; the task's clock set by the kit"),
        Check("14.5", check_boundary, "MariaDB; python verify_schedule_slots.py"),
        Check("14.6", check_bad_keys, "MariaDB"),
        Check("14.7", check_full_gate, "MariaDB; the admission gate filled with kit rows"),
        Check("14.8", check_race, "MariaDB; four lab14_racer.py processes; a LOCK TABLES hold"),
    ]


# ---------------------------------------------------------------- 14.1

def check_slot_once(c) -> None:
    store = schedule_store()
    product = first_product()
    key = f"kit14-1:{uuid4()}"
    with own_rows():
        before = counts()
        kind1, first = outcome(lambda: store.schedule_once(key, [product]))
        kind2, second = outcome(lambda: store.schedule_once(key, [product]))
        after = counts()
        c.note(t("schedule_once('{key}…', [{product}]) twice → {describe}, {describe2}", key=key[:18], product=product,
                 describe=describe(kind1, first), describe2=describe(kind2, second)))
        assert kind1 == "value" and isinstance(first, str) and first, t(
            "the first call should return a job_id, got {describe}", describe=describe(kind1, first))
        assert kind2 == "value", t("the second call for the same slot raised {describe}: look the slot up under the "
                                   "gate and return None when it exists instead of relying on a duplicate-key error",
                                   describe=describe(kind2, second))
        assert second is None, t("the second call for the same slot should return None, got {describe}",
                                 describe=describe(kind2, second))
        slot = slot_of(key)
        assert slot is not None and slot["job_id"] == first, t(
            "export_schedule_slots should map {key}… to {first}, found {slot}", key=key[:18], first=short(first),
            slot=slot)
        job = job_row(first)
        assert job is not None and job["status"] == "queued", t(
            "job {first} should be queued, got {job}", first=short(first), job=job and job['status'])
        payload = payload_of(job)
        assert [row.get("id") for row in payload] == [product], t(
            "the job payload should be the snapshot of product {product}, got {payload}", product=product,
            payload=str(payload)[:120])
        events = outbox_of(first)
        assert len(events) == 1 and events[0]["sent_at"] is None, t(
            "job {first} should have exactly 1 unsent outbox event, found {n_events}", first=short(first),
            n_events=len(events))
        grown = {name: after[name] - before[name] for name in after}
        c.note(t("added: {jobs} job(s), {slots} slot(s), {events} event(s) (queue_name={queue_name})",
                 jobs=grown['jobs'], slots=grown['slots'], events=grown['events'], queue_name=events[0]['queue_name']))
        assert grown == {"jobs": 1, "events": 1, "slots": 1}, t(
            "the two calls must add exactly 1 job, 1 slot and 1 event: an extra job means the repeat wrote a job "
            "before it found the slot, or caught the duplicate-key error and committed anyway")


# ---------------------------------------------------------------- 14.2

def check_beat_chain(c) -> None:
    celery_app()
    found = learner.call("lab14_learner:tick_entries")  # [name, str(schedule), queue] of each tick entry
    assert found.get("app"), t("celery_app.py has no app")
    entries = found.get("entries") or []
    assert entries, t("app.conf.beat_schedule has no entry that sends {tick} (put the lesson's beat settings into "
                      "celery_app.py)", tick=TICK)
    name, every, queue = entries[0]
    c.note(t("beat_schedule['{name}']: {tick} every {every} s, queue={queue}; this check's beat process uses 1 s "
             "instead", name=name, tick=TICK, every=every, queue=queue))
    schedule_store()
    schedule_tasks()
    before = slot_keys()
    run = uuid4().hex  # every event of the processes below carries it (lab14_worker.py)
    procs: dict[str, Process] = {}
    with own_rows():
        try:
            start_chain(procs, run)
            c.note(t("started: the fast worker (-Q exports.fast), the bulk worker (-Q exports.bulk) and one beat "
                     "(pid {pid}, its schedule file in the kit's log dir)", pid=procs['beat'].pid))

            got = wait_first_slot(c, procs, before, run, queue)
            job_id = got["job_id"]
            c.note(t("tick → new slot {slot_key} → job {job_id}", slot_key=got['slot_key'], job_id=short(job_id)))
            events = outbox_of(job_id)
            assert len(events) == 1, t("the job should have 1 outbox event, found {n_events}", n_events=len(events))
            line = publish_until_sent(c, events[0]["id"])
            c.note(f"python publisher.py → {line}")
            row = wait_finished(job_id)
            assert row["status"] == "succeeded" and row["result_ref"], t(
                "the job ended {status}", status=row['status'])
            path, written = result_file(row, t("the file result_ref names does not exist: {result_ref}",
                                               result_ref=row['result_ref']))
            assert [r.get("id") for r in written] == [r.get("id") for r in payload_of(row)], t(
                "the file does not hold the job's payload snapshot")
            c.note(t("job succeeded, file {name} holds {n_written} products", name=path.name[:44],
                     n_written=len(written)))

            ticks, made, exports = tick_chain_runs(run, job_id)
            assert made, t("no tick returned this job: was the slot created outside the worker?")
            beat_pid = procs["beat"].pid
            assert all(e.get("pid") != beat_pid for e in ticks), t("the beat process ran a tick itself")
            assert exports, t("the bulk worker never received this job's export")
            assert any(e.get("queue") == BULK for e in exports), t(
                "this job's export ran on {queue}, not {bulk}: give the scheduled job's outbox event queue_name "
                "'{bulk}' in schedule_once (a scheduled snapshot is a long export; only the tick runs on "
                "exports.fast)", queue=exports[0].get("queue"), bulk=BULK)
            sent = log_lines(procs["beat"].log_text(), "Sending due task", limit=1000)
            c.note(t("beat sent {n_sent} tick(s); ticks ran on {worker} (queue {queue}), the export on {worker2} "
                     "(queue {queue2})", n_sent=len(sent), worker=ticks[0].get('node'), queue=ticks[0].get('queue'),
                     worker2=exports[0].get('node'), queue2=exports[0].get('queue')))
            procs["beat"].stop(grace=5)
            with contextlib.suppress(WaitTimeout):  # the fast worker takes the last ticks (bounded)
                wait_until(lambda: not queued_ticks(), 5, "the last ticks to be taken", interval=0.1)
            slots = new_slots(before)
            minutes = sorted({time.strftime("%H:%M", time.gmtime(e["at"])) for e in ticks})
            c.note(t("{n_ticks} tick(s) over {n_minutes} UTC minute(s) ({minutes}) → {n_slots} slot(s): ticks of one "
                     "minute merge", n_ticks=len(ticks), n_minutes=len(minutes), minutes=', '.join(minutes),
                     n_slots=len(slots)))
        finally:
            for proc in procs.values():
                proc.stop(grace=8)
            drop_leftover_ticks()


# ---------------------------------------------------------------- 14.3

def check_utc(c) -> None:
    tasks = schedule_tasks()
    kind, value = outcome(lambda: tasks.execution_slot(dtmod.datetime(2026, 1, 1, 10, 0, 59)))
    c.note(t("execution_slot(datetime(2026,1,1,10,0,59)) (naive) → {describe}", describe=describe(kind, value)))
    assert kind == "error" and isinstance(value, (ValueError, TypeError)), t(
        "a naive datetime must be refused (ValueError): do not guess the zone when tzinfo is None")
    runs = {tz: zone_run(tz) for tz in ("LAB-8", "LAB+5")}
    results = {}
    try:
        for tz, (proc, report) in runs.items():
            wait_until(lambda: not proc.alive(), 30, f"the time-zone probe (TZ={tz})", interval=0.05)
            found = probe_report.read(report)
            assert found, t("importing schedule_tasks under TZ={tz} failed:\n", tz=tz) + redact(proc.log_tail(6))
            results[tz] = found
    finally:
        for proc, _ in runs.values():
            proc.stop(grace=2)
    east, west = results["LAB-8"], results["LAB+5"]
    c.note(t("process in local zone UTC+8: 18:00:59+08:00 → {plus8}, 10:00:59Z → {utc}, 05:00:59-05:00 → {minus5}",
             plus8=east['plus8'], utc=east['utc'], minus5=east['minus5']))
    errors = sorted({v for r in (east, west) for k, v in r.items() if k != "naive" and v.startswith("error: ")})
    assert not errors, t("an aware datetime raised: {errors}", errors=errors[0])
    for name, result in (("UTC+8", east), ("UTC-5", west)):
        assert result["naive"].startswith("refused"), t("a process in local zone {name} accepted a naive datetime "
                                                        "({naive})", name=name, naive=result['naive'])
        assert result["plus8"] == result["utc"] == result["minus5"], t(
            "one instant (18:00:59+08:00 = 10:00:59Z = 05:00:59-05:00) gave different slot names: {plus8} / {utc} / "
            "{minus5}: convert with astimezone(timezone.utc) before formatting", plus8=result['plus8'],
            utc=result['utc'], minus5=result['minus5'])
        assert result["new_year_plus8"] == result["new_year_utc"], t(
            "2026-01-01 03:30+08:00 and 2025-12-31 19:30Z are one instant but got {new_year_plus8} / {new_year_utc}",
            new_year_plus8=result['new_year_plus8'], new_year_utc=result['new_year_utc'])
        assert result["wall_as_utc"] != result["utc"], t("18:00:59Z and 10:00:59Z got the same slot name: the name "
                                                         "does not follow the UTC instant")
    assert east == west, t("the process's local zone changed the slot names (UTC+8: {utc}, UTC-5: {utc2}): do not "
                           "use astimezone() without a zone, or local time", utc=east['utc'], utc2=west['utc'])
    c.note(t("a process in local zone UTC-5 got exactly the same names; one instant across the date line too"))


# ---------------------------------------------------------------- 14.4

def check_no_backfill(c) -> None:
    tasks = schedule_tasks()
    schedule_store()
    minute = dtmod.timedelta(minutes=1)
    day = far_day()
    runs = [day + dtmod.timedelta(seconds=30), day + 3 * minute + dtmod.timedelta(seconds=10)]
    window = {tasks.execution_slot(day + k * minute + dtmod.timedelta(seconds=30)): k for k in range(-10, 14)}
    executed = [tasks.execution_slot(when) for when in runs]
    stopped = {tasks.execution_slot(day + k * minute + dtmod.timedelta(seconds=30)) for k in (1, 2)} - set(executed)
    with own_rows() as before:
        results = ticks_at(runs)
        for when, (kind, value) in zip(runs, results, strict=False):
            c.note(t("clock at {when:%Y-%m-%d %H:%M:%S}Z: schedule_tick() → {describe}", when=when,
                     describe=describe(kind, value)))
            assert kind == "value", t("schedule_tick failed: {describe}", describe=describe(kind, value))
        c.note(t("beat 'stopped' between the two runs: no tick at all in {day:%H:%M} and {day2:%H:%M}",
                 day=day + minute, day2=day + 2 * minute))
        marks = ",".join(["%s"] * len(window))
        present = sorted((r["slot_key"] for r in sql(
            f"SELECT slot_key FROM export_schedule_slots WHERE slot_key IN ({marks})", list(window))),
            key=lambda k: window[k])
        start, end = f"{day - 10 * minute:%H:%M}", f"{day + 13 * minute:%H:%M}"
        c.note(t("slots from {start} to {end}: {present}", start=start, end=end,
                 present=', '.join(present) or t('none')))
        missing = [k for k in executed if k not in present]
        assert not missing, t("a minute that ran has no slot: {missing}: schedule_tick must name the slot from "
                              "datetime.now(timezone.utc) when it runs", missing=missing[0])
        extra = [k for k in present if k not in executed]
        assert not extra, t("slots exist for minutes that never ran: {extra} — minutes while beat was stopped were "
                            "back-filled or recorded as run; this model does not catch up", extra=', '.join(extra))
        assert not stopped & set(present), t("a stopped minute has a slot")
        new = job_ids() - before
        assert len(new) == len(set(present)), t("{n_new} new job(s) but only {n_present} slot(s): every job must "
                                                "belong to a minute that ran", n_new=len(new),
                                                n_present=len(set(present)))
        c.note(t("the stopped minutes {stopped} have no slot and no job",
                 stopped=', '.join(sorted(stopped)) or t('(same names as the runs)')))


# ---------------------------------------------------------------- 14.5

def check_boundary(c) -> None:
    store = schedule_store()
    tasks = schedule_tasks()
    product = first_product()
    with own_rows():
        # The kit's own experiment first: its finding names the mistake (the slot's minute); the learner's
        # script failing on the same mistake would only say that it failed.
        prefix = f"kit14-5:{uuid4()}:"
        late = dtmod.datetime(2026, 1, 1, 10, 0, 59, tzinfo=UTC)
        next_minute = dtmod.datetime(2026, 1, 1, 10, 1, 1, tzinfo=UTC)
        keys = [prefix + tasks.execution_slot(late), prefix + tasks.execution_slot(late),
                prefix + tasks.execution_slot(next_minute)]
        got = [outcome(lambda key=key: store.schedule_once(key, [product])) for key in keys]
        c.note(t("one simulated signal executed at 10:00:59, 10:00:59, 10:01:01 → {value}",
                 value=t(', ').join(describe(*g) for g in got)))
        assert all(kind == "value" for kind, _ in got), t("schedule_once failed (see above)")
        a, b, later_kit = (value for _, value in got)
        assert a and b is None, t("the second run in the same minute should return None")
        assert later_kit and later_kit != a, t("the run in the next minute should get a new slot and a new job: the "
                                               "slot name must carry the minute of execution (%Y%m%dT%H%M)")
        rows = sql("SELECT slot_key, job_id FROM export_schedule_slots WHERE slot_key LIKE %s ORDER BY slot_key",
                   (prefix + "%",))
        assert len(rows) == 2 and len({r["job_id"] for r in rows}) == 2, t(
            "expected 2 slots with 2 different jobs, found {n_rows}", n_rows=len(rows))
        c.note(t("2 slots: {slot_key} and {slot_key2}, 2 jobs — merged per execution minute, not exactly-once per "
                 "signal", slot_key=rows[0]['slot_key'][len(prefix):], slot_key2=rows[1]['slot_key'][len(prefix):]))

        # Then the learner's own script, as the course runs it.
        assert (WORK / "verify_schedule_slots.py").is_file(), t("verify_schedule_slots.py is missing from the folder")
        lines = script_lines(c, "verify_schedule_slots.py", 30, 4,
                           t("python verify_schedule_slots.py failed (see the output below)"))
        printed = [x for x in lines if "same_slot" in x and "{" in x]
        assert printed, t("verify_schedule_slots.py did not print first / same_slot / later_slot")
        shown = next(iter(printed_dicts(printed[-1:])), None)
        assert shown is not None, t("cannot read the output: {printed}", printed=printed[-1][:160])
        c.note("python verify_schedule_slots.py → " + printed[-1][:60] + "…")
        first, same, later = shown.get("first"), shown.get("same_slot"), shown.get("later_slot")
        assert first and same is None and later and later != first, t(
            "the script should print first=an id, same_slot=None and a different later_slot, got {shown}", shown=shown)
        script_slots = [slots_of_job(first), slots_of_job(later)]
        assert all(len(s) == 1 for s in script_slots) and script_slots[0] != script_slots[1], t(
            "the script's two jobs should each have their own slot, found {script_slots}", script_slots=script_slots)
        assert all(len(outbox_of(j)) == 1 for j in (first, later)), t("each of the script's jobs needs 1 outbox event")
        names = [s[0].split(":", 2)[-1] for s in script_slots]  # without the script's drill:<uuid>: prefix
        c.note(t("the script's jobs have one slot each: …{names}, …{names2}", names=names[0], names2=names[1]))


# ---------------------------------------------------------------- 14.6

def check_bad_keys(c) -> None:
    store = schedule_store()
    product = first_product()
    cases = [("", t("empty")), ("drill:槽-é", t("non-ASCII")),
             ("k" * 161, t("161 characters"))]
    with own_rows():
        before = counts()
        # Each call with the transactions it opens counted, in the probe (lab14_learner.schedule_once_counting).
        for key, label in cases:
            seen = learner.call("lab14_learner:schedule_once_counting", key, [product])
            opened = seen.get("opened")
            kind, value = outcome_of(seen)
            where = t(", no transaction opened") if not opened else t(", after opening a transaction")
            c.note(f"{label}: {describe(kind, value)}" + (where if kind == "error" else ""))
            assert kind == "error", t("the {label} slot_key was accepted (returned {describe})", label=label,
                                      describe=describe(kind, value))
            assert value.is_a("ValueError"), t("the {label} slot_key should raise a clear ValueError, got "
                                               "{describe}: check isascii() and the 1..160 length before opening the "
                                               "transaction instead of waiting for the database", label=label,
                                               describe=describe(kind, value))
            assert counts() == before, t("the {label} call wrote rows", label=label)
        c.note(t("none of the three added a job, slot or event"))
        kind, value = outcome(lambda: store.schedule_once("k" * 160, [product]))
        c.note(t("160 ASCII characters → {describe}", describe=describe(kind, value)))
        assert kind == "value" and value, t("a slot_key of 160 ASCII characters must be accepted (the limit includes "
                                            "160)")


# ---------------------------------------------------------------- 14.7

def check_full_gate(c) -> None:
    store = schedule_store()
    state_store()
    assert learner.call("lab14_learner:has_capacity_exceeded") is True, t("state_store has no CapacityExceeded")
    product = first_product()
    key = f"kit14-7:{uuid4()}"
    limit = admission_limit()
    fillers: list[str] = []
    with own_rows():
        try:
            kind, first = outcome(lambda: store.schedule_once(key, [product]))
            assert kind == "value" and first, t("with room left the first call should return a job_id, got {describe}",
                                                describe=describe(kind, first))
            fillers = fill_admission(limit)
            c.note(t("admission limit {limit}: the kit added {n_fillers} queued job(s), queued+running = {limit}",
                     limit=limit, n_fillers=len(fillers)))
            kind, fresh = at_capacity(f"kit14-7:{uuid4()}:fresh", product)
            c.note(t("a new slot → {describe}", describe=describe(kind, fresh)))
            assert kind == "error" and fresh.is_a("CapacityExceeded"), t(
                "with the gate full a new slot should raise CapacityExceeded, got {describe}: a new slot must pass "
                "admit_export", describe=describe(kind, fresh))
            kind, again = at_capacity(key, product)
            c.note(t("the existing slot → {describe}", describe=describe(kind, again)))
            assert not (kind == "error" and again.is_a("CapacityExceeded")), t(
                "the existing slot got a capacity error with the gate full: lock the gate, look the slot up and "
                "return None if found; call admit_export after the slot check")
            assert kind == "value" and again is None, t("the existing slot should return None, got {describe}",
                                                        describe=describe(kind, again))
        finally:
            remove_jobs(fillers)


# ---------------------------------------------------------------- 14.8

def check_race(c) -> None:
    schedule_store()
    product = first_product()
    key = f"kit14-8:{uuid4()}"
    names = [f"R{k}" for k in range(4)]
    with own_rows():
        with handshake.HelperGroup(["lab14_racer.py"], names, "lab14-race",
                                   "schedule_once", (key, str(product)),
                                   failed=t("a schedule_once process failed to start:\n")) as racers:
            with hold_gate():
                racers.go_round()
                try:  # every racer waits at the gate, or (a design without the gate) has already answered
                    wait_until(lambda: waiting_at_gate() + racers.done(1) >= len(names), 30,
                               "all four to wait at the gate", interval=0.02)
                except WaitTimeout:
                    c.note(t("  (not all four were seen waiting at the gate within 30 s; released anyway)"))
                queued = waiting_at_gate()
            results = [handshake.wait_result(racers.folder, name, 30) for name in names]
        winners = [r["job"] for r in results if r.get("job")]
        nones = [r for r in results if "job" in r and r["job"] is None]
        errors = [r["error"] for r in results if r.get("error")]
        n = len(names)
        c.note(t("{n} processes ({queued} lined up at the gate together) → {n_winners} job_id(s), {n_nones} None, "
                 "{n_errors} error(s)", n=n, queued=queued, n_winners=len(winners), n_nones=len(nones),
                 n_errors=len(errors)))
        assert not errors, t("schedule_once raised {errors}: several processes passed the slot check. Every call "
                             "must lock the same gate first, then look the slot up", errors=redact(errors[0]))
        assert len(winners) == 1 and len(nones) == n - 1, t("expected exactly 1 job_id and {n} None", n=n - 1)
        slot = slot_of(key)
        assert slot and slot["job_id"] == winners[0], t("the slot does not point at the one winner")
        c.note(t("slot {key}… → job {winners}, the only one", key=key[:16], winners=short(winners[0])))


# ---------------------------------------------------------------- main

if __name__ == "__main__":
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    run(checks())
