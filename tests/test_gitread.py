"""checks.gitread.export_commit: a learner's repository is data.  Each test builds a real repository with
the git binary, arms one vector (a filter, a hook, a redirect, a replace ref...), and proves the vector did
not run or reach, and what was exported.  Where it is cheap, the vector is first shown to be live with
plain git in the learner's repository, so a test cannot pass only because the trap was badly set."""

from __future__ import annotations

import os
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from checks.gitread import export_commit
from checks.workdir import UsageError

# Setting the repositories up: no config of the machine's, a fixed author.
SETUP_ENV = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C"}


def git(repo: Path, *args: str, check: bool = True) -> str:
    done = subprocess.run(["git", "-c", "user.name=x", "-c", "user.email=x@x", "-c", "init.defaultBranch=main",
                           *args], cwd=repo, env=SETUP_ENV, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"git {args}: {done.stderr}")
    return done.stdout.strip()


def make_repo(repo: Path, files: dict[str, str], tag: str | None = "lesson-01") -> Path:
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q")
    commit(repo, files, tag)
    return repo


def commit(repo: Path, files: dict[str, str], tag: str | None = None) -> None:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "work")
    if tag:
        git(repo, "tag", tag)


def script(path: Path, marker: Path) -> Path:
    """An executable that leaves `marker` behind if anything ever runs it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\nid > {marker}\ncat\n")
    path.chmod(0o755)
    return path


def files_in(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(autouse=True)
def private_tmp(tmp_path, monkeypatch):
    """gitread's private copy lives here: every test ends by proving it was removed."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    yield
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize("packed", [False, True], ids=["loose", "gc-packed"])
def test_clean_repo_exports_the_tagged_files_of_the_subfolder(tmp_path, packed):
    repo = make_repo(tmp_path / "repo", {"README.md": "top\n", "tasks_lab/app.py": "v1\n",
                                          "tasks_lab/bin/run.sh": "#!/bin/sh\n", "tasks_lab/café.py": "é\n"})
    (repo / "tasks_lab/bin/run.sh").chmod(0o755)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "exec bit")
    git(repo, "tag", "-f", "lesson-02")
    first = git(repo, "rev-parse", "lesson-01")
    commit(repo, {"tasks_lab/app.py": "v3\n", "tasks_lab/late.py": "later\n"})
    if packed:  # objects into a pack, refs into packed-refs
        git(repo, "gc", "-q", "--prune=now")
        assert not (repo / ".git/refs/tags/lesson-02").exists() and (repo / ".git/packed-refs").exists()
    dest = tmp_path / "out"
    (dest / "stale").mkdir(parents=True)  # dest is emptied first

    got = export_commit(repo / "tasks_lab", "lesson-02", dest)
    assert got == dest / "tasks_lab"
    assert files_in(got) == {"app.py": "v1\n", "bin/run.sh": "#!/bin/sh\n", "café.py": "é\n"}
    assert sorted(p.name for p in dest.iterdir()) == ["tasks_lab"]
    assert stat.S_IMODE((got / "bin/run.sh").stat().st_mode) == 0o755
    assert stat.S_IMODE((got / "app.py").stat().st_mode) == 0o644
    # A branch, a full and an abbreviated commit id, and the whole repository as the folder.
    assert files_in(export_commit(repo / "tasks_lab", "main", dest))["app.py"] == "v3\n"
    assert files_in(export_commit(repo / "tasks_lab", first, dest)) == {"app.py": "v1\n", "bin/run.sh": "#!/bin/sh\n",
                                                                         "café.py": "é\n"}
    assert export_commit(repo, first[:8], dest) == dest and (dest / "README.md").read_text() == "top\n"


def armed_filter_repo(repo: Path, marker: Path) -> Path:
    """Every file goes through filter x; the filter is only defined afterwards (so setting up never ran it)."""
    make_repo(repo, {".gitattributes": "* filter=x\n", "app.py": "raw = 1\n"})
    (repo / ".git/info").mkdir(exist_ok=True)
    (repo / ".git/info/attributes").write_text("* filter=x\n")
    return repo


