"""The messages: written once in English in the code, their Chinese in the zh.po catalogues beside it."""

import os
import subprocess
import sys

from checks.tools import messages
from shared import i18n
from shared.manifest import KIT_ROOT

# t(chinese, english) calls not yet moved to a catalogue, per file.  This only shrinks: a new message is
# written t("English ...", name=value) and translated in its folder's zh.po.
NOT_YET_MOVED = {
}


def test_every_message_has_its_translation_with_the_same_placeholders():
    found = messages.problems()
    assert [line for line in found if "t() wants one literal" not in line] == []


def test_the_calls_not_yet_in_a_catalogue_only_shrink():
    left: dict[str, int] = {}
    for line in messages.problems():
        if "t() wants one literal" in line:
            path = line.split(":")[0]
            left[path] = left.get(path, 0) + 1
    grown = {path: count for path, count in left.items() if count > NOT_YET_MOVED.get(path, 0)}
    assert grown == {}, "write new messages as t(\"English\", name=value) and translate them in zh.po"


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
