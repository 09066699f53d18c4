"""Layering holds in the code, not only on paper (issue 36, docs/design.md §2).

Two ratchets over the shipped package, read with stdlib ``ast`` (no import runs):

- imports of project modules (absolute or relative) made inside functions, outside a ``try`` whose handler
  catches ``ImportError``, number at most ``MAX_FUNCTION_IMPORTS``;
- the module import graph, counting function-level, relative and ``try``-guarded imports and the package
  ``__init__`` each import runs, has no strongly connected component beyond ``ALLOWED_CYCLES``.

Both constants may only go down: lower them when a change removes imports or cycles. Also: nothing below
``robot_rl/cli/`` imports the CLI, only the CLI imports the stages (``robot_rl.stages``), the core does not
import ``sim``/``policies``/``hardware``/``teleop``/``deploy`` at module level (docs/design.md §2: they
import the core; the wiring layer, the CLI and the stages, may, and so may the edge builders), and nothing
shipped imports the test support (``robot_rl_testing``).

The edge builders (``EDGE``: :mod:`robot_rl.actor_build`, :mod:`robot_rl.source_build`) make what the core is
handed (an actor's env and device, a policy source) from ``sim``/``teleop``/``policies``/``deploy``; only
the wiring and the outer packages (the ROS 2 nodes in ``robot_rl.deploy.ros2``) import them, never the core.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from repo_paths import ROOT

FOLDERS = {  # import path -> folder, as setup.py's package-dir maps them
    "robot_rl": "robot_rl",
    "robot_rl.sim": "sim",
    "robot_rl.policies": "policies",
    "robot_rl.hardware": "hardware",
    "robot_rl.teleop": "teleop",
}
OUTER = ("robot_rl.sim", "robot_rl.policies", "robot_rl.hardware", "robot_rl.teleop", "robot_rl.deploy")
WIRING = ("robot_rl.cli", "robot_rl.stages")
EDGE = ("robot_rl.actor_build", "robot_rl.source_build")

# Issue 36 asked for <= 30 (231 at the time). The 8 left each load something heavy or order-sensitive only on
# the path that needs it (a comment beside each says what): MuJoCo after the MUJOCO_GL check and its GL
# renderer only with cameras (sim/batched_mujoco.py), torch in the MJX device path (sim/batched_mjx.py), the
# MuJoCo-backed simulated human (teleop/devices.py), a critic's torch (hardware/robot_env.py), the MuJoCo
# kinematics of the ROS 2 bridge and the sim server's renderer (hardware/).
MAX_FUNCTION_IMPORTS = 8

# Import cycles still present, each as the set of modules in one strongly connected component. May only
# shrink: a component found in the code must be a subset of one listed here.
ALLOWED_CYCLES: list[frozenset[str]] = []


@dataclass(frozen=True)
class Edge:
    """One import statement's reach: ``source`` module imports ``target`` module at ``line``."""

    source: str
    target: str
    line: int
    in_function: bool


def _modules() -> dict[str, Path]:
    mods = {}
    for package, folder in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = [p for p in path.relative_to(ROOT / folder).with_suffix("").parts if p != "__init__"]
            mods[".".join([package, *parts])] = path
    return mods


def _catches_import_error(node: ast.Try) -> bool:
    names = [ast.unparse(h.type) for h in node.handlers if h.type is not None]
    return any("ImportError" in n or "ModuleNotFoundError" in n for n in names)


def _is_type_checking(node: ast.If) -> bool:
    return ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")


def _statements(
    node: ast.AST, in_function: bool = False, guarded: bool = False
) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool, bool]]:
    """Yield every import statement under ``node`` with (in a function, inside an ImportError try body)."""
    for child in ast.iter_child_nodes(node):
        func = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child, func, guarded
        elif isinstance(child, ast.If) and _is_type_checking(child):
            yield from (s for b in child.orelse for s in _statements(ast.Module(body=[b]), func, guarded))
        elif isinstance(child, ast.Try) and _catches_import_error(child):
            for b in child.body:
                yield from _statements(ast.Module(body=[b]), func, True)
            for part in (child.handlers, child.orelse, child.finalbody):
                for b in part:
                    yield from _statements(ast.Module(body=[b]), func, guarded)
        else:
            yield from _statements(child, func, guarded)


def _absolute(module: str, path: Path, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    base = package.split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


@functools.cache
def _lazy_exports(package: str, path: Path) -> dict[str, str]:
    """A package ``__init__``'s lazy re-exports (PEP 562 ``__getattr__``): a module-level dict literal of
    name -> project module (``_EXPORTS``). ``from package import name`` loads that module."""
    out = {}
    for node in ast.parse(path.read_text()).body:
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        if isinstance(value, ast.Dict):
            pairs = [
                (k.value, v.value)
                for k, v in zip(value.keys, value.values, strict=True)
                if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)
            ]
            out.update({k: v for k, v in pairs if isinstance(v, str) and v.startswith("robot_rl.")})
    return out