def test_a_filter_in_the_learners_config_never_runs(tmp_path):
    marker = tmp_path / "MARKER"
    repo = armed_filter_repo(tmp_path / "repo", marker)
    for kind in ("smudge", "clean", "process"):
        git(repo, "config", f"filter.x.{kind}", f'sh -c "id > {marker}; cat"')
    git(repo, "config", "filter.x.required", "true")
    git(repo, "archive", "-o", str(tmp_path / "a.tar"), "HEAD", check=False)  # live: plain git runs it
    assert marker.exists()
    marker.unlink()

    got = export_commit(repo, "lesson-01", tmp_path / "out")
    assert files_in(got) == {".gitattributes": "* filter=x\n", "app.py": "raw = 1\n"}
    assert not marker.exists()


def test_a_filter_in_the_graders_global_config_never_runs(tmp_path, monkeypatch):
    marker = tmp_path / "MARKER"
    repo = armed_filter_repo(tmp_path / "repo", marker)
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(f"[filter \"x\"]\n\tsmudge = sh -c \"id > {marker}; cat\"\n"
                                     f"[core]\n\tfsmonitor = {script(home / 'fsm', marker)}\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    monkeypatch.delenv("GIT_CONFIG_NOSYSTEM", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    # Config through the environment too: the grader's environment is never handed to git.
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "filter.x.smudge")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", f'sh -c "id > {marker}; cat"')
    subprocess.run(["git", "archive", "-o", str(tmp_path / "a.tar"), "HEAD"], cwd=repo, check=True)
    assert marker.exists()  # live
    marker.unlink()

    got = export_commit(repo, "lesson-01", tmp_path / "out")
    assert files_in(got)["app.py"] == "raw = 1\n"
    assert not marker.exists()


