"""Command line of the checker runner.  Exit codes: 0 all passed, 1 a check failed, 2 usage/environment."""

from __future__ import annotations

import argparse
import difflib
import os
import secrets
import sys
import time
from pathlib import Path

from checks import boxfiles, intake, preflight, progress, report, tamper
from checks.runner import (ERROR, FAIL, NOT_PASSED, NOT_REACHED, PASS, SKIPPED, SUPERSEDED, TIMEOUT, LessonResult,
                           every_check, run_lesson)
from checks.workdir import LAB_DIR, UsageError, lesson_files, materialise, reference_files
from shared import manifest
from shared.labctl import ServiceError
from shared.i18n import pick, t

MARKS = {PASS: "✓", FAIL: "✗", ERROR: "!", TIMEOUT: "⏱", SKIPPED: "–", SUPERSEDED: "↷", NOT_REACHED: "○"}
LABELS = {PASS: ("", ""), FAIL: ("", ""), ERROR: (" 出错", " ERROR"), TIMEOUT: (" 超时", " TIMEOUT"),
          SKIPPED: (" 未尝试", " SKIP"), SUPERSEDED: (" 已被替换", " SUPERSEDED"), NOT_REACHED: (" 未到达", " NOT REACHED")}


def _load() -> dict:
    try:
        return manifest.load()
    except manifest.ManifestError as exc:
        raise UsageError(t(f"清单有误：{exc}", f"malformed manifest: {exc}")) from None


def _select(data: dict, ids: list[str], allow_planned: bool) -> list[dict]:
    lessons = data["lessons"]
    if ids == ["all"]:
        return lessons
    chosen = []
    for raw in ids:
        lesson_id = raw.zfill(2) if raw.isdigit() else raw
        lesson = manifest.lesson(lesson_id, data)
        if lesson is None:
            known = ", ".join(l["id"] for l in lessons)
            raise UsageError(t(f"没有第 {raw} 课（可选：{known}，或 all）", f"no lesson {raw!r} (choose from {known}, or all)"))
        if lesson["status"] != "ready" and not allow_planned:
            raise UsageError(t(f"第 {lesson_id} 课还在计划中，尚未建成", f"lesson {lesson_id} is planned, not built yet"))
        chosen.append(lesson)
    return chosen


def _lab_path(raw: str | None) -> Path | None:
    if raw is None:
        return None
    path = Path(raw).expanduser().resolve()
    if not path.is_dir():
        raise UsageError(t(f"--lab {raw}：文件夹不存在", f"--lab {raw}: no such folder"))
    return path


def run_many(lessons: list[dict], data: dict, lab: Path | None, scope: str, show=None,
             on_start=None, skip_unreached: bool | None = None) -> list[LessonResult]:
    """Run each lesson (planned ones are reported as such); `scope` names the work/log subfolder.

    A learner's folder is read once, as data, into the host's own copy (checks/intake.py: no link
    followed, no special file read, sizes capped); everything after — the tamper scan, the folder's
    diagnosis, the lesson it reached, every box — only ever sees that copy.  IntakeRefused (a UsageError)
    says which path was refused and why.

    `skip_unreached` (default: when several lessons are run): a lesson the folder has not got to yet —
    none of its new files, nor any later lesson's — is reported "not reached" without running it."""
    if skip_unreached is None:
        skip_unreached = len(lessons) > 1
    if lab is None:
        return _run_lessons(lessons, data, None, None, scope, show, on_start, False)
    # A copy of this run's own: two runs at once (a check beside a watch, parallel tests) never share one.
    copy = boxfiles.private_dir(LAB_DIR / "intake" / scope) / f"{os.getpid()}-{secrets.token_hex(4)}"
    try:
        intake.take_in(lab, copy)
        findings = tamper.scan(copy)
        if findings:  # code that reaches into the checker: no verdict of this folder could be trusted
            from checks.grade import errored
            results = errored([l for l in lessons if l["status"] == "ready"], tamper.message(findings), tampering=True)
            for result in results:
                if show:
                    show(result)
            return results
        return _run_lessons(lessons, data, lab, copy, scope, show, on_start, skip_unreached)
    finally:
        boxfiles.remove(copy)


