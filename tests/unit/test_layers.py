"""Import direction: coordinator <- offsets_log | membership <- actors/placement <-
raygroups, and the core and the client side (membership) are pure: no Ray, Spark, clocks, threads,
randomness, sockets or file I/O.
Checked here on the source folders, and by import-linter on the installed layout (test_packaging.py)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What the pure core may import besides itself: computation-only standard library modules.
CORE_ALLOWED = {
    "__future__", "abc", "bisect", "collections", "dataclasses", "enum", "functools", "heapq", "itertools",
    "math", "operator", "re", "struct", "types", "typing", "coordinator",
}


LAYERS = ("coordinator", "offsets_log", "membership", "actors", "placement")


def _layer(module: str) -> str:
    """The layer (or top-level package) an imported module belongs to: ``raygroups.coordinator.x`` is
    ``coordinator``, any other ``raygroups`` module is the shell, ``raygroups``."""
    parts = module.split(".")
    if parts[0] == "raygroups":
        return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "raygroups"
    return parts[0]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(_layer(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "raygroups":
                out.update(_layer(f"raygroups.{alias.name}") for alias in node.names)
            else:
                out.add(_layer(node.module))
    return out


def test_core_and_client_side_import_only_pure_standard_library():
    offenders = {}
    for path in sorted([*(ROOT / "coordinator").rglob("*.py"), *(ROOT / "membership").rglob("*.py")]):
        bad = _imports(path) - CORE_ALLOWED - {"membership"}
        if bad:
            offenders[str(path.relative_to(ROOT))] = sorted(bad)
    assert offenders == {}


def test_lower_layers_do_not_import_higher_ones():
    higher = {"offsets_log": {"membership", "actors", "placement", "raygroups"},
              "membership": {"offsets_log", "actors", "placement", "raygroups"},
              "coordinator": {"offsets_log", "membership", "actors", "placement", "raygroups"}}
    offenders = {}
    for package, forbidden in higher.items():
        for path in sorted((ROOT / package).rglob("*.py")):
            bad = _imports(path) & forbidden
            if bad:
                offenders[str(path.relative_to(ROOT))] = sorted(bad)
    assert offenders == {}


def test_one_ray_seam_creates_and_finds_every_actor_and_touches_the_gcs():
    """Creating (``ray.remote``), finding (``ray.get_actor``) and the GCS key-value store happen in
    ``raygroups/deployment/seam.py`` only, on the server side and in the client."""
    offenders = {}
    for package in ("actors", "placement", "raygroups"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.relative_to(ROOT).as_posix() == "raygroups/deployment/seam.py":
                continue
            text = path.read_text()
            found = [call for call in ("ray.remote(", "ray.get_actor(", "internal_kv", "_internal_kv_")
                     if call in text]
            if found:
                offenders[str(path.relative_to(ROOT))] = found
    assert offenders == {}


def _shell_module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _shell_imports(path: Path, modules: set[str]) -> set[str]:
    """The shell modules ``path`` imports, at any depth of the file (lazy imports in functions count)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:  # ``from package import module`` imports the module
                submodule = f"{node.module}.{alias.name}"
                out.add(submodule if submodule in modules else node.module)
    out &= modules
    return out


def test_no_module_of_the_shell_imports_another_that_imports_it_back():
    """The shell's modules form no import circle, direct or through others (lazy imports included)."""
    paths = sorted((ROOT / "raygroups").rglob("*.py"))
    modules = {_shell_module(path) for path in paths}
    graph = {_shell_module(path): _shell_imports(path, modules) - {_shell_module(path)} for path in paths}
    circles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                circles.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert circles == []
