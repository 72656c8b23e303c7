"""tasks.json, the lesson folders, the README and make help must agree."""

import ast
import os
import json
import re
import subprocess
import sys
from unittest import mock

import pytest

from checks.console import evidence_list, lesson_table
from checks.workdir import lesson_files
from shared import manifest
from tests.mutants import ROTATION, all_mutants, failed_pairs, for_today

DATA = manifest.load()
READY = [lesson for lesson in DATA["lessons"] if lesson["status"] == "ready"]


def test_manifest_lists_all_sixteen_lessons_in_order():
    assert [lesson["id"] for lesson in DATA["lessons"]] == [f"{n:02d}" for n in range(1, 17)]


def test_ready_lessons_have_guide_files_and_verifiers():
    for lesson in READY:
        folder = manifest.KIT_ROOT / lesson["folder"]
        assert (folder / "README.md").is_file(), f"{lesson['id']}: no guide"
        assert sorted(lesson["files"]) == sorted(lesson_files(lesson)), f"{lesson['id']}: files ≠ folder"
        for check in lesson["checks"]:
            verifier = folder / "verifiers" / check["verifier"]
            assert verifier.is_file(), f"{check['id']}: {verifier} missing"


def test_each_verifiers_table_lists_exactly_its_checks_in_tasks_json():
    """What the harness itself holds at run time (shared/tap.run), read through `verify_*.py --list`."""
    for lesson in READY:
        verifiers = manifest.KIT_ROOT / lesson["folder"] / "verifiers"
        for name in sorted({check["verifier"] for check in lesson["checks"]}):
            listed = subprocess.run([sys.executable, name, "--list"], cwd=verifiers, capture_output=True, text=True,
                                    timeout=60, env=dict(os.environ, PYTHONPATH=str(manifest.KIT_ROOT)))
            assert listed.returncode == 0, listed.stderr
            planned = [c["id"] for c in lesson["checks"] if c["verifier"] == name]
            assert json.loads(listed.stdout) == planned, f"{name}: its table is not tasks.json's list, in order"


def test_each_verifier_opens_with_its_check_table():
    """A verifier's docstring says how each of its checks is proved, one entry a check ("NN.N  …" at a line's
    start), in tasks.json's order: the first thing a maintainer reads in every lesson."""
    for lesson in READY:
        verifiers = manifest.KIT_ROOT / lesson["folder"] / "verifiers"
        for name in sorted({check["verifier"] for check in lesson["checks"]}):
            doc = ast.get_docstring(ast.parse((verifiers / name).read_text(encoding="utf-8"))) or ""
            entries = list(dict.fromkeys(re.findall(r"^(\d\d\.\d+)\s", doc, re.M)))
            planned = [c["id"] for c in lesson["checks"] if c["verifier"] == name]
            assert entries == planned, f"{name}: its docstring's check table lists {entries}, tasks.json {planned}"


def test_every_check_of_a_ready_lesson_has_a_mutant():
    covered = {check_id for mutant in all_mutants() for check_id in mutant.fails}
    missing = [c["id"] for lesson in READY for c in lesson["checks"] if c["id"] not in covered]
    assert not missing, f"checks without a mutant that fails them: {missing}"


def test_mutant_names_are_unique_and_pinned_words_belong_to_checks_they_fail():
    names = [m.name for m in all_mutants()]
    assert sorted({n for n in names if names.count(n) > 1}) == []  # a name is the test's id and the walk's key
    for mutant in all_mutants():
        assert all(check in mutant.fails for check, _ in mutant.says), mutant.name


def test_every_mutant_pins_what_each_of_its_failing_checks_says():
    """tests/mutants/said.json (tests/mutants/pin.py): one phrase for each check each mutant fails."""
    from tests.mutants.pin import load
    said = load()
    by_name = {m.name: m for m in all_mutants()}
    assert sorted(set(said) - set(by_name)) == [], "said.json names mutants that no longer exist"
    unpinned = [f"{m.name} {check}" for m in all_mutants() for check in m.fails
                if check not in said.get(m.name, {}) and check not in dict(m.says)]
    assert unpinned == [], f"failing checks with no pinned words (python -m tests.mutants.pin NN): {unpinned}"
    stray = [f"{name} {check}" for name, checks in said.items() for check in checks
             if check not in by_name[name].fails]
    assert stray == []


def test_every_make_test_fails_every_check_that_any_mutant_fails():
    """make test runs a share of the mutants: whatever the day, the share holds the cover, and within
    ROTATION days every mutant has come round."""
    mutants = all_mutants()
    wanted = set().union(*map(failed_pairs, mutants))
    seen: set[str] = set()
    for day in range(ROTATION):
        with mock.patch("tests.daily.today", return_value=day):
            chosen = for_today(mutants)
        assert set().union(*map(failed_pairs, chosen)) == wanted
        seen |= {m.name for m in chosen}
    assert seen == {m.name for m in mutants}


def test_readme_lesson_table_matches_manifest():
    readme = (manifest.KIT_ROOT / "README.md").read_text(encoding="utf-8")
    assert lesson_table(DATA) in readme, "README's lesson table is stale: paste `python -m checks table`"


def test_every_check_says_where_its_evidence_comes_from_and_the_readme_lists_the_self_reported():
    for lesson in DATA["lessons"]:
        for check in lesson["checks"]:
            assert check["evidence"]["kind"] in manifest.EVIDENCE_KINDS, check["id"]
    broken = json.loads(json.dumps(DATA))
    del broken["lessons"][3]["checks"][1]["evidence"]
    with pytest.raises(manifest.ManifestError, match="04.2: evidence needs a kind"):
        manifest.validate(broken)
    readme = (manifest.KIT_ROOT / "README.md").read_text(encoding="utf-8")
    assert evidence_list(DATA) in readme, ("README's self-reported list is stale: paste "
                                           "`python -m checks table --evidence`")


def test_make_help_lists_every_lesson():
    out = subprocess.run([sys.executable, "-m", "checks", "help"], cwd=manifest.KIT_ROOT, capture_output=True,
                         text=True, check=True, env={"LAB_LANG": "en", "PATH": ""}).stdout
    for lesson in DATA["lessons"]:
        assert f"make lesson-{lesson['id']}" in out
