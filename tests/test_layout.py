"""The kit's shape: no import circle anywhere (checks/, shared/, every lesson's verifiers/), no module of
checks/ or shared/ over MAX_LINES lines, and the command line stays on top: no library module imports it.

Imports are read from the source (AST), at module level and inside functions alike: an import deferred
into a function is still a circle, only a hidden one.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("checks", "shared")
MAX_LINES = 500
CLI = "checks/cli.py"
ENTRY_POINTS = {"checks/__main__.py"}  # what may import the command line


def _sources(root: Path = KIT_ROOT) -> list[Path]:
    found = [p for package in PACKAGES for p in (root / package).rglob("*.py")]
    found += root.glob("lessons/*/verifiers/*.py")
    return sorted(p for p in found if "__pycache__" not in p.parts)


def _rel(path: Path) -> str:
    return path.relative_to(KIT_ROOT).as_posix()


def _module_file(dotted: str, root: Path) -> Path | None:
    """checks.x / shared.y / checks.tools.z -> its file, if it is one of the kit's modules."""
    parts = dotted.split(".")
    if parts[0] not in PACKAGES:
        return None
    base = root.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _wanted(node: ast.AST, path: Path, root: Path) -> list[str]:
    """The dotted modules an import statement loads (`from a.b import c`: a.b.c when that is a module,
    else a.b)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:  # relative: from the file's own package
        package = path.parent.relative_to(root).parts
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, *([node.module] if node.module else [])])
    found = [f"{base}.{alias.name}" for alias in node.names if _module_file(f"{base}.{alias.name}", root)]
    if len(found) < len(node.names):
        found.append(base)
    return found


def import_graph(root: Path = KIT_ROOT) -> dict[str, set[str]]:
    """File (relative to `root`) -> the kit's files it imports, at module level or inside functions.

    `checks.x` and `shared.y` are the kit's packages; in a lesson's verifiers/ a bare `import labNN_x` is
    that folder's file (else the kit's verifier of that name: a work copy holds every lesson's)."""
    verifiers = {p.stem: p for p in root.glob("lessons/*/verifiers/*.py")}
    graph: dict[str, set[str]] = {}
    for path in _sources(root):
        edges: set[str] = set()
        in_lesson = path.parent.name == "verifiers" and path.parent.parent.parent.name == "lessons"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            for dotted in _wanted(node, path, root):
                target = _module_file(dotted, root)
                if target is None and in_lesson and dotted and "." not in dotted:
                    own = path.parent / f"{dotted}.py"
                    target = own if own.is_file() else verifiers.get(dotted)
                if target is not None and target != path:
                    edges.add(target.relative_to(root).as_posix())
        graph[path.relative_to(root).as_posix()] = edges
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:  # iterative: a deep chain of imports never hits the recursion limit
        work = [(node, iter(sorted(graph.get(node, ()))))]
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        while work:
            current, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[current] = min(low[current], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[current])
            if low[current] == index[current]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == current:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def _cycle_in(component: list[str], graph: dict[str, set[str]]) -> list[str]:
    """One concrete circle through the component's first module, for the failure message."""
    start, members = component[0], set(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for child in sorted(graph[node] & members):
            if child == start:
                return paths[node] + [start]
            if child not in paths:
                paths[child] = paths[node] + [child]
                queue.append(child)
    return component


def test_the_cycle_finder_finds_a_circle_and_only_circles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}, "f": set()}
    assert circles(graph) == [["a", "b", "c"]]
    assert _cycle_in(["a", "b", "c"], graph) == ["a", "b", "c", "a"]