def _run_lessons(lessons, data, lab: Path | None, copy: Path | None, scope: str, show, on_start,
                 skip_unreached: bool) -> list[LessonResult]:
    results = []
    reached = reached_lesson(data, copy) if copy else None
    for lesson in lessons:
        if on_start:
            on_start(lesson)
        ahead = copy is not None and (reached is None or lesson["id"] > reached)
        if lesson["status"] != "ready":
            result = every_check(lesson, SKIPPED, t("本课尚未建成（planned）", "lesson not built yet (planned)"),
                                 source="planned")
        elif ahead and skip_unreached:
            result = every_check(lesson, NOT_REACHED, _where_the_folder_is(lesson, data, reached), str(lab))
        else:
            workdir = LAB_DIR / "work" / scope / lesson["id"]
            log_dir = LAB_DIR / "logs" / scope / lesson["id"]
            materialise(data["lessons"], lesson, workdir, copy)
            problems = preflight.diagnose(lesson, data["lessons"], copy) if copy else []
            try:
                # A folder that has moved past this lesson: its whole schema, and checks of what later
                # lessons replaced are superseded (not counted).
                result = run_lesson(lesson, workdir, log_dir, source=str(lab) if lab else "reference",
                                    schema_upto=reached)
            except ServiceError as exc:  # a service down: says what to do
                raise UsageError(str(exc)) from None
            if lab:
                _speak_of_the_learners_folder(result, problems, {workdir: lab, copy: lab})
                if ahead:  # checked on request, though its new files are not there: say where the folder is
                    result.notices.insert(0, _where_the_folder_is(lesson, data, reached))
                broken_env = preflight.env_file_notice(lesson, copy)
                if broken_env:
                    result.notices.append(broken_env)
        results.append(result)
        if show:
            show(result)
    return results


def _new_files(lesson: dict, data: dict) -> list[str]:
    """The files lesson NN adds (not those it rewrites: an earlier lesson's folder has those too)."""
    earlier = {name for l in data["lessons"] if l["id"] < lesson["id"] for name in l.get("files", [])}
    return [name for name in lesson.get("files", []) if name not in earlier]


def _where_the_folder_is(lesson: dict, data: dict, reached: str | None) -> str:
    new = ", ".join(_new_files(lesson, data)[:4])
    at = t(f"你的文件夹里的文件到第 {reached} 课为止", f"your folder's files reach lesson {reached}") if reached else \
        t("你的文件夹里还没有任何一课的文件", "your folder has no lesson's files yet")
    return t(f"{at}：第 {lesson['id']} 课新增的文件（{new}）还不在文件夹里",
             f"{at}: the files lesson {lesson['id']} adds ({new}) are not in it yet")


def _regression_cause(lesson: dict, earlier_id: str) -> str:
    """A regression failed: it passed on what lesson `earlier_id` built, so this lesson's changes broke it —
    name them (the files this lesson rewrites of what came before, else every file it brings)."""
    data = manifest.load()
    before = {name for l in data["lessons"] if l["id"] <= earlier_id for name in l.get("files", [])}
    mine = [n for n in lesson.get("files", []) if n.endswith((".py", ".sql"))]
    changed = ", ".join([n for n in mine if n in before] or mine) or "?"
    return t(f"这是第 {earlier_id} 课的检查，在你第 {lesson['id']} 课的文件上重跑：第 {lesson['id']} 课的改动（{changed}）"
             f"破坏了第 {earlier_id} 课建好的行为",
             f"this is lesson {earlier_id}'s check, re-run on your lesson-{lesson['id']} files: a change you made for "
             f"lesson {lesson['id']} ({changed}) broke what lesson {earlier_id} built")


def _kit_files_in_work() -> dict[str, Path]:
    """Names the kit lays into a work copy (every lesson's verifiers, shared/, checks/) -> where they live."""
    return {"shared": manifest.KIT_ROOT / "shared", "checks": manifest.KIT_ROOT / "checks",
            **manifest.kit_verifier_files()}


