"""checks.tools.sizes: the checker-beside-lesson measure the maintainer's notes quote."""

from checks.tools import sizes

SAMPLE = '''"""A checker.

It proves things."""

import os  # why os


def check(c):
    """One line."""
    # a comment
    assert os.sep, t("the separator is {sep}",
                     sep=os.sep)
    return t_in("en", "done")
'''


def test_each_line_is_counted_once_as_its_kind():
    assert sizes.kinds_of(SAMPLE) == {"blank": 4, "docstring": 3, "message": 3, "comment": 1, "code": 2}
    assert sum(sizes.kinds_of(SAMPLE).values()) == len(SAMPLE.splitlines())


def test_every_lesson_is_measured_and_the_total_adds_up(capsys):
    rows = sizes.measure()
    *lessons, total = rows
    assert [row["lesson"] for row in lessons] == [f"{n:02d}" for n in range(1, 17)] and total["lesson"] == "all"
    for row in rows:
        assert row["lesson_code"] > 0 and row["checker"] == sum(row[kind] for kind in sizes.KINDS)
        assert row["ratio"] == round(row["checker"] / row["lesson_code"], 2)
    assert lessons[0]["folder"] == lessons[0]["lesson_code"]  # the first lesson is the whole folder
    assert all(later["folder"] >= later["lesson_code"] for later in lessons)
    assert total["checker"] == sum(row["checker"] for row in lessons) and total["folder"] == lessons[-1]["folder"]
    assert sizes.main([]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].split()[:5] == ["lesson", "lesson_code", "folder", "checker", "ratio"]
    assert printed[-1].split()[0] == "all"


def test_every_checker_over_twice_its_lesson_says_why_in_the_lessons_readme():
    """lessons/README.md 'How long a checker is, and why': a row for each lesson whose checker is more than
    twice its lesson code, and none claimed to be at most twice that is not."""
    import re

    from shared.manifest import KIT_ROOT
    text = (KIT_ROOT / "lessons" / "README.md").read_text(encoding="utf-8")
    section = text.split("## How long a checker is, and why", 1)[1].split("\n## ", 1)[0]
    explained = set(re.findall(r"^\| (\d\d) \|", section, re.M))
    over = {row["lesson"] for row in sizes.measure()[:-1] if row["ratio"] > 2}
    assert over <= explained, f"checkers over 2x without a reason: {sorted(over - explained)}"
    claimed = re.search(r"Lessons ([\d, and]+) carry most of their logic", section)[1]
    assert not set(re.findall(r"\d\d", claimed)) & over, claimed