def _targets(module: str, path: Path, node: ast.Import | ast.ImportFrom, mods: dict[str, Path]) -> set[str]:
    """Project modules the statement loads: the named module (for a name a package re-exports lazily, the
    module it comes from), and the packages above it that ``module`` is not already inside (their
    ``__init__`` runs first)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = _absolute(module, path, node)
        names = []
        for a in node.names:
            full = f"{base}.{a.name}"
            lazy = _lazy_exports(base, mods[base]) if mods.get(base, Path()).name == "__init__.py" else {}
            names.append(full if full in mods else lazy.get(a.name, base))
    out = set()
    for name in names:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            if prefix in mods and not (module == prefix or module.startswith(prefix + ".")):
                out.add(prefix)
    return out


@functools.cache
def _edges() -> list[Edge]:
    mods = _modules()
    edges = []
    for module, path in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node, in_function, _guarded in _statements(tree):
            for target in sorted(_targets(module, path, node, mods)):
                edges.append(Edge(module, target, node.lineno, in_function))
    return edges


def function_level_imports() -> list[str]:
    """``path:line`` of each project import made inside a function outside an ImportError ``try``.

    One per statement for ``from x import a, b``; one per project name for ``import x, y``."""
    mods = _modules()
    found = []
    for module, path in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node, in_function, guarded in _statements(tree):
            if not in_function or guarded:
                continue
            if isinstance(node, ast.ImportFrom):
                hits = 1 if node.level or _absolute(module, path, node).split(".")[0] == "robot_rl" else 0
            else:
                hits = sum(a.name.split(".")[0] == "robot_rl" for a in node.names)
            found += [f"{path.relative_to(ROOT)}:{node.lineno}"] * hits
    return found


def strongly_connected(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Tarjan's algorithm (iterative); components of more than one module, or one importing itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = set()
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.add(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    out.append(frozenset(comp))
    return out


def import_cycles() -> list[frozenset[str]]:
    graph: dict[str, set[str]] = {m: set() for m in _modules()}
    for e in _edges():
        graph[e.source].add(e.target)
    return strongly_connected(graph)


def test_strongly_connected_finds_every_component():
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": {"d"}, "d": {"c"}, "e": {"a"}, "f": set()}
    assert sorted(map(sorted, strongly_connected(graph))) == [["a", "b"], ["c", "d"]]


def test_function_level_imports_ratchet():
    found = function_level_imports()
    assert len(found) <= MAX_FUNCTION_IMPORTS, (
        f"{len(found)} project imports inside functions (limit {MAX_FUNCTION_IMPORTS}); hoist them to module "
        "level, or guard an optional extra with try/except ImportError:\n" + "\n".join(found)
    )


def test_no_import_cycles_beyond_the_allow_list():
    edges = _edges()
    new = [c for c in import_cycles() if not any(c <= allowed for allowed in ALLOWED_CYCLES)]
    detail = [
        "\n".join(
            f"  {e.source} -> {e.target} (line {e.line}{', in a function' if e.in_function else ''})"
            for e in edges
            if e.source in c and e.target in c
        )
        for c in new
    ]
    assert not new, "import cycles (strongly connected components):\n" + "\n\n".join(detail)


def test_lazy_re_export_resolves_to_its_module(tmp_path):
    (tmp_path / "pkg").mkdir()
    init, impl = tmp_path / "pkg" / "__init__.py", tmp_path / "pkg" / "impl.py"
    init.write_text('_EXPORTS = {"make": "robot_rl.pkg.impl"}\n')
    impl.write_text("def make(): ...\n")
    mods = {"robot_rl.pkg": init, "robot_rl.pkg.impl": impl, "robot_rl.user": tmp_path / "user.py"}
    node = ast.parse("from robot_rl.pkg import make").body[0]
    assert _targets("robot_rl.user", tmp_path / "user.py", node, mods) == {
        "robot_rl.pkg",
        "robot_rl.pkg.impl",
    }
    inner = ast.parse("def f():\n    from .pkg import impl\n")
    assert [(type(n).__name__, f, g) for n, f, g in _statements(inner)] == [("ImportFrom", True, False)]


def test_nothing_below_the_cli_imports_it():
    up = [
        e for e in _edges() if e.target.startswith("robot_rl.cli") and not e.source.startswith("robot_rl.cli")
    ]
    assert not up, f"modules below robot_rl/cli/ import the CLI: {up}"


def test_core_does_not_import_outer_packages_at_module_level():
    bad = [
        e
        for e in _edges()
        if not e.in_function and e.target.startswith(OUTER) and not e.source.startswith(OUTER + WIRING + EDGE)
    ]
    assert not bad, f"core modules import sim/policies/hardware/teleop/deploy at module level: {bad}"


def test_only_the_wiring_and_outer_packages_import_the_edge_builders():
    up = [e for e in _edges() if e.target.startswith(EDGE) and not e.source.startswith(OUTER + WIRING + EDGE)]
    assert not up, f"core modules import the edge builders {EDGE}: {up}"


def test_only_the_cli_imports_the_stages():
    up = [e for e in _edges() if e.target.startswith(WIRING) and not e.source.startswith(WIRING)]
    assert not up, f"modules outside robot_rl.cli and robot_rl.stages import them: {up}"


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