@pytest.mark.parametrize("how", ["gitdir-file", "symlinked-git-dir"])
def test_a_git_pointing_at_another_students_repository_is_refused(tmp_path, how):
    make_repo(tmp_path / "bob/tasks_lab", {"app.py": "bob's code\n"})
    alice = tmp_path / "alice/tasks_lab"
    alice.mkdir(parents=True)
    (alice / "app.py").write_text("alice\n")
    if how == "gitdir-file":
        (alice / ".git").write_text("gitdir: ../../bob/tasks_lab/.git\n")
        assert git(alice, "log", "--format=%s") == "work"  # live: plain git follows it
    else:
        (alice / ".git").symlink_to(tmp_path / "bob/tasks_lab/.git")
    with pytest.raises(UsageError, match=r"\.git is a (file|link) pointing elsewhere") as caught:
        export_commit(alice, "lesson-01", tmp_path / "out")
    assert ("gitdir: ../../bob" if how == "gitdir-file" else "bob/tasks_lab/.git") in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_a_symlinked_folder_into_another_students_repository_is_refused(tmp_path):
    make_repo(tmp_path / "bob/tasks_lab", {"app.py": "bob's code\n"})
    (tmp_path / "alice").mkdir()
    (tmp_path / "alice/tasks_lab").symlink_to(tmp_path / "bob/tasks_lab")
    with pytest.raises(UsageError, match="symbolic link"):
        export_commit(tmp_path / "alice/tasks_lab", "lesson-01", tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("bobs", [{"app.py": "bob's code\n"}, {"lib/util.py": "bob's util\n"}],
                         ids=["blob-only-there", "tree-only-there"])
def test_alternates_into_another_students_objects_are_not_followed(tmp_path, bobs):
    make_repo(tmp_path / "bob", bobs)
    git(tmp_path, "clone", "-q", "--shared", str(tmp_path / "bob"), "alice")
    alice = tmp_path / "alice"
    assert (alice / ".git/objects/info/alternates").exists()
    commit(alice, {"mine.py": "alice\n"})  # its tree names bob's blobs, stored only in bob's
    git(alice, "tag", "-f", "lesson-01")
    name, text = next(iter(bobs.items()))
    assert git(alice, "show", f"lesson-01:{name}") == text.strip()  # live
    with pytest.raises(UsageError, match="missing"):
        export_commit(alice, "lesson-01", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    (alice / ".git/objects/info/http-alternates").write_text(f"{tmp_path / 'bob/.git/objects'}\n")
    with pytest.raises(UsageError, match="missing"):
        export_commit(alice, "lesson-01", tmp_path / "out")


def test_fsmonitor_hooks_and_hookspath_never_run(tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    repo = make_repo(tmp_path / "repo", {"app.py": "ok\n"})
    hooks = ("post-checkout", "post-index-change", "reference-transaction", "pre-auto-gc", "post-rewrite")
    for hook in hooks:
        script(repo / ".git/hooks" / hook, markers / f"own-{hook}")
        script(tmp_path / "hookdir" / hook, markers / f"path-{hook}")
    git(repo, "config", "core.hooksPath", str(tmp_path / "hookdir"))
    git(repo, "config", "core.fsmonitor", str(script(tmp_path / "fsm", markers / "fsmonitor")))
    git(repo, "config", "alias.rev-parse", f"!id > {markers / 'alias'}")
    git(repo, "config", "core.pager", f"id > {markers / 'pager'}")
    git(repo, "status")  # live
    assert list(markers.iterdir())
    for marker in markers.iterdir():
        marker.unlink()

    assert files_in(export_commit(repo, "lesson-01", tmp_path / "out")) == {"app.py": "ok\n"}
    assert list(markers.iterdir()) == []


def test_a_symlink_in_the_commit_is_refused_and_nothing_written(tmp_path):
    repo = make_repo(tmp_path / "repo", {"app.py": "ok\n"}, tag=None)
    (repo / "notes.py").symlink_to("/etc/passwd")
    commit(repo, {}, tag="lesson-01")
    with pytest.raises(UsageError, match=r"notes\.py is a symbolic link in commit lesson-01"):
        export_commit(repo, "lesson-01", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_submodule_is_refused_by_name(tmp_path):
    repo = make_repo(tmp_path / "repo", {"app.py": "ok\n"}, tag=None)
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{git(repo, 'rev-parse', 'HEAD')},sub")
    git(repo, "commit", "-q", "-m", "gitlink")
    git(repo, "tag", "lesson-01")
    with pytest.raises(UsageError, match="sub is a git submodule"):
        export_commit(repo, "lesson-01", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_tag_pointing_at_a_tree_is_refused(tmp_path):
    repo = make_repo(tmp_path / "repo", {"app.py": "ok\n"}, tag=None)
    git(repo, "tag", "t", git(repo, "rev-parse", "HEAD^{tree}"))
    with pytest.raises(UsageError, match="t points at a tree, not a commit"):
        export_commit(repo, "t", tmp_path / "out")
    with pytest.raises(UsageError, match="has no nowhere"):
        export_commit(repo, "nowhere", tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("packed", [False, True], ids=["loose-refs", "packed-refs"])
def test_replace_refs_are_ignored(tmp_path, packed):
    repo = make_repo(tmp_path / "repo", {"app.py": "original\n"})
    fake = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=repo, input="replaced\n", text=True,
                          capture_output=True, check=True).stdout.strip()
    git(repo, "replace", git(repo, "rev-parse", "lesson-01:app.py"), fake)
    commit(repo, {"app.py": "later\n"})
    git(repo, "replace", git(repo, "rev-parse", "lesson-01"), "HEAD")  # the tag's commit stands for a later one
    if packed:
        git(repo, "pack-refs", "--all")
        assert not (repo / ".git/refs/replace").exists() or not any((repo / ".git/refs/replace").iterdir())
    assert git(repo, "show", "lesson-01:app.py") == "later"  # live
    assert files_in(export_commit(repo, "lesson-01", tmp_path / "out")) == {"app.py": "original\n"}


@pytest.mark.parametrize("where", ["objects/info/alternates", "objects/pack/evil.pack", "refs/tags/evil"])
def test_a_symlink_inside_the_git_directory_is_refused(tmp_path, where):
    repo = make_repo(tmp_path / "repo", {"app.py": "ok\n"})
    make_repo(tmp_path / "bob", {"app.py": "bob's code\n"})
    link = repo / ".git" / where
    link.parent.mkdir(parents=True, exist_ok=True)
    bob = tmp_path / "bob/.git"
    link.symlink_to(bob / "objects" if "alternates" in where else bob / "refs/tags/lesson-01")
    with pytest.raises(UsageError, match=where.split("/")[-1]):
        export_commit(repo, "lesson-01", tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["HEAD", "packed-refs"])
def test_head_or_packed_refs_as_a_link_is_refused(tmp_path, name):
    repo = make_repo(tmp_path / "repo", {"app.py": "ok\n"})
    make_repo(tmp_path / "bob", {"app.py": "bob's code\n"})
    (repo / ".git" / name).unlink(missing_ok=True)
    (repo / ".git" / name).symlink_to(tmp_path / "bob/.git/HEAD")
    with pytest.raises(UsageError, match=name):
        export_commit(repo, "lesson-01", tmp_path / "out")


@pytest.mark.parametrize("ref", ["--output=OUT", "-h", "", "main:app.py", "lesson 01", "$(id)", "a\nb"])
def test_a_ref_that_is_not_a_ref_is_refused_before_git_runs(tmp_path, ref):
    repo = make_repo(tmp_path / "repo", {"app.py": "ok\n"})
    ref = ref.replace("OUT", str(tmp_path / "x"))
    with pytest.raises(UsageError, match="not a tag, branch or commit id"):
        export_commit(repo, ref, tmp_path / "out")
    assert not (tmp_path / "x").exists() and not (tmp_path / "out").exists()


def test_a_folder_outside_any_repository(tmp_path):
    (tmp_path / "plain").mkdir()
    with pytest.raises(UsageError, match="is not a git repository: --at needs the learner's history"):
        export_commit(tmp_path / "plain", "lesson-01", tmp_path / "out")


def test_a_folder_missing_at_the_ref(tmp_path):
    repo = make_repo(tmp_path / "repo", {"README.md": "x\n"})
    (repo / "tasks_lab").mkdir()
    with pytest.raises(UsageError, match="has no files at lesson-01"):
        export_commit(repo / "tasks_lab", "lesson-01", tmp_path / "out")


@pytest.mark.parametrize("names", [["..", "app.py"], [".git", "app.py"], [".GIT", "app.py"], ["app.py", "app.py"]],
                         ids=["dotdot", "dotgit", "DOTGIT", "twice"])
def test_a_crafted_tree_with_unsafe_or_repeated_names_is_refused(tmp_path, names):
    repo = make_repo(tmp_path / "repo", {"app.py": "ok\n"}, tag=None)
    blob = git(repo, "rev-parse", "HEAD:app.py")
    tree = subprocess.run(["git", "mktree"], cwd=repo, input="".join(f"100644 blob {blob}\t{n}\n" for n in names),
                          text=True, capture_output=True, check=True).stdout.strip()
    git(repo, "tag", "lesson-01", git(repo, "commit-tree", tree, "-m", "crafted"))
    with pytest.raises(UsageError, match="unsafe path|appears twice"):
        export_commit(repo, "lesson-01", tmp_path / "deep/out")
    assert not (tmp_path / "deep").exists()


def test_files_over_the_caps_are_refused_before_any_is_written(tmp_path, monkeypatch):
    from checks import gitread
    from checks.intake import Caps
    repo = make_repo(tmp_path / "repo", {"a.py": "x" * 100, "b.py": "y" * 100})
    monkeypatch.setattr(gitread, "EXPORT_CAPS", Caps(file_bytes=99))
    with pytest.raises(UsageError, match="too big or too many"):
        export_commit(repo, "lesson-01", tmp_path / "out")
    monkeypatch.setattr(gitread, "EXPORT_CAPS", Caps(total_bytes=150))
    with pytest.raises(UsageError, match="too big or too many"):
        export_commit(repo, "lesson-01", tmp_path / "out")
    assert not (tmp_path / "out").exists()