def _speak_of_the_learners_folder(result: LessonResult, problems: list, copies: dict[Path, Path]) -> None:
    """Paths in the host's copies (the intake copy, the box's scratch copy) become the learner's own; a
    check that failed because of a problem with the folder as a whole is shown as blocked by it instead
    of repeating the same traceback."""
    kit = {name: str(path) for name, path in _kit_files_in_work().items()}

    def theirs(text: str) -> str:
        for copy, lab in copies.items():
            if str(copy) not in text:
                continue
            for name, path in kit.items():  # the kit's own files in the copy are the kit's, not the learner's
                text = text.replace(f"{copy}/{name}", path)
            text = text.replace(str(copy), str(lab))
        return text
    for problem in problems:
        problem.message = theirs(problem.message)
    blocking = set()
    for c in result.checks:
        c.message = theirs(c.message)
        c.notes = [theirs(n) for n in c.notes]
    # One mistake that broke many checks (lesson 11's MySQL-only line on MariaDB): said once, the rest wait.
    problems = problems + preflight.causes_seen(["\n".join([c.message, *c.notes]) for c in result.checks
                                                 if c.status in NOT_PASSED], result.lesson["id"])
    for c in result.checks:
        if c.status in NOT_PASSED:
            cause = preflight.blocked_by(problems, "\n".join([c.message, *c.notes]))
            if cause is not None:
                blocking.add(cause.file)
                c.status, c.blocked, c.notes = ERROR, cause.file, []
                c.message = t(f"被上面的问题挡住：先修好 {cause.file}", f"blocked by the problem above: fix {cause.file} first")
    result.problems = [p.message for p in problems if not p.only_if_blocking or p.file in blocking]


def print_lesson(result: LessonResult, evidence: bool = False, first_failure_only: bool = False) -> None:
    lesson = result.lesson
    print(f"\n{t('第 ', 'Lesson ')}{lesson['id']}{t(' 课', '')} — {pick(lesson['title'])}")
    if result.source == "planned":
        print("  " + t("（计划中，尚未建成：不计为通过）", "(planned, not built yet: not counted as passed)"))
        return
    for notice in result.notices:
        print(f"  ! {notice}")
    for problem in result.problems:
        print(f"  ✗ {problem}")
    if result.problems:
        print("  " + t("先修好上面的问题：依赖它的检查都被挡住了。", "Fix the problem(s) above first: the checks that need them are blocked."))
    shown_failure = False
    explained: dict[str, str] = {}  # a message already shown -> the check that showed it
    own = [c for c in result.checks if not c.regression]
    regressions = [c for c in result.checks if c.regression]
    for heading, group in ((None, own), (t("回归（之前课程的检查，在本课的文件上重跑）：",
                                            "Regressions (earlier lessons' checks, re-run on this lesson's files):"),
                                          regressions)):
        if heading and group:
            print(f"  {heading}")
        for c in group:
            label = t(f" 被挡住（{c.blocked}）", f" BLOCKED ({c.blocked})") if c.blocked else t(*LABELS[c.status])
            print(f"  {MARKS[c.status]} {c.id:<6} {pick(c.text)}  ({c.seconds:.2f}s){label}")
            if c.status in NOT_PASSED and c.blocked:
                pass  # the problem is said once, above the checks
            elif c.status in NOT_PASSED and c.message and c.message in explained:
                print("      " + t(f"与 {explained[c.message]} 同一个原因：先修它", f"same cause as {explained[c.message]}: fix that first"))
            elif c.status in NOT_PASSED and not (first_failure_only and shown_failure):
                shown_failure = True
                explained.setdefault(c.message, c.id)
                if c.message:
                    print(f"      {t('原因：', 'why: ')}{c.message}")
                for line in [n for n in c.notes if n != c.message][-10:]:
                    print(f"      | {line}")
                if c.regression:
                    print("      " + _regression_cause(result.lesson, c.lesson))
                print(f"      {t('提示：', 'hint: ')}{pick(c.hint)}")
            elif c.status in (SKIPPED, SUPERSEDED, NOT_REACHED) and c.message and c.message not in explained:
                explained.setdefault(c.message, c.id)
                print(f"      {c.message}")
            elif evidence and c.status == PASS:
                for line in c.notes[-6:]:
                    print(f"      · {line}")
    failed = [c for c in result.checks if c.status in NOT_PASSED]
    if first_failure_only and len(failed) > 1:
        print("  " + t(f"（另有 {len(failed) - 1} 项失败的原因未显示：先修第一项；全部原因：make check）",
                       f"({len(failed) - 1} more failure(s) not explained here: fix the first one; all reasons: make check)"))
    print(f"  {report.count_text(report.count_checks(result.checks))}" +
          t(f"（用时 {result.seconds:.1f}s）", f" ({result.seconds:.1f}s)"))
    if failed and result.logs:
        existing = [os.path.relpath(p) for p in result.logs if p.exists()]
        if existing:
            print("  " + t("完整日志：", "full logs: ") + ", ".join(existing))


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
    data = _load()
    reference = progress.load()
    folder = progress.learner_folder()
    mine = progress.load(str(folder)) if folder else {}

    def last(entry):  # the same words as a run's summary line, its regressions left to the run itself
        if not entry:
            return "—"
        return report.count_text(entry["counts"], regressions=False) if "counts" in entry else entry["status"]
    print(t(f"你的文件夹：{folder}" if folder else "你的文件夹：（尚未记住；make check LAB=目录）",
            f"your folder: {folder}" if folder else "your folder: (none remembered yet; make check LAB=DIR)"))
    for lesson in data["lessons"]:
        planned = "" if lesson["status"] == "ready" else t("（计划中）", " (planned)")
        print(f"{lesson['id']}  {pick(lesson['title'])}{planned} — " +
              t(f"{len(lesson['checks'])} 项检查；参考答案上次：{last(reference.get(lesson['id']))}；"
                f"你的文件夹上次：{last(mine.get(lesson['id']))}",
                f"{len(lesson['checks'])} checks; reference last: {last(reference.get(lesson['id']))}; "
                f"your folder last: {last(mine.get(lesson['id']))}"))
    return 0