def test_the_graph_sees_imports_inside_functions_relative_ones_and_a_lessons_own(tmp_path):
    files = {
        "checks/__init__.py": "",
        "checks/a.py": "def f():\n    from checks import b\n",
        "checks/b.py": "from . import c\nimport json\n",
        "checks/c.py": "import shared.d\n",
        "shared/__init__.py": "",
        "shared/d.py": "from shared.d import x\nfrom checks.a import f\n",
        "lessons/01-x/verifiers/v.py": "import w\nfrom shared import d\n",
        "lessons/01-x/verifiers/w.py": "from v import y\nimport tasks\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = import_graph(tmp_path)
    assert graph["checks/a.py"] == {"checks/b.py"}
    assert graph["checks/b.py"] == {"checks/c.py"}
    assert graph["checks/c.py"] == {"shared/d.py"}
    assert graph["shared/d.py"] == {"checks/a.py"}
    assert graph["lessons/01-x/verifiers/w.py"] == {"lessons/01-x/verifiers/v.py"}
    assert circles(graph) == [["checks/a.py", "checks/b.py", "checks/c.py", "shared/d.py"],
                              ["lessons/01-x/verifiers/v.py", "lessons/01-x/verifiers/w.py"]]


def test_no_import_circle_anywhere():
    graph = import_graph()
    found = circles(graph)
    assert not found, "import circles (break each by moving what both sides need into a module of its own):\n" + \
        "\n".join("  " + " -> ".join(_cycle_in(c, graph)) + f"   ({len(c)} modules: {', '.join(c)})" for c in found)


def test_no_library_module_imports_the_command_line():
    graph = import_graph()
    users = sorted(path for path, targets in graph.items() if CLI in targets and path not in ENTRY_POINTS)
    assert users == [], f"{CLI} is argparse and dispatch only; these import it: {users}"


def test_no_module_imports_another_modules_private_names():
    """checks/ and shared/ talk to each other through public names only."""
    found = []
    for path in _sources():
        if _rel(path).startswith("lessons/"):  # a lesson's verifiers share their folder's helpers freely
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PACKAGES:
                found += [f"{_rel(path)}: from {node.module} import {a.name}" for a in node.names
                          if a.name.startswith("_") and a.name != "__version__"]
    assert found == [], "imports of another module's private names:\n  " + "\n  ".join(found)


def test_every_name_a_lesson_takes_from_the_kit_is_there():
    """A lesson's verifiers use the kit's modules by name (`from shared.probe import Probe`, `servicectl.up`):
    moving code between the kit's modules must leave each of those names where the lessons look."""
    import importlib
    missing = []
    for path in KIT_ROOT.glob("lessons/*/verifiers/*.py"):
        modules: dict[str, str] = {}  # a name bound to one of the kit's modules -> that module
        wanted: list[tuple[str, str, int]] = []
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] in PACKAGES:
                for alias in node.names:
                    if _module_file(f"{node.module}.{alias.name}", KIT_ROOT):
                        modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                    else:
                        wanted.append((node.module, alias.name, node.lineno))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] in PACKAGES and alias.asname:
                        modules[alias.asname] = alias.name
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
                wanted.append((modules[node.value.id], node.attr, node.lineno))
        for module, name, line in wanted:
            if not hasattr(importlib.import_module(module), name):
                missing.append(f"{_rel(path)}:{line}: {module}.{name}")
    assert missing == [], "names lessons use that the kit no longer has:\n  " + "\n  ".join(sorted(missing))


def test_the_kit_files_beside_learner_code_are_named_by_where_they_run():
    """README "Names": "probe" is the process that runs learner code (shared/probe.py), never a file of the kit's;
    every module a lesson's verifiers have a probe call is a labNN_learner*.py (or one of shared/), and every
    app a Celery worker or beat of a lesson is started with is the learner's own or a labNN_worker.py -- the two
    kinds of file are never mixed."""
    import re
    named_probe = [_rel(p) for p in KIT_ROOT.glob("lessons/*/verifiers/*.py") if "probe" in p.stem]
    named_probe += [_rel(p) for p in (KIT_ROOT / "checks").rglob("*.py") if "probe" in p.stem and "asgi" not in p.stem]
    assert named_probe == [], named_probe
    called, apps = set(), set()
    for path in [*KIT_ROOT.glob("lessons/*/verifiers/*.py"), KIT_ROOT / "tasks.json"]:
        text = path.read_text(encoding="utf-8")
        called |= set(re.findall(r"\.(?:call|ask|module)\(\s*[\"'](lab\d\d_\w+):", text))
        apps |= set(re.findall(r"[\"'](?:-A[\"', ]+)?(lab\d\d_\w+):app[\"']", text))
    workers = {module for module in apps if re.fullmatch(r"lab\d\d_worker", module)}
    assert called and all(re.fullmatch(r"lab\d\d_learner(_\w+)?", module) for module in called), sorted(called)
    assert workers and not workers & called, (sorted(workers), sorted(called))


