"""Command line of the checker runner: argparse and dispatch to the library modules.  Exit codes: 0 all
passed, 1 a check failed, 2 usage/environment."""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from pathlib import Path

from checks import console, progress, report
from checks.results import FAIL, NOT_REACHED, LessonResult
from checks.selection import how_to_give_folder, lab_path, load, next_lesson, remembered_folder, select
from checks.session import run_many
from checks.workdir import STATE_DIR, UsageError, disk_full, lesson_files, reference_files
from shared.i18n import t


def _write_reports(args, results, source, error=None) -> None:
    if getattr(args, "report", None):
        report.write_json(Path(args.report), results, source, error)
    if getattr(args, "junit", None):
        report.write_junit(Path(args.junit), results, source, error)
    if getattr(args, "html", None):
        from checks import html_report
        html_report.write_run(Path(args.html), report.to_dict(results, source, error))


def _exit_code(results: list[LessonResult]) -> int:
    return 1 if any(r.status in (FAIL, NOT_REACHED) for r in results) else 0


def cmd_list(args) -> int:
    console.print_list(load())
    return 0


def cmd_run(args, evidence: bool = False) -> int:
    data = load()
    lessons = select(data, args.lessons, allow_planned=args.lessons == ["all"])
    lab = lab_path(args.lab)
    scope = "lab" if lab else "reference"
    console.announce(lab)
    results = run_many(lessons, data, lab, scope, show=lambda r: console.print_lesson(r, evidence=evidence))
    progress.record([r for r in results if r.source != "planned"])
    if not lab:  # keep the reference's timelines: a report on a learner's folder draws them alongside
        from checks import timelines
        timelines.save_reference(report.to_dict([r for r in results if r.source != "planned"], "reference"))
    _write_reports(args, results, str(lab) if lab else "reference")
    console.print_total(results)
    return _exit_code(results)


def cmd_lesson(args) -> int:
    args.lessons, args.lab = [args.lesson], None
    code = cmd_run(args, evidence=True)
    lesson_id = args.lesson.zfill(2)
    where = os.path.relpath(STATE_DIR / "work" / "reference" / lesson_id)
    print(t("\nThe reference files are in {where}/. Check your own folder: make check LESSON={lesson_id} "
            "LAB=~/shop-service/tasks_lab", where=where, lesson_id=lesson_id))
    return code


def cmd_check(args) -> int:
    """The learner's command: check THEIR folder — given once with --lab, remembered afterwards."""
    data = load()
    if args.forget:
        progress.remember_folder(None)
        print(t("forgot your folder"))
        return 0
    if args.lab:
        lab = lab_path(args.lab)
        if lab != progress.learner_folder():
            progress.remember_folder(lab)
            print(t("remembered your folder: {lab} (change: make check LAB=DIR; forget: make forget)", lab=lab))
    else:
        lab = remembered_folder()
    lessons = args.lessons
    if not lessons:
        chosen, why = next_lesson(data, lab)
        if chosen is None:
            raise UsageError(t("{lab} has no file of any lesson yet: give LESSON=NN", lab=lab))
        print(t("checking lesson {chosen} ({why}; another: LESSON=NN, every lesson: LESSON=all)", chosen=chosen,
                why=why))
        lessons = [chosen]
    args.lessons, args.lab = lessons, str(lab)
    if args.repeat is not None:
        return _repeat_series(args, lab, data)
    if args.burn is not None or args.parallel is not None or args.seed is not None:
        raise UsageError(t("BURN, PARALLEL and SEED go with REPEAT=N (make check REPEAT=20 BURN=2)"))
    return cmd_run(args)


def _repeat_series(args, lab: Path, data: dict) -> int:
    """make check REPEAT=N: the learner's folder N times under load; which checks pass only by chance."""
    from checks import repeat
    if args.report or args.junit or args.html:
        raise UsageError(t("REPORT, JUNIT and HTML are for one run; a series writes its own table (REPEAT=N)"))
    lesson_ids = [lesson["id"] for lesson in select(data, args.lessons, allow_planned=False)]
    out = STATE_DIR / "repeat" / "-".join(lesson_ids)
    try:
        series, rows = repeat.repeat(lesson_ids, args.repeat, args.parallel or 2, args.burn or 0, out, lab=lab,
                                     seed=args.seed)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return repeat.exit_code(series, rows)