def _announce(lab: Path | None) -> None:
    """The first line of every run: whose code is being checked."""
    if lab:
        print(t(f"检查你的文件夹：{lab}（只读取，不修改）", f"checking your folder: {lab} (read only, never changed)"))
        from checks.runner import boxing
        if boxing() != "on":
            from checks.box import availability
            print(t(f"警告：没有沙箱，你的代码直接在本机运行（{availability()[1] or 'LAB_BOX=off'}）",
                    f"warning: no box, your code runs directly on this machine ({availability()[1] or 'LAB_BOX=off'})"))
    else:
        print(t("检查的是套件自带的参考答案，不是你的文件夹", "checking the kit's reference files, not your folder"))


def cmd_run(args, evidence: bool = False) -> int:
    data = _load()
    lessons = _select(data, args.lessons, allow_planned=args.lessons == ["all"])
    lab = _lab_path(args.lab)
    scope = "lab" if lab else "reference"
    _announce(lab)
    results = run_many(lessons, data, lab, scope, show=lambda r: print_lesson(r, evidence=evidence))
    progress.record([r for r in results if r.source != "planned"])
    if not lab:  # keep the reference's timelines: a report on a learner's folder draws them alongside
        from checks import timelines
        timelines.save_reference(report.to_dict([r for r in results if r.source != "planned"], "reference"))
    _write_reports(args, results, str(lab) if lab else "reference")
    every = [c for r in results for c in r.checks]
    m = report.marks(every)
    line = t(f"合计：{report.count_text(report.count_checks(every))}；得分 {m['score']}/{m['max_score']}",
             f"total: {report.count_text(report.count_checks(every))}; score {m['score']}/{m['max_score']}")
    superseded = sum(not c.counted for r in results for c in r.checks)
    if superseded:
        line += t(f"；{superseded} 项已被后面的课程替换，不计分", f"; {superseded} superseded by later lessons, not counted")
    if m["max_bonus"]:
        line += t(f"（另有课程之外的扩展加分 {m['bonus']}/{m['max_bonus']}）",
                  f" (plus bonus {m['bonus']}/{m['max_bonus']} from the kit's extensions beyond the course)")
    print("\n" + line)
    return _exit_code(results)


def cmd_lesson(args) -> int:
    args.lessons, args.lab = [args.lesson], None
    code = cmd_run(args, evidence=True)
    lesson_id = args.lesson.zfill(2)
    where = os.path.relpath(LAB_DIR / "work" / "reference" / lesson_id)
    print(t(f"\n参考文件在 {where}/。检查自己的文件夹：make check LESSON={lesson_id} LAB=~/shop-service/tasks_lab",
            f"\nThe reference files are in {where}/. Check your own folder: "
            f"make check LESSON={lesson_id} LAB=~/shop-service/tasks_lab"))
    return code


def reached_lesson(data: dict, folder: Path) -> str | None:
    """The highest lesson whose new files (those it adds, not those it rewrites: an earlier lesson's folder
    has those too) the folder already has."""
    reached, earlier = None, set()
    for lesson in data["lessons"]:
        new = [name for name in lesson.get("files", []) if name not in earlier]
        earlier.update(lesson.get("files", []))
        if lesson["status"] == "ready" and any(boxfiles.is_plain_file(folder / name) for name in new):
            reached = lesson["id"]
    return reached


