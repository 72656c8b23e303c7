"""Lesson 04 mutants: plausible mistakes with a bounded Queue, task_done and a short lock."""

from tests.mutants import Mutant

MUTANTS = [
    # ---- 04.1: done 19, failed 1, errors == [(7, "ValueError")]
    Mutant(
        name="04-error-message-not-class",
        file="threaded_queue.py",
        old="errors.append((product_id, type(exc).__name__))",
        new="errors.append((product_id, str(exc)))",
        fails=("04.1",),
        why="The error record keeps the message instead of the exception class, so errors no longer "
            "says which kind of failure id 7 had.",
    ),
    Mutant(
        name="04-done-counted-before-check",
        file="threaded_queue.py",
        old=('            time.sleep(0.2)  # exercise: 0.2 s per id (was 0.05); the slow part runs with no lock held\n'
             '            if product_id == 7:\n'
             '                raise ValueError("product 7 is broken on purpose")\n'
             '            with mutex:\n'
             '                counts["done"] += 1\n'),
        new=('            time.sleep(0.2)  # exercise: 0.2 s per id (was 0.05); the slow part runs with no lock held\n'
             '            with mutex:\n'
             '                counts["done"] += 1\n'
             '            if product_id == 7:\n'
             '                raise ValueError("product 7 is broken on purpose")\n'),
        fails=("04.1", "04.2"),
        why="Counting success before the step that can fail books id 7 as both done and failed (21 in all); "
            "the script's own acceptance assert then stops it with an AssertionError.",
    ),
    Mutant(
        name="04-done-counted-outside-lock",
        file="threaded_queue.py",
        old=('            with mutex:\n'
             '                counts["done"] += 1\n'
             '        except Exception as exc:\n'),
        new=('            counts["done"] += 1\n'
             '        except Exception as exc:\n'),
        fails=("04.1",),
        says=(("04.1", "outside with mutex is a read-modify-write two threads can interleave"),),
        why="Rule 1: the increment left with mutex.  CPython seldom switches threads inside that one line, so "
            "the course's demo still counts 19/1; under contention, with each read and write of counts letting the "
            "other threads in, increments are lost every run.",
    ),
    # ---- 04.2: pending.join() returns, the threads exit
    Mutant(
        name="04-task-done-not-in-finally",
        file="threaded_queue.py",
        old=('            with mutex:\n'
             '                counts["done"] += 1\n'
             '        except Exception as exc:\n'
             '            # A failure is a result too: count it and say which id failed and why.\n'
             '            with mutex:\n'
             '                counts["failed"] += 1\n'
             '                errors.append((product_id, type(exc).__name__))\n'
             '        finally:\n'
             '            pending.task_done()\n'),
        new=('            with mutex:\n'
             '                counts["done"] += 1\n'
             '            pending.task_done()\n'
             '        except Exception as exc:\n'
             '            # A failure is a result too: count it and say which id failed and why.\n'
             '            with mutex:\n'
             '                counts["failed"] += 1\n'
             '                errors.append((product_id, type(exc).__name__))\n'),
        fails=("04.2",),
        why="Pitfall: task_done() only on the success path.  The failed id 7 and the None signals are "
            "never settled, so pending.join() waits forever although the counts are right.",
    ),
    Mutant(
        name="04-sentinel-outside-try",
        file="threaded_queue.py",
        old=('        product_id = pending.get()\n'
             '        try:\n'
             '            if product_id is None:\n'
             '                return  # the stop signal; finally still settles this get()\n'),
        new=('        product_id = pending.get()\n'
             '        if product_id is None:\n'
             '            return\n'
             '        try:\n'),
        fails=("04.2",),
        why="The None check moved before the try: the threads exit, but the two sentinel get() calls "
            "are never task_done()'d and pending.join() hangs.",
    ),
    Mutant(
        name="04-one-sentinel",
        file="threaded_queue.py",
        old=("    for _ in threads:\n"
             "        pending.put(None)  # one stop signal per consumer\n"),
        new="    pending.put(None)  # one stop signal\n",
        fails=("04.2",),
        why="One None for two consumers: join() returns, but the second thread waits on get() forever "
            "and, being non-daemon, keeps the script from ending.",
    ),
    # ---- 04.3: the work runs outside the lock
    Mutant(
        name="04-sleep-inside-lock",
        file="threaded_queue.py",
        old=('            time.sleep(0.2)  # exercise: 0.2 s per id (was 0.05); the slow part runs with no lock held\n'
             '            if product_id == 7:\n'
             '                raise ValueError("product 7 is broken on purpose")\n'
             '            with mutex:\n'
             '                counts["done"] += 1\n'),
        new=('            with mutex:\n'
             '                time.sleep(0.2)\n'
             '                if product_id == 7:\n'
             '                    raise ValueError("product 7 is broken on purpose")\n'
             '                counts["done"] += 1\n'),
        fails=("04.3",),
        why="Pitfall: blocking while holding the lock makes the two threads take turns; the results stay "
            "right but the run is as slow as one thread.",
    ),
    Mutant(
        name="04-sleep-under-another-lock",
        slow=True,  # 04.3's meeting of two sleeps runs out its bound
        file="threaded_queue.py",
        old=('def consume():\n'
             '    """Take ids until a None arrives; every get() is settled with exactly one task_done()."""\n'
             '    while True:\n'
             '        product_id = pending.get()\n'
             '        try:\n'
             '            if product_id is None:\n'
             '                return  # the stop signal; finally still settles this get()\n'
             '            time.sleep(0.2)  # exercise: 0.2 s per id (was 0.05); '
             'the slow part runs with no lock held\n'),
        new=('io_lock = Lock()  # "the client is not thread-safe": one request at a time\n'
             '\n'
             '\n'
             'def consume():\n'
             '    while True:\n'
             '        product_id = pending.get()\n'
             '        try:\n'
             '            if product_id is None:\n'
             '                return\n'
             '            with io_lock:\n'
             '                time.sleep(0.2)\n'),
        fails=("04.3",),
        why="The work left mutex but went under another lock: no sleep holds mutex, yet the two threads "
            "still take turns -- they are never seen sleeping at the same time.",
    ),
    # ---- 04.4: back-pressure on the producer
    Mutant(
        name="04-unbounded-queue",
        file="threaded_queue.py",
        old="pending = Queue(maxsize=1)",
        new="pending = Queue(maxsize=0)",
        fails=("04.4",),
        why="maxsize=0 is not 'smallest', it is unbounded: put() never waits, so nothing holds the "
            "producer back.",
    ),
    Mutant(
        name="04-exercise-capacity-only",
        file="threaded_queue.py",
        old="time.sleep(0.2)  # exercise: 0.2 s per id (was 0.05); the slow part runs with no lock held",
        new="time.sleep(0.05)  # the slow part runs with no lock held",
        fails=("04.4",),
        why="Half the exercise: capacity 1, but the consumers still take 0.05 s per id.",
    ),
]
