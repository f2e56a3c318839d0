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
    ``raygroups/ray_seam.py`` only, on the server side and in the client."""
    offenders = {}
    for package in ("actors", "placement", "raygroups"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name == "ray_seam.py":
                continue
            text = path.read_text()
            found = [call for call in ("ray.remote(", "ray.get_actor(", "internal_kv", "_internal_kv_")
                     if call in text]
            if found:
                offenders[str(path.relative_to(ROOT))] = found
    assert offenders == {}