def test_no_module_of_the_tooling_is_over_the_line_limit():
    sizes = {_rel(p): len(p.read_text(encoding="utf-8").splitlines()) for p in _sources()
             if _rel(p).split("/")[0] in PACKAGES}
    over = sorted((n, path) for path, n in sizes.items() if n > MAX_LINES)
    assert over == [], f"modules over {MAX_LINES} lines (split them by responsibility): " + \
        ", ".join(f"{path} ({n})" for n, path in reversed(over))


# LAB16_X too: a lesson's own variable belongs to a family as much as any other.
ENV_NAME = re.compile(r"(?<![A-Za-z0-9_])((?:TASKLAB|LAB)[0-9]*_[A-Z0-9_]*[A-Z0-9])(?![A-Za-z0-9])")


def _glossary() -> dict[str, set[str]]:
    """README "Names": family (`LAB_*`, …) -> the variable names its row lists."""
    text = (KIT_ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("### Names / 名称"):]
    families: dict[str, set[str]] = {}
    for line in section.splitlines():
        if line.startswith("| `"):
            cells = line.split("|")
            family = cells[1].strip().split()[0].strip("`")
            tokens = (token.split()[0].split("=")[0] for token in re.findall(r"`([^`]+)`", cells[3]))
            families[family] = {word for word in tokens if ENV_NAME.fullmatch(word.replace("<NAME>", "X"))}
    return families


def test_every_environment_variable_is_in_the_glossary_under_its_family():
    """LAB_* are settings people type, LAB_TEST_* the test suite's switches, TASKLAB_* what the kit tells its
    own child processes: each name the code uses is in README's table, in the row its prefix says."""
    families = _glossary()
    listed = set().union(*families.values())
    patterns = [re.compile(re.escape(name).replace("<NAME>", "[A-Z0-9_]+") + "$") for name in listed]
    used: dict[str, str] = {}
    for path in [*_sources(), KIT_ROOT / "Makefile", KIT_ROOT / ".ci" / "run"]:
        for name in ENV_NAME.findall(path.read_text(encoding="utf-8")):
            used.setdefault(name, _rel(path) if path.suffix == ".py" else path.name)
    unknown = {name: where for name, where in used.items()
               if not any(p.match(name) for p in patterns) and not any(n.startswith(name + "_") for n in listed)}
    assert unknown == {}, "name each variable in README's Names table (or rename it to its family's prefix)"
    for family, names in families.items():
        prefix = family.rstrip("*")
        wrong = [n for n in names if not n.startswith(prefix) or (prefix == "LAB_" and n.startswith("LAB_TEST_"))]
        assert wrong == [], f"{family}: {wrong} have another family's prefix"


def test_the_readme_counts_the_mutants_as_they_are():
    """README's "cover of the mutants — N of the M" and "runs all M" say what tests/mutants holds."""
    from tests.mutants import all_mutants, cover
    mutants = all_mutants()
    text = " ".join((KIT_ROOT / "README.md").read_text(encoding="utf-8").split())
    said = re.search(r"a \*\*cover\*\* of the mutants — (\d+) of the (\d+),.*?runs all (\d+)\.", text)
    assert said, "README no longer says how many mutants make test and make test-all run"
    assert [int(n) for n in said.groups()] == [len(cover(mutants)), len(mutants), len(mutants)]
