"""What ``pip install raygroups`` puts into a user's environment: one top-level name, ``raygroups``.

The repository keeps its layers as top-level folders (``coordinator/``, ``offsets_log/``, ``actors/``,
``placement/``); the wheel maps them under ``raygroups.`` so none of those generic names (PyPI has
unrelated ``actors``, ``placement`` and ``coordinator`` projects) can collide with a user's own.
The import-linter contracts of pyproject.toml are checked here on that installed layout.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCE_FOLDERS = {"raygroups": "raygroups", "coordinator": "raygroups.coordinator",
                  "offsets_log": "raygroups.offsets_log", "actors": "raygroups.actors",
                  "placement": "raygroups.placement",
                  "membership": "raygroups.membership"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """Build the wheel from a copy of the sources (an in-tree build would leave ``build/`` behind)."""
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".venv", ".git", "build", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis", "tests", "bench"))
    out = work / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-qq", "--no-deps", "--no-build-isolation",
                    "-w", str(out), str(src)], check=True, capture_output=True, timeout=300)
    (built,) = out.glob("raygroups-*.whl")
    return built


def _packages_in_source() -> set[str]:
    found = set()
    for folder, installed in SOURCE_FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((installed, *rel)))
    return found


def test_the_wheel_installs_one_top_level_name(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        tops = {n.split("/")[0] for n in names if ".dist-info/" not in n}
        (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")] or [None]
        declared = set(zf.read(top_level).decode().split()) if top_level else tops
    assert tops == {"raygroups"}
    assert declared == {"raygroups"}


def test_every_source_package_is_in_the_wheel(wheel):
    with zipfile.ZipFile(wheel) as zf:
        in_wheel = {n[: -len("/__init__.py")].replace("/", ".") for n in zf.namelist()
                    if n.endswith("/__init__.py")}
    assert in_wheel == _packages_in_source()


def test_import_linter_contracts_hold_on_the_installed_layout(wheel, tmp_path):
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    lint = Path(sys.executable).with_name("lint-imports")
    # Run from the extracted tree, so ``raygroups`` is the installed package with all its subpackages.
    result = subprocess.run([str(lint), "--no-cache", str(ROOT / "pyproject.toml")], cwd=site,
                            capture_output=True, text=True, timeout=120,
                            env={"PATH": str(Path(sys.executable).parent), "PYTHONPATH": str(site)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BROKEN" not in result.stdout and "KEPT" in result.stdout


def test_the_wheel_ships_the_constraints_of_the_tested_environment(wheel):
    """raygroups/constraints.txt is in the wheel (cluster.yaml installs every node from it) and equals what
    this environment runs (``make test`` installs from it; scripts/constraints.py --check names a drift)."""
    from raygroups.deployment.versions import parse_constraints

    with zipfile.ZipFile(wheel) as zf:
        shipped = parse_constraints(zf.read("raygroups/constraints.txt").decode())
    assert len(shipped) > 50 and shipped["ray"] == "2.60.0"
    check = subprocess.run([sys.executable, str(ROOT / "scripts" / "constraints.py"), "--check"],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
