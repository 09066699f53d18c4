"""The house has no back-edges: no import circles, nothing below ``robot_rl/cli/`` imports the CLI, only the
CLI imports the stages (``robot_rl.stages``), and the core does not import ``sim``/``policies``/``hardware``/
``teleop``/``deploy`` at module level (docs/design.md §2); the wiring layer (the CLI and the stages) may."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {
    "robot_rl": "robot_rl",
    "robot_rl.sim": "sim",
    "robot_rl.policies": "policies",
    "robot_rl.hardware": "hardware",
    "robot_rl.teleop": "teleop",
}
OUTER = ("robot_rl.sim", "robot_rl.policies", "robot_rl.hardware", "robot_rl.teleop", "robot_rl.deploy")
WIRING = ("robot_rl.cli", "robot_rl.stages")


def _modules() -> dict[str, Path]:
    mods = {}
    for package, folder in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = [p for p in path.relative_to(ROOT / folder).with_suffix("").parts if p != "__init__"]
            mods[".".join([package, *parts])] = path
    return mods


def _imports(tree: ast.AST, mods: dict[str, Path]) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        out.update(n for n in names if n in mods)
    return out


def _graph(module_level: bool = False) -> dict[str, set[str]]:
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text())
        if module_level:
            tree = ast.Module(body=[n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)])
        graph[name] = _imports(tree, mods) - {name}
    return graph


def test_no_import_circles():
    graphlib.TopologicalSorter(_graph()).prepare()  # raises CycleError naming the circle


def test_nothing_below_the_cli_imports_it():
    up = [
        (m, t)
        for m, deps in _graph().items()
        for t in deps
        if t.startswith("robot_rl.cli") and ".cli" not in m
    ]
    assert not up, f"modules below robot_rl/cli/ import the CLI: {up}"


def test_only_the_cli_imports_the_stages():
    up = [
        (m, t)
        for m, deps in _graph().items()
        for t in deps
        if t.startswith(WIRING) and not m.startswith(WIRING)
    ]
    assert not up, f"modules outside robot_rl.cli and robot_rl.stages import them: {up}"


def test_core_does_not_import_outer_packages_at_module_level():
    core = {m: d for m, d in _graph(module_level=True).items() if not m.startswith(OUTER + WIRING)}
    bad = [(m, t) for m, deps in core.items() for t in deps if t.startswith(OUTER)]
    assert not bad, f"core modules import sim/policies/hardware/teleop at module level: {bad}"


def test_no_shipped_module_imports_the_test_support():
    """``robot_rl_testing`` (testing/: emulators, fakes, the safety audit) is not in the robot-rl wheel, so
    nothing robot_rl ships may import it, not even inside a function."""
    bad = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            bad += [(name, n) for n in names if n.split(".")[0] == "robot_rl_testing"]
    assert not bad, f"shipped modules import the test support: {bad}"
    support = {p.stem for p in (ROOT / "testing" / "robot_rl_testing").glob("*.py")} - {"__init__"}
    shipped = [m for m in _modules() if m.rsplit(".", 1)[-1] in support]
    assert support and not shipped, f"test support shipped in robot_rl: {shipped}"
