"""Lesson 09 mutants: plausible mistakes with acks, redelivery and idempotent output."""

from tests.mutants import Mutant

ATOMIC_WRITE = """    try:
        temporary.write_bytes(payload)
        os.replace(temporary, target)  # readers see the old file or the new one, never a mix
    finally:
        temporary.unlink(missing_ok=True)  # after a failure, only our own leftover goes
"""

MUTANTS = [
    # ---- 09.1: one job, two messages, one output
    Mutant(
        name="09-unsorted-json",
        file="export_tasks.py",
        old="json.dumps(rows, ensure_ascii=False, sort_keys=True)",
        new="json.dumps(rows, ensure_ascii=False)",
        fails=("09.1",),
        why="Without sort_keys the bytes follow each producer's key order: the same snapshot gets two digests.",
    ),
    # ---- 09.2: no half file, no temp file left
    Mutant(
        name="09-temp-not-cleaned",
        file="export_tasks.py",
        old=ATOMIC_WRITE,
        new="""    temporary.write_bytes(payload)
    os.replace(temporary, target)
""",
        fails=("09.2",),
        why="Without finally, a failed os.replace leaves the run's .tmp file behind for ever.",
    ),
    Mutant(
        name="09-temp-named-by-process",
        file="export_tasks.py",
        old='    temporary = folder / f"{safe_id}.{uuid4()}.tmp"\n',
        new='    temporary = folder / f"{safe_id}.{os.getpid()}.tmp"  # "one per worker process is enough"\n',
        fails=("09.2",),
        why="The temp name repeats for every execution in one worker process: two executions that overlap (a thread "
            "pool, a redelivery) write into one temp file and one os.replace finds it gone.",
    ),
    Mutant(
        name="09-write-in-place",
        file="export_tasks.py",
        old=ATOMIC_WRITE,
        new="    target.write_bytes(payload)  # simpler: write the final file directly\n",
        fails=("09.2", "09.4"),
        why="Writing the target in place lets a reader see it half-written; the drill, which pauses right "
            "after os.replace, never finds its moment either.",
    ),
    # ---- 09.3: delivery settings
    Mutant(
        name="09-prefetch-default",
        file="celery_app.py",
        old="    worker_prefetch_multiplier=1,\n",
        new="    worker_prefetch_multiplier=4,\n",
        fails=("09.3",),
        why="Each process reserves four messages: a long task holds others hostage, unacked.",
    ),
    Mutant(
        name="09-visibility-one-place",
        file="celery_app.py",
        old="    visibility_timeout=VISIBILITY_SECONDS,  # Celery's Redis notes require this one as well\n",
        new="",
        fails=("09.3",),
        why="The visibility timeout set only in broker_transport_options: the three places disagree.",
    ),
    # ---- 09.4: redelivery drill
    Mutant(
        name="09-task-acks-early",
        file="export_tasks.py",
        old='@app.task(name="products.export")',
        new='@app.task(name="products.export", acks_late=False)',
        fails=("09.4",),
        why="A task-level acks_late=False overrides the app setting: the message is acked before the work, so a "
            "killed child loses it (FAILURE, never run again) although inspect conf looks right.",
    ),
    Mutant(
        name="09-task-no-reject-on-lost",
        file="export_tasks.py",
        old='@app.task(name="products.export")',
        new='@app.task(name="products.export", reject_on_worker_lost=False)',
        fails=("09.4",),
        why="Late ack alone still acks a message whose child was lost: it becomes FAILURE instead of coming back.",
    ),
    # ---- 09.5: exercise, atomic replace does not pick versions
    Mutant(
        name="09-merge-into-existing",
        file="export_tasks.py",
        old="""    payload = json.dumps(rows, ensure_ascii=False, sort_keys=True).encode("utf-8")
    folder = Path("artifacts")
    folder.mkdir(exist_ok=True)
    target = folder / f"{safe_id}.json"
""",
        new="""    folder = Path("artifacts")
    folder.mkdir(exist_ok=True)
    target = folder / f"{safe_id}.json"
    if target.is_file():  # keep what an earlier delivery wrote, update the rows we carry
        merged = {row["id"]: row for row in json.loads(target.read_bytes())}
        merged.update({row["id"]: row for row in rows})
        rows = list(merged.values())
    payload = json.dumps(rows, ensure_ascii=False, sort_keys=True).encode("utf-8")
""",
        fails=("09.5",),
        why="Merging a second delivery into the existing file produces a version nobody submitted.",
    ),
]
