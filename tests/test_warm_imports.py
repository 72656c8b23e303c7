"""shared/warm_imports.py: what a program will import, read from its text (never run)."""

from shared import warm_imports
from shared.warm_imports import folders, groups_for, imported


def test_imports_are_read_from_text_wherever_they_may_run():
    source = ("import os, celery.app as c\nfrom kombu import Queue\nx = 1; import redis\n"
              "def later():\n    import pymysql  # in a function: it may run\n"
              "# import fastapi\ns = 'import not_this'\n")
    assert imported(source) == {"os", "celery", "kombu", "redis", "pymysql"}


def test_groups_follow_the_programs_own_modules_and_the_modules_its_arguments_name(tmp_path):
    (tmp_path / "main.py").write_text("import helper\n")
    (tmp_path / "helper.py").write_text("from celery import Celery\n")
    (tmp_path / "api_db.py").write_text("import pymysql\nfrom fastapi import FastAPI\n")
    script = {"kind": "script", "target": "main.py", "argv": ["main.py"], "path": [str(tmp_path)]}
    assert groups_for(script, str(tmp_path), {}) == {"celery"}
    served = {"kind": "module", "target": "uvicorn", "argv": ["-m", "api_db:app"], "path": [str(tmp_path)]}
    assert groups_for(served, str(tmp_path), {}) == {"uvicorn", "fastapi", "pymysql"}
    assert str(tmp_path) in folders(script, str(tmp_path))


def test_what_is_warmed_is_listed_in_one_place():
    assert set(warm_imports.GROUPS) >= {"celery", "fastapi", "uvicorn", "pymysql", "redis"}