def next_lesson(data: dict, folder: Path | None) -> tuple[str | None, str]:
    """The lesson a learner is on, and why: the highest lesson their folder's files reach — what the
    folder is, not which lesson some earlier run happened to check (a failed check of an earlier lesson
    never sends a learner back)."""
    if folder is None:
        return None, ""
    reached = reached_lesson(data, folder)
    if reached is None:
        return None, ""
    if progress.load(str(folder)).get(reached, {}).get("status") == "pass":
        return reached, t(f"上次通过了第 {reached} 课，文件夹里还没有下一课的文件",
                          f"you last passed lesson {reached}; your folder has no file of the next lesson yet")
    return reached, t(f"你的文件夹里最新的是第 {reached} 课的文件", f"your folder's files reach lesson {reached}")


HOW_TO_GIVE_FOLDER = (
    "还不知道你的文件夹在哪里。第一次请这样给出：make check LAB=~/shop-service/tasks_lab LESSON=01"
    "（之后会记住；看参考答案请用 make lesson-01）",
    "no folder of yours is known yet. Give it once: make check LAB=~/shop-service/tasks_lab LESSON=01 "
    "(it is remembered; to see the reference work, use make lesson-01)")


def cmd_check(args) -> int:
    """The learner's command: check THEIR folder — given once with --lab, remembered afterwards."""
    data = _load()
    if args.forget:
        progress.remember_folder(None)
        print(t("已忘记你的文件夹", "forgot your folder"))
        return 0
    if args.lab:
        lab = _lab_path(args.lab)
        if lab != progress.learner_folder():
            progress.remember_folder(lab)
            print(t(f"记住了你的文件夹：{lab}（换一个：make check LAB=目录；忘记：make forget）",
                    f"remembered your folder: {lab} (change: make check LAB=DIR; forget: make forget)"))
    else:
        lab = progress.learner_folder()
        if lab is None:
            raise UsageError(t(*HOW_TO_GIVE_FOLDER))
        if not lab.is_dir():
            raise UsageError(t(f"记住的文件夹 {lab} 不存在了：make check LAB=新目录，或 make forget",
                               f"the remembered folder {lab} no longer exists: make check LAB=NEW_DIR, or make forget"))
    lessons = args.lessons
    if not lessons:
        chosen, why = next_lesson(data, lab)
        if chosen is None:
            raise UsageError(t(f"{lab} 里没有任何一课的文件：请给出 LESSON=NN",
                               f"{lab} has no file of any lesson yet: give LESSON=NN"))
        print(t(f"检查第 {chosen} 课（{why}；指定其他课：LESSON=NN，全部：LESSON=all）",
                f"checking lesson {chosen} ({why}; another: LESSON=NN, every lesson: LESSON=all)"))
        lessons = [chosen]
    args.lessons, args.lab = lessons, str(lab)
    return cmd_run(args)


def cmd_grade(args) -> int:
    from checks import grade
    from checks.runner import boxing
    data = _load()
    lessons = _select(data, args.lessons, allow_planned=args.lessons == ["all"])
    out = Path(args.out)
    if boxing() != "on":
        from checks.box import availability
        if not args.unsafe:
            raise UsageError(t(f"无法为学生代码创建沙箱（{availability()[1]}）。不在沙箱里运行陌生人的代码会危及本机；"
                               "确实要这样做请加 --unsafe", f"no box can be made for learner code here "
                               f"({availability()[1]}). Running strangers' code unboxed puts this machine at risk; "
                               "add --unsafe if you really mean to"))
        print(t("警告：--unsafe，学生代码不在沙箱里运行，并且一次只评一个文件夹",
                "warning: --unsafe: learner code runs unboxed, one folder at a time"), file=sys.stderr)
        args.jobs = 1  # unboxed runs share the kit's servers: one at a time
    if args.broker:  # spread over grading machines (checks/distributed.py); each grades in boxes
        from checks.distributed import submit_and_collect
        students = submit_and_collect([Path(p) for p in args.lab], [l["id"] for l in lessons], out, args.broker,
                                      at=args.at)
    else:
        students = grade.grade(args.lab, lessons, data, out, args.jobs, run_many, at=args.at, keep=args.keep)
    print(t("学生                 得分      状态    扩展加分", "student              score     status  bonus"))
    for s in students:
        m = report.marks([c for r in s.results for c in r.checks])
        flag = t("  疑似篡改", "  tampering suspected") if any(c.tampered for r in s.results for c in r.checks) else ""
        print(f"{s.name:<20} {m['score']:>3}/{m['max_score']:<5} {grade.status_of(s):<7} +{m['bonus']}{flag}")
    if args.html:
        import json as _json

        from checks import gradebook
        reports = {s.name: _json.loads((out / f"{s.name}.json").read_text(encoding="utf-8")) for s in students}
        gradebook.write_gradebook(out, reports, data["lessons"])
        print(t(f"成绩册：{out / 'index.html'}，{out / 'grades.csv'}", f"gradebook: {out / 'index.html'}, {out / 'grades.csv'}"))
    print(t(f"报告写在 {out}/", f"reports written to {out}/"))
    return grade.exit_code(students)


