"""What the terminal shows: a lesson's checks with their marks and reasons, whose code a run checks, the
run's total, the lessons with their last results, `make help` and the README's lesson table."""

from __future__ import annotations

import os
from pathlib import Path

from checks import progress, report
from checks.box import availability
from checks.results import ERROR, FAIL, NOT_PASSED, NOT_REACHED, PASS, SKIPPED, SUPERSEDED, TIMEOUT, LessonResult
from checks.sandbox import boxing
from shared import manifest
from shared.i18n import pick, t

MARKS = {PASS: "✓", FAIL: "✗", ERROR: "!", TIMEOUT: "⏱", SKIPPED: "–", SUPERSEDED: "↷", NOT_REACHED: "○"}
LABELS = {PASS: ("", ""), FAIL: ("", ""), ERROR: (" 出错", " ERROR"), TIMEOUT: (" 超时", " TIMEOUT"),
          SKIPPED: (" 未尝试", " SKIP"), SUPERSEDED: (" 已被替换", " SUPERSEDED"), NOT_REACHED: (" 未到达", " NOT REACHED")}


def regression_cause(lesson: dict, earlier_id: str) -> str:
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
                    print("      " + regression_cause(result.lesson, c.lesson))
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


def announce(lab: Path | None) -> None:
    """The first line of every run: whose code is being checked."""
    if lab:
        print(t(f"检查你的文件夹：{lab}（只读取，不修改）", f"checking your folder: {lab} (read only, never changed)"))
        if boxing() != "on":
            print(t(f"警告：没有沙箱，你的代码直接在本机运行（{availability()[1] or 'LAB_BOX=off'}）",
                    f"warning: no box, your code runs directly on this machine ({availability()[1] or 'LAB_BOX=off'})"))
    else:
        print(t("检查的是套件自带的参考答案，不是你的文件夹", "checking the kit's reference files, not your folder"))


def print_total(results: list[LessonResult]) -> None:
    """The run's last line: every check counted, the score, what was superseded, the bonus."""
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


def print_list(data: dict) -> None:
    """`make list`: each lesson with the last result of the reference and of the learner's folder."""
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


def print_help(data: dict) -> None:
    """`make help`: the make targets, then the lessons."""
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


def lesson_table(data: dict) -> str:
    """The README's lesson table, generated from tasks.json (tests keep the README in step)."""
    lines = ["| # | Lesson | 课程 | Checks | Status |", "|---|---|---|---|---|"]
    for lesson in data["lessons"]:
        lines.append(f"| {lesson['id']} | [{lesson['title']['en']}]({lesson['folder']}/) | {lesson['title']['zh']} "
                     f"| {len(lesson['checks'])} | {lesson['status']} |")
    return "\n".join(lines)