def cmd_grade(args) -> int:
    from checks import grade
    from checks.box import availability
    from checks.sandbox import boxing
    data = load()
    lessons = select(data, args.lessons, allow_planned=args.lessons == ["all"])
    out = Path(args.out)
    if boxing() != "on":
        if not args.unsafe:
            raise UsageError(t("no box can be made for learner code here ({availability}). Running strangers' code "
                               "unboxed puts this machine at risk; add --unsafe if you really mean to",
                               availability=availability()[1]))
        print(t("warning: --unsafe: learner code runs unboxed, one folder at a time"), file=sys.stderr)
        args.jobs = 1  # unboxed runs share the kit's servers: one at a time
    if args.repeat < 1:
        raise UsageError(t("--repeat must be 1 or more"))
    if args.broker and args.repeat > 1:
        raise UsageError(t("--repeat grades on this machine; it does not go with --broker yet"))
    if args.broker:  # spread over grading machines (checks/grade_remote.py); each grades in boxes
        from checks.grade_remote import submit_and_collect
        students = submit_and_collect([Path(p) for p in args.lab], [lesson["id"] for lesson in lessons], out,
                                      args.broker, at=args.at)
    else:
        students = grade.grade(args.lab, lessons, data, out, args.jobs, at=args.at, keep=args.keep,
                               times=args.repeat)
    grade.print_table(students)
    if args.html:
        import json

        from checks import gradebook
        reports = {s.name: json.loads((out / f"{s.name}.json").read_text(encoding="utf-8")) for s in students}
        gradebook.write_gradebook(out, reports, data["lessons"])
        print(t("gradebook: {out}, {out2}", out=out / 'index.html', out2=out / 'grades.csv'))
    print(t("reports written to {out}/", out=out))
    return grade.exit_code(students)


def cmd_grade_worker(args) -> int:
    from checks.grading_worker import run_worker
    if not args.broker:
        raise UsageError(t("needs --broker URL (or LAB_GRADE_BROKER)"))
    run_worker(args.broker, args.concurrency)
    return 0


def cmd_diff(args) -> int:
    data = load()
    [lesson] = select(data, [args.lesson], allow_planned=True)
    before = reference_files(data["lessons"], f"{int(lesson['id']) - 1:02d}") if lesson["id"] != "01" else {}
    changed = False
    for rel, path in lesson_files(lesson).items():
        new = path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
        old_path = before.get(rel)
        old = old_path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True) if old_path else []
        lines = list(difflib.unified_diff(old, new, f"a/{rel}" if old_path else "/dev/null", f"b/{rel}"))
        if lines:
            changed = True
            sys.stdout.writelines(line if line.endswith("\n") else line + "\n" for line in lines)
    if not changed:
        print(t("lesson {id} changes no files", id=lesson['id']))
    return 0


def cmd_watch(args) -> int:
    from checks.watch import watch
    data = load()
    lab = lab_path(args.lab) if args.lab else progress.learner_folder()
    if lab is None:
        raise UsageError(how_to_give_folder())
    lesson_id = args.lesson or next_lesson(data, lab)[0]
    if lesson_id is None:
        raise UsageError(t("give LESSON=NN"))
    [lesson] = select(data, [lesson_id], allow_planned=False)
    watch(lesson, data, lab, args.interval, args.max_runs)
    return 0


def cmd_help(args) -> int:
    console.print_help(load())
    return 0


def cmd_table(args) -> int:
    print(console.evidence_list(load()) if args.evidence else console.lesson_table(load()))
    return 0


def cmd_bench(args) -> int:
    from checks import kit_scripts
    return kit_scripts.bench(args.quick)


def cmd_soak(args) -> int:
    from checks import kit_scripts
    return kit_scripts.soak(args.jobs or (500 if args.long else 100), args.seed)


def cmd_monitor(args) -> int:
    """Lesson 16's observability page: a running soak's numbers, else the kit's services'."""
    from checks import monitor
    return monitor.serve(args.port, args.source)


