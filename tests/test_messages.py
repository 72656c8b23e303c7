"""The messages: written once in English in the code, their Chinese in the zh.po catalogues beside it."""

import os
import subprocess
import sys

from checks.tools import messages
from shared import i18n
from shared.manifest import KIT_ROOT

L07 = "lessons/07-choose-executor/verifiers/lab07_verify.py::"
# The only Chinese left in code is data, never a message: words the checks look for in a learner's text or
# output, and text they hand to learner code.  A new entry here needs the same reason.
DATA_IN_CHINESE = {
    # words matched in what lesson checks print (a learner may read them in Chinese)
    "checks/gradebook.py::ABSENT", "checks/preflight.py::causes", "checks/preflight.py::MISSING_SIGNS",
    # words matched in the learner's decision.md (lesson 07 is written in either language)
    *(L07 + name for name in ("COURSE_HEADER", "COLUMN_KINDS", "PLACEHOLDERS", "PLACE_KINDS", "STATE_WORDS",
                              "OUTLIVES_API", "CPU_BOUND", "BLOCKING", "REPEATS", "TEMPORARY", "key_lines",
                              "RECORD_KEYS", "EXERCISE_WORD", "SDK_QUESTION", "exercise_start", "ANSWER_CONCEPTS")),
    # text sent to learner code: product names and non-ASCII input that must round-trip
    *(L07 + name for name in ("row", "good_message", "check_message", "check_refusals")),
    "lessons/08-celery-broker/verifiers/lab08_verify.py::_snapshot",
    "lessons/09-ack-idempotency/verifiers/lab09_verify.py::_rows",
    "lessons/14-time-slots/verifiers/lab14_verify.py::check_bad_keys",
}


def test_every_message_has_its_translation_with_the_same_placeholders():
    assert messages.problems() == []


def test_no_message_is_written_in_chinese_in_the_code():
    found = set(messages.chinese_in_code())
    assert found - DATA_IN_CHINESE == set(), "write the message in English: t(\"...\"), its Chinese in zh.po"
    assert DATA_IN_CHINESE - found == set(), "no longer holds Chinese: drop it from DATA_IN_CHINESE"


def test_a_message_the_tools_cannot_find_is_a_problem(tmp_path):
    code = tmp_path / "checks"
    code.mkdir()
    (code / "bad.py").write_text('from shared.i18n import t\nword = "x"\nt(word)\nt("a", "b")\nt(f"{word}")\n',
                                 encoding="utf-8")
    found = messages.messages_in(code, root=tmp_path)[1]
    assert len(found) == 3 and all("one string literal" in line for line in found)


def test_a_catalogue_reads_back_what_was_written(tmp_path):
    text = 'a "quoted"\tline\nand a back\\slash {x}'
    path = tmp_path / "zh.po"
    path.write_text('msgid ""\nmsgstr ""\n"Language: zh_CN\\n"\n\n'
                    f"#, python-brace-format\nmsgid {i18n.quote(text)}\nmsgstr {i18n.quote('译文 ' + text)}\n\n"
                    '#, fuzzy\nmsgid "unsure"\nmsgstr "不确定"\n\nmsgid "untranslated"\nmsgstr ""\n'
                    'msgid ""\n"two "\n"lines"\nmsgstr ""\n"两"\n"行"\n', encoding="utf-8")
    assert i18n.read_po(path) == {text: "译文 " + text, "two lines": "两行"}  # no header, fuzzy or empty ones


def test_a_learner_sees_either_language():
    program = ("from shared.i18n import t; "
               "print(t('job {job_id} did not reach {statuses} within {seconds:g}s (now: {now})', job_id='ab12', "
               "statuses='done', seconds=1.5, now='running'))")
    seen = {}
    for lang in ("zh", "en"):
        env = {**os.environ, "LAB_LANG": lang}
        seen[lang] = subprocess.run([sys.executable, "-c", program], cwd=KIT_ROOT, env=env, capture_output=True,
                                    text=True, check=True).stdout.strip()
    assert seen["en"] == "job ab12 did not reach done within 1.5s (now: running)"
    assert seen["zh"] == "任务 ab12 在 1.5 秒内没有变成 done（现在：running）"  # from shared/zh.po


def test_an_unknown_message_is_shown_in_english_not_lost(monkeypatch):
    monkeypatch.setenv("LAB_LANG", "zh")
    assert i18n.t("no such message {n}", n=3) == "no such message 3"
