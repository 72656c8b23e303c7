"""Grading a class on several machines: one Celery task per learner folder, results kept by content.

    python -m checks.distributed worker --broker URL [-c N] [-n NAME]          # on each grading machine
    python -m checks.distributed grade --broker URL --lab DIR... [--lessons NN...] [--out DIR]

The broker URL may also come from LAB_GRADE_BROKER (better: a password in argv is visible to `ps`).
This module is that command line; the instructor's side is checks/grade_remote.py (pack each folder, send
one task per content key, collect), the machines' side checks/grading_worker.py (the Celery app, the
write-once results store, the task that grades a folder exactly as a local `python -m checks grade`
does), and checks/packing.py what travels between them.  checks/distributed-grading.md says how to run
it for a class.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from checks import grade
from checks.grade_remote import submit_and_collect
from checks.grading_worker import run_worker
from checks.packing import SIZE_LIMIT
from checks.workdir import UsageError
from shared.i18n import t


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m checks.distributed",
                                     description="grade a class on several machines through a Celery broker")
    sub = parser.add_subparsers(dest="command", required=True)
    broker_help = "redis://:PASSWORD@HOST:PORT/0 (default: $LAB_GRADE_BROKER, which keeps it out of `ps`)"
    worker = sub.add_parser("worker", help="grade folders from the queue on this machine")
    worker.add_argument("--broker", default=os.environ.get("LAB_GRADE_BROKER"), help=broker_help)
    worker.add_argument("--result-backend", default=None, help="optional Celery result backend (task states)")
    worker.add_argument("-c", "--concurrency", type=int, default=1, help="folders at once (see the docs: ~1 per core)")
    worker.add_argument("-n", "--name", default=None, help="worker name, e.g. grader1@%%h")
    worker.add_argument("-l", "--loglevel", default="INFO")
    grade_p = sub.add_parser("grade", help="send a class to the workers and write the reports")
    grade_p.add_argument("--broker", default=os.environ.get("LAB_GRADE_BROKER"), help=broker_help)
    grade_p.add_argument("--result-backend", default=None)
    grade_p.add_argument("--lab", nargs="+", required=True, metavar="DIR")
    grade_p.add_argument("--lessons", nargs="+", default=["all"], metavar="NN")
    grade_p.add_argument("--out", default="grades", metavar="DIR")
    grade_p.add_argument("--size-limit", type=float, default=SIZE_LIMIT / 1024 / 1024, metavar="MB")
    grade_p.add_argument("--force", action="store_true", help="grade again even when the store has a result")
    grade_p.add_argument("--at", metavar="REF", help="grade this git ref of each folder ({NN}: the lesson's id)")
    grade_p.add_argument("--timeout", type=float, default=None, metavar="S", help="give up on folders after S seconds")
    args = parser.parse_args(argv)
    try:
        if not args.broker:
            raise UsageError(t("give --broker URL or set LAB_GRADE_BROKER"))
        if args.command == "worker":
            run_worker(args.broker, args.concurrency, args.name, args.result_backend, loglevel=args.loglevel)
            return 0
        students = submit_and_collect(args.lab, args.lessons, Path(args.out), args.broker, args.result_backend,
                                      int(args.size_limit * 1024 * 1024), args.force, args.timeout, at=args.at)
        grade.print_table(students)
        print(t("reports written to {out}/", out=args.out))
        return grade.exit_code(students)
    except UsageError as exc:
        print(t("error: ") + str(exc), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