def cmd_flake(args) -> int:
    """Repeated parallel runs of the reference; every non-pass is a bug in a checker (or the kit)."""
    from checks import flake
    data = load()
    lessons = [lesson for lesson in select(data, args.lessons, allow_planned=False) if lesson["status"] == "ready"]
    out = Path(args.out) if args.out else STATE_DIR / "flake" / "flake.json"
    try:
        return flake.hunt([lesson["id"] for lesson in lessons], args.rounds, args.parallel, args.burn, out,
                          seed=args.seed)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def cmd_clean(args) -> int:
    import shutil

    from shared import servicectl
    servicectl.down()  # the native servers keep their data under .state/services: stop them first, by PID
    if STATE_DIR.exists():
        shutil.rmtree(STATE_DIR)
    print(t("removed .state/"))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m checks", description="Task Lab checker runner")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="lessons, status, number of checks, last result")

    def reports(p):
        p.add_argument("--report", metavar="FILE.json", help="write a results.json-style report")
        p.add_argument("--junit", metavar="FILE.xml", help="write JUnit XML")
        p.add_argument("--html", metavar="FILE.html", help="write one self-contained HTML page (works offline)")

    run = sub.add_parser("run", help="run the checks of lessons (or all)")
    run.add_argument("lessons", nargs="+", metavar="NN")
    run.add_argument("--lab", metavar="DIR", help="check this learner folder instead of the reference")
    reports(run)

    check = sub.add_parser("check", help="check YOUR folder (given once with --lab, then remembered)")
    check.add_argument("lessons", nargs="*", metavar="NN", help="lesson ids, or all (default: the lesson you are on)")
    check.add_argument("--lab", metavar="DIR", help="your tasks_lab folder (remembered)")
    check.add_argument("--forget", action="store_true", help="forget the remembered folder")
    check.add_argument("--repeat", type=int, metavar="N", help="run the lesson N times and count each check's "
                       "passes: which pass only by chance (flaky in your code)")
    check.add_argument("--parallel", type=int, metavar="K", help="with --repeat: K runs side by side (default 2)")
    check.add_argument("--burn", type=int, metavar="C", help="with --repeat: C processes burning CPU meanwhile")
    check.add_argument("--seed", type=int, metavar="S", help="with --repeat: replay a series' conditions (its seed "
                       "is printed)")
    reports(check)

    lesson = sub.add_parser("lesson", help="run one lesson's reference files and checks, showing the evidence")
    lesson.add_argument("lesson", metavar="NN")
    reports(lesson)

    grade = sub.add_parser("grade", help="grade several learner folders; one report per folder")
    grade.add_argument("--lab", nargs="+", required=True, metavar="DIR")
    grade.add_argument("--lessons", nargs="+", default=["all"], metavar="NN")
    grade.add_argument("--out", default="grades", metavar="DIR")
    grade.add_argument("-j", "--jobs", type=int, default=1, metavar="N", help="grade N folders at once (N boxes)")
    grade.add_argument("--unsafe", action="store_true", help="grade without boxes where none can be made (risky)")
    grade.add_argument("--html", action="store_true", help="also write OUT/index.html (gradebook) and grades.csv")
    grade.add_argument("--broker", metavar="URL", default=os.environ.get("LAB_GRADE_BROKER"),
                       help="grade on the machines running grade-worker, through this Redis broker "
                            "(or LAB_GRADE_BROKER, which keeps the password out of ps)")
    grade.add_argument("--repeat", type=int, default=1, metavar="N", help="grade each folder N times per lesson; "
                       "a check's points count only if it passed every run (its pass rate is reported)")
    grade.add_argument("--at", metavar="REF",
                       help="grade each folder's git history at REF (lesson-{NN}: a tag per lesson)")
    grade.add_argument("--keep", action="store_true", help="keep each folder's work copies and logs under .state/ "
                                                          "(removed when its grading ends otherwise)")

    worker = sub.add_parser("grade-worker", help="grade folders sent by `grade --broker` on this machine")
    worker.add_argument("--broker", metavar="URL", default=os.environ.get("LAB_GRADE_BROKER"))
    worker.add_argument("-c", "--concurrency", type=int, default=1, metavar="N", help="folders graded at once")
    sub.add_parser("doctor", help="check Python, venv, packages, WSL, servers, ports, disk")
    diff = sub.add_parser("diff", help="what lesson NN changes relative to the folder after NN-1")
    diff.add_argument("lesson", metavar="NN")
    watch = sub.add_parser("watch", help="re-run a lesson's checks whenever a file changes")
    watch.add_argument("lesson", metavar="NN", nargs="?", help="default: the lesson you are on")
    watch.add_argument("--lab", metavar="DIR")
    watch.add_argument("--interval", type=float, default=1.0, help=argparse.SUPPRESS)
    watch.add_argument("--max-runs", type=int, default=None, help=argparse.SUPPRESS)
    sub.add_parser("help", help="the make targets and lessons (make help)")
    table = sub.add_parser("table", help="the README lesson table, from tasks.json")
    table.add_argument("--evidence", action="store_true",
                       help="the README's list of self-reported checks instead (tasks.json evidence)")
    sub.add_parser("clean", help="remove the .state/ work folders, logs and progress")
    bench = sub.add_parser("bench", help="run the teaching benchmarks (tables + JSON, never asserted)")
    bench.add_argument("--quick", action="store_true", help="a smaller run")
    soak = sub.add_parser("soak", help="jobs under chaos (killed workers, restarted servers), then a ledger")
    soak.add_argument("--long", action="store_true", help="500 jobs instead of 100")
    soak.add_argument("--jobs", type=int, default=None, help=argparse.SUPPRESS)
    soak.add_argument("--seed", type=int, default=None, help="repeat a run's chaos (its seed is printed)")
    mon = sub.add_parser("monitor", help="a page of lesson 16's numbers (backlog, ages, outbox lag, queues), "
                                         "live; during make soak it shows the soak's")
    mon.add_argument("--port", type=int, default=8016)
    mon.add_argument("--source", choices=("auto", "soak", "services"), default="auto",
                     help="auto: a running soak's numbers, else the services of make services")
    flake = sub.add_parser("flake", help="run the reference N rounds in K parallel isolated runs; list every non-pass")
    flake.add_argument("lessons", nargs="*", default=["all"], metavar="NN")
    flake.add_argument("--rounds", type=int, default=3)
    flake.add_argument("--parallel", type=int, default=2)
    flake.add_argument("--burn", type=int, default=0, metavar="C", help="C extra processes burning CPU meanwhile")
    flake.add_argument("--out", metavar="FILE.json")
    flake.add_argument("--seed", type=int, metavar="S", help="replay a hunt's conditions (its seed is printed)")
    return parser