def cmd_grade_worker(args) -> int:
    from checks.distributed import run_worker
    if not args.broker:
        raise UsageError(t("需要 --broker URL（或 LAB_GRADE_BROKER）", "needs --broker URL (or LAB_GRADE_BROKER)"))
    run_worker(args.broker, args.concurrency)
    return 0


def cmd_diff(args) -> int:
    data = _load()
    [lesson] = _select(data, [args.lesson], allow_planned=True)
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
        print(t(f"第 {lesson['id']} 课没有文件改动", f"lesson {lesson['id']} changes no files"))
    return 0


def folder_signature(folder: Path) -> tuple:
    """What changes when a learner saves a file: names, sizes and mtimes (polling works on WSL2 and network drives)."""
    entries = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d not in {".venv", "venv", "__pycache__", ".git", ".lab", ".pytest_cache"}]
        for name in files:
            path = Path(root, name)
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            entries.append((str(path.relative_to(folder)), stat.st_size, stat.st_mtime_ns))
    return tuple(sorted(entries))


def cmd_watch(args) -> int:
    data = _load()
    lab = _lab_path(args.lab) if args.lab else progress.learner_folder()
    if lab is None:
        raise UsageError(t(*HOW_TO_GIVE_FOLDER))
    lesson_id = args.lesson or next_lesson(data, lab)[0]
    if lesson_id is None:
        raise UsageError(t("请给出 LESSON=NN", "give LESSON=NN"))
    [lesson] = _select(data, [lesson_id], allow_planned=False)
    folder = lab
    seen, runs = None, 0
    try:
        while args.max_runs is None or runs < args.max_runs:
            current = folder_signature(folder)
            if current != seen:
                seen = current
                runs += 1
                if sys.stdout.isatty():
                    print("\033[2J\033[H", end="")
                [result] = run_many([lesson], data, lab, "watch")
                print_lesson(result, first_failure_only=True)
                print("\n" + t(f"正在监视 {folder}（Ctrl-C 退出）", f"watching {folder} (Ctrl-C to stop)"), flush=True)
            time.sleep(args.interval)
    except KeyboardInterrupt:
        print("\n" + t("已停止监视", "stopped watching"))
    return 0


