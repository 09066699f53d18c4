"""The test tree mirrors the package tree (issue 36 item 6; the rule is in tests/README.md): every test file
sits in ``tests/<folder>/`` for the package it tests, where ``robot_rl.X.Y`` is ``X/Y``, the core's own
modules (``robot_rl.config``, ``robot_rl.rollout``, ...) are ``core`` and the non-package folders are
``launch``, ``benchmarks`` and ``testing``; none sits at ``tests/`` root, base names are unique, helper
modules stay at ``tests/`` root, a test module imports other test modules only from its own folder (the
only test folder on the path when the file runs alone) and every ``HEAVY_FIRST`` entry of the root
conftest names a test file."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import HEAVY_FIRST
from repo_paths import ROOT, TESTS
from setuptools import find_packages

CORE = "core"
"""The folder for tests of modules directly in ``robot_rl`` (the design card's core): not ``robot_rl``, since
``tests/`` is on ``sys.path`` and a ``tests/robot_rl/`` folder would turn ``import robot_rl`` into a namespace
package in any process whose path has ``tests/`` but not the repository root."""

NON_PACKAGES = ("launch", "benchmarks", "testing")
"""Top-level folders that are not packages but have tests (``testing``: the test support, including the
helpers at ``tests/`` root)."""


def mirror_folders(root: Path) -> dict[str, str]:
    """The folders a test may sit in, relative to ``tests/``, each with what it mirrors: one per package that
    setuptools finds under ``root`` (as setup.py does; a folder ``X/`` is ``robot_rl.X``), and the
    non-package folders. Raises AssertionError when two packages would share a test folder."""
    folders: dict[str, str] = {name: f"{name}/ (not a package)" for name in NON_PACKAGES}
    for package in find_packages(str(root), exclude=["tests", "tests.*", *(f"{n}*" for n in NON_PACKAGES)]):
        parts = package.split(".")
        folder = "/".join(parts[1:]) if parts[0] == "robot_rl" else "/".join(parts)
        import_name = package if parts[0] == "robot_rl" else f"robot_rl.{package}"
        folder = folder or CORE
        assert folder not in folders, f"tests/{folder}/ would mirror both {folders[folder]} and {import_name}"
        folders[folder] = import_name
    return folders


def layout_problems(tests: Path, root: Path) -> list[str]:
    """What breaks the rule in the test tree ``tests`` of the repository ``root``, one line each (empty if
    nothing does)."""
    folders = mirror_folders(root)
    problems = []
    seen: dict[str, Path] = {}
    for path in sorted(tests.rglob("*.py")):
        rel = path.relative_to(tests)
        folder = rel.parent.as_posix()
        if folder == ".":
            if path.name.startswith("test_"):
                problems.append(f"tests/{rel} sits at tests/ root: move it to its package's folder")
            continue
        if not path.name.startswith("test_"):
            problems.append(f"tests/{rel} is a helper outside tests/ root (only tests/ is on the path)")
            continue
        if folder not in folders:
            problems.append(f"tests/{rel}: tests/{folder}/ mirrors no package folder (see tests/README.md)")
        if path.name in seen:
            problems.append(f"tests/{rel} has the base name of tests/{seen[path.name].relative_to(tests)}")
        seen.setdefault(path.name, path)
    for path in sorted(tests.rglob("test_*.py")):
        for name in sorted(_imported_test_modules(path)):
            if name in seen and seen[name].parent != path.parent:
                user, used = path.relative_to(tests), seen[name].relative_to(tests)
                problems.append(f"tests/{user} imports tests/{used} from another folder")
    return problems


def _imported_test_modules(path: Path) -> set[str]:
    """File names (``test_x.py``) of the ``test_*`` modules that the Python file ``path`` imports."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
    return {f"{name}.py" for name in names if name.startswith("test_")}


def test_every_test_file_sits_in_the_folder_of_a_package():
    assert layout_problems(TESTS, ROOT) == []


def test_heavy_first_names_test_files_that_exist():
    names = {path.name for path in TESTS.rglob("test_*.py")}
    assert [name for name in HEAVY_FIRST if name not in names] == []


def test_the_mirror_covers_the_package_tree():
    folders = mirror_folders(ROOT)
    assert folders[CORE] == "robot_rl"
    assert folders["algos"] == "robot_rl.algos"
    assert folders["sim"] == "robot_rl.sim"
    assert folders["hardware/ros2"] == "robot_rl.hardware.ros2"
    assert "robot_rl" not in folders


def test_misplaced_files_are_named(tmp_path):
    tests = tmp_path / "tests"
    files = ("test_at_root.py", "sim/test_ok.py", "simx/test_nowhere.py", "algos/test_ok.py", "sim/x.py")
    for rel in (*files, "teleop/test_uses.py"):
        (tests / rel).parent.mkdir(parents=True, exist_ok=True)
        (tests / rel).write_text("")
    (tests / "teleop" / "test_uses.py").write_text("from test_nowhere import x\nimport test_uses\n")
    (tests / "conftest.py").write_text("")
    problems = layout_problems(tests, ROOT)
    assert problems == [
        "tests/sim/test_ok.py has the base name of tests/algos/test_ok.py",
        "tests/sim/x.py is a helper outside tests/ root (only tests/ is on the path)",
        "tests/simx/test_nowhere.py: tests/simx/ mirrors no package folder (see tests/README.md)",
        "tests/test_at_root.py sits at tests/ root: move it to its package's folder",
        "tests/teleop/test_uses.py imports tests/simx/test_nowhere.py from another folder",
    ]