COMMANDS = {"list": cmd_list, "run": cmd_run, "check": cmd_check, "lesson": cmd_lesson, "grade": cmd_grade,
            "grade-worker": cmd_grade_worker, "diff": cmd_diff,
            "watch": cmd_watch, "help": cmd_help, "table": cmd_table,
            "clean": cmd_clean, "bench": cmd_bench, "soak": cmd_soak, "flake": cmd_flake,
            "monitor": cmd_monitor}


RUNS_NOTHING = {"list", "help", "table", "diff", "clean"}  # commands that only read and print: any platform


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed the usage
        return 2 if exc.code else 0
    try:
        from checks import doctor
        if args.command == "doctor":
            return doctor.run()
        if args.command not in RUNS_NOTHING:
            level, what, fix = doctor.check_platform()
            if level != doctor.OK:
                print(t("error: ") + what + "\n    → " + fix, file=sys.stderr)
                return 2
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:  # Ctrl-C: the finally blocks on the way here stopped every box and process
        print("\n" + t("stopped (Ctrl-C): the checks under way were ended"), file=sys.stderr)
        return 130
    except BrokenPipeError:  # `make help | head`: the reader left; end quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except UsageError as exc:
        print(t("error: ") + str(exc), file=sys.stderr)
        _write_reports(args, [], getattr(args, "lab", None) or "reference", str(exc))
        return 2
    except OSError as exc:
        where = disk_full(exc)  # a WSL2 disk image fills up too
        if where is None:
            raise
        print(t("error: ") + t("no space left on the disk ({where}): free some space (make clean removes the kit's "
                               ".state/: work copies, logs, servers' data), then try again", where=where),
              file=sys.stderr)
        return 2