def cmd_help(args) -> int:
    data = _load()
    print(t("Task Lab 常用命令：", "Task Lab commands:"))
    rows = [
        ("make lesson-NN", t("运行第 NN 课的参考文件与全部检查（首次会创建 .venv）", "run lesson NN's reference files and checks (creates .venv on first use)")),
        ("make check LAB=DIR [LESSON=NN]", t("检查你自己的文件夹（记住 DIR；之后 make check 即可）",
                                              "check your own folder (DIR is remembered: later just make check)")),
        ("make check LESSON=all", t("检查你的文件夹的全部课程", "check every lesson on your folder")),
        ("make forget", t("忘记记住的文件夹", "forget the remembered folder")),
        ("make list", t("各课状态：参考答案与你的文件夹的上次结果", "lessons with the last result of the reference and of your folder")),
        ("make watch LESSON=NN LAB=DIR", t("保存文件时自动重新检查", "re-check whenever you save")),
        ("make diff-NN", t("查看第 NN 课相对上一课的改动", "what lesson NN changes")),
        ("make doctor", t("检查本机环境", "check this machine")),
        ("make test", t("运行套件自身的全部测试", "run the kit's own test suite")),
        ("make test-all", t("完整版：每个变异体、每项检查单独运行", "the whole of it: every mutant, every check run alone")),
        ("make bench", t("运行教学用基准测试（表格 + JSON）", "run the teaching benchmarks (table + JSON)")),
        ("make soak", t("长时间混沌测试：杀 worker、重启服务，最后逐条对账（丢失必须为 0）",
                        "the long soak: killed workers, restarted servers, then a ledger (lost must be 0)")),
        ("make monitor [PORT=8016]", t("第 16 课的监控页面（积压、等待时长、发件箱延迟、队列深度），实时刷新；make soak 运行时显示它的数字",
                                       "lesson 16's live monitor page (backlog, ages, outbox lag, queue depths); "
                                       "during make soak it shows the soak's numbers")),
        ("make flake [LESSON=NN] [ROUNDS=N] [PARALLEL=K] [BURN=C]",
         t("找不稳定：参考答案多轮并行运行（可加 CPU 负载），列出每一次未通过",
           "flake hunt: the reference in repeated parallel runs (optionally under CPU load); every non-pass listed")),
        ("make grade-drill", t("分布式批改演练：三个 Celery worker，杀一个、停一个、重启 broker，最后对账",
                               "distributed grading drill: three Celery workers, one killed, one stopped, the broker "
                               "restarted, then a ledger")),
        ("make services", t("为你自己的终端工作启动 Redis 与 MySQL", "start Redis and MySQL for your own terminal work")),
        ("make services-status", t("查看服务状态", "are the services up?")),
        ("make services-down", t("停止本套件启动的服务", "stop the services the kit started")),
        ("make clean", t("停止服务并删除 .lab/", "stop the services and remove .lab/")),
    ]
    for cmd, text in rows:
        print(f"  {cmd:<30} {text}")
    print("\n" + t("课程：", "Lessons:"))
    for lesson in data["lessons"]:
        state = "" if lesson["status"] == "ready" else t("（计划中）", " (planned)")
        print(f"  make lesson-{lesson['id']}   {pick(lesson['title'])}{state}")
    return 0


def lesson_table(data: dict) -> str:
    """The README's lesson table, generated from tasks.json (tests keep the README in step)."""
    lines = ["| # | Lesson | 课程 | Checks | Status |", "|---|---|---|---|---|"]
    for lesson in data["lessons"]:
        lines.append(f"| {lesson['id']} | [{lesson['title']['en']}]({lesson['folder']}/) | {lesson['title']['zh']} "
                     f"| {len(lesson['checks'])} | {lesson['status']} |")
    return "\n".join(lines)


def cmd_table(args) -> int:
    print(lesson_table(_load()))
    return 0


def run_kit_script(lesson_id: str, script: str, args: list[str], exclusive: bool = False,
                   monitor: bool = False) -> int:
    # `script`: a lesson's own file (bench_taskcenter.py) or one of the kit's tools (checks.tools.soak),
    # run as `python -m` so the lesson's modules in the work folder import as they do for its scripts.
    """Run one of the kit's scripts (a benchmark, the soak) in a fresh reference folder of its lesson, in
    a box of its own with the lesson's servers (what a check run gets: servers, .env.tasks, a fresh
    database); the script starts and stops its own processes.  Its --out file is written inside the box's
    log folder and copied to where it was asked for.  Without a box: the kit's servers, and `exclusive`
    (it stops or restarts a server) keeps every check away meanwhile.
    """
    import shutil

    from checks.runner import boxing, run_script
    data = _load()
    [lesson] = _select(data, [lesson_id], allow_planned=False)
    name = script.rsplit(".", 1)[-1] if not script.endswith(".py") else Path(script).stem
    command = [script] if script.endswith(".py") else ["-m", script]
    workdir = materialise(data["lessons"], lesson, LAB_DIR / "work" / name)
    log_dir = LAB_DIR / "logs" / name
    if log_dir.exists():
        shutil.rmtree(log_dir)
    log_dir.mkdir(parents=True)
    wanted = None
    if "--out" in args:
        at = args.index("--out") + 1
        wanted, args = Path(args[at]), [*args[:at], str(log_dir / Path(args[at]).name), *args[at + 1:]]
    if lesson.get("services") and boxing() != "on":
        from shared import labctl
        with labctl.in_use(exclusive=exclusive):
            labctl.up(lesson["services"])
            code = run_script(lesson, workdir, log_dir, [*command, *args], monitor)
    else:
        code = run_script(lesson, workdir, log_dir, [*command, *args], monitor)
    if wanted is not None:  # written in the box: read back as data (no link followed, capped)
        try:
            made = boxfiles.read(log_dir / wanted.name, 64 << 20)
        except OSError:
            made = None
        if made is not None:
            wanted.parent.mkdir(parents=True, exist_ok=True)
            wanted.write_bytes(made)
    return code


