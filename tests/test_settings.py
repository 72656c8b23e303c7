"""shared/settings.py: the work folder's settings as the learner's code reads them, and secrets masked."""

from shared import settings
from shared.credentials import read_env_file
from shared.settings import describe_url, redact, secrets_in, setting


def test_the_environment_wins_over_the_env_file(monkeypatch, tmp_path):
    (tmp_path / ".env.tasks").write_text("LABTEST_SETTING=from-file\nLABTEST_ONLY_FILE=file\n")
    monkeypatch.setattr(settings, "env_file_values", lambda: read_env_file(tmp_path / ".env.tasks"))
    monkeypatch.setenv("LABTEST_SETTING", "from-env")
    assert setting("LABTEST_SETTING") == "from-env"
    assert setting("LABTEST_ONLY_FILE") == "file"
    assert setting("LABTEST_NOWHERE") is None


def test_every_form_of_a_secret_is_found_and_masked(monkeypatch):
    values = {"MYSQL_PASSWORD": "pw-123456", "CELERY_BROKER_URL": "redis://:brokerpw1@127.0.0.1:6379/0",
              "TASK_NAME": "not-a-secret", "SHORT_PASSWORD": "abc"}
    found = secrets_in(values)
    assert "pw-123456" in found and "brokerpw1" in found and "redis://:brokerpw1@127.0.0.1:6379/0" in found
    assert "not-a-secret" not in found and "abc" not in found  # not a secret's name; too short to mask safely
    monkeypatch.setattr(settings, "env_file_values", lambda: values)
    text = redact("url redis://:brokerpw1@127.0.0.1:6379/0 then brokerpw1 and pw-123456")
    assert text == "url *** then *** and ***"  # the whole URL first, then what is left of it


def test_a_url_is_described_without_its_credentials():
    assert describe_url("redis://:brokerpw1@127.0.0.1:6379/0") == "127.0.0.1:6379/0"