BENCHMARKS = [("07", "bench_taskcenter.py", "taskcenter.json"),
              ("13", "checks.tools.bench_durable", "durable.json")]


def cmd_bench(args) -> int:
    """Benchmarks that teach: each prints a table and writes JSON; nothing is asserted."""
    worst = 0
    for lesson_id, script, out_name in BENCHMARKS:
        out = LAB_DIR / "bench" / out_name
        out.parent.mkdir(parents=True, exist_ok=True)
        code = run_kit_script(lesson_id, script, ["--out", str(out)] + (["--quick"] if args.quick else []))
        print(t(f"结果 JSON：{os.path.relpath(out)}", f"results JSON: {os.path.relpath(out)}"))
        worst = max(worst, 0 if code == 0 else 1)
    return worst


def cmd_soak(args) -> int:
    """The soak: many jobs through the whole durable path while a chaos loop kills workers and
    restarts both servers; then every acknowledged submit is accounted for (lost must be 0)."""
    out = LAB_DIR / "soak" / "ledger.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    argv = ["--jobs", str(args.jobs or (500 if args.long else 100)), "--out", str(out)]
    if args.seed is not None:
        argv += ["--seed", str(args.seed)]
    code = run_kit_script("16", "checks.tools.soak", argv, exclusive=True, monitor=True)
    print(t(f"账本 JSON：{os.path.relpath(out)}", f"ledger JSON: {os.path.relpath(out)}"))
    if out.is_file():  # and a page: the ledger, the backlog over time (the monitor's feed), the chaos
        import json

        from checks import monitor, timelines
        page = out.with_suffix(".html")
        history = monitor.read_history(LAB_DIR / "logs" / "soak" / monitor.HISTORY_NAME)
        timelines.write_soak_page(page, json.loads(out.read_text(encoding="utf-8")), history)
        print(t(f"账本页面：{os.path.relpath(page)}", f"ledger page: {os.path.relpath(page)}"))
    return 0 if code == 0 else 1


def cmd_monitor(args) -> int:
    """Lesson 16's observability page: a running soak's numbers, else the kit's services'."""
    from checks import monitor
    return monitor.serve(args.port, args.source)


def cmd_flake(args) -> int:
    """Repeated parallel runs of the reference; every non-pass is a bug in a checker (or the kit)."""
    from checks import flake
    data = _load()
    lessons = [l for l in _select(data, args.lessons, allow_planned=False) if l["status"] == "ready"]
    out = Path(args.out) if args.out else LAB_DIR / "flake" / "flake.json"
    try:
        return flake.hunt([l["id"] for l in lessons], args.rounds, args.parallel, args.burn, out)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def cmd_clean(args) -> int:
    import shutil

    from shared import labctl
    labctl.down()  # the native servers keep their data under .lab/services: stop them first, by PID
    if LAB_DIR.exists():
        shutil.rmtree(LAB_DIR)
    print(t("已删除 .lab/", "removed .lab/"))
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
    grade.add_argument("--at", metavar="REF", help="grade each folder's git history at REF (lesson-{NN}: a tag per lesson)")
    grade.add_argument("--keep", action="store_true", help="keep each folder's work copies and logs under .lab/ "
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
    sub.add_parser("table", help="the README lesson table, from tasks.json")
    sub.add_parser("clean", help="remove the .lab/ work folders, logs and progress")
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
    return parser


COMMANDS = {"list": cmd_list, "run": cmd_run, "check": cmd_check, "lesson": cmd_lesson, "grade": cmd_grade,
            "grade-worker": cmd_grade_worker, "diff": cmd_diff,
            "watch": cmd_watch, "help": cmd_help, "table": cmd_table,
            "clean": cmd_clean, "bench": cmd_bench, "soak": cmd_soak, "flake": cmd_flake,
            "monitor": cmd_monitor}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed the usage
        return 2 if exc.code else 0
    try:
        if args.command == "doctor":
            from checks import doctor
            return doctor.run()
        return COMMANDS[args.command](args)
    except BrokenPipeError:  # `make help | head`: the reader left; end quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except UsageError as exc:
        print(t("错误：", "error: ") + str(exc), file=sys.stderr)
        _write_reports(args, [], getattr(args, "lab", None) or "reference", str(exc))
        return 2
