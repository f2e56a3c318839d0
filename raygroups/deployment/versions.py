"""What a node must run: ``raygroups/constraints.txt`` (shipped in the wheel) pins every run-time
dependency at the version the tests ran on (``scripts/constraints.py`` writes it); ``cluster.yaml`` installs
every node from it, and the ``ray up`` end-to-end script checks each node against it with ``mismatches``."""

from __future__ import annotations

from importlib.resources import files

# PEP 503's normalized name (``Foo_Bar`` and ``foo-bar`` are one package); packaging is one of Ray's own.
from packaging.utils import canonicalize_name as canonical


def parse_constraints(text: str) -> dict[str, str]:
    """``NAME==VERSION`` lines (comments and blank lines skipped) -> ``{canonical name: version}``; a line that
    is not one, or a name given twice, is a ValueError naming it."""
    pins: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep or not name.strip() or not version.strip():
            raise ValueError(f"constraints line {number}: {raw!r} is not NAME==VERSION")
        key = canonical(name.strip())
        if key in pins:
            raise ValueError(f"constraints line {number}: {name.strip()} is pinned twice")
        pins[key] = version.strip()
    return pins


def shipped_constraints() -> dict[str, str]:
    """The constraints of the installed raygroups."""
    return parse_constraints(files("raygroups").joinpath("constraints.txt").read_text())


def parse_freeze(text: str) -> dict[str, str]:
    """``pip freeze`` output -> ``{canonical name: version}`` (editable and URL installs are skipped)."""
    out = {}
    for line in text.splitlines():
        name, sep, version = line.strip().partition("==")
        if sep:
            out[canonical(name)] = version
    return out


def mismatches(wanted: dict[str, str], installed: dict[str, str]) -> list[str]:
    """One sentence per pinned package a node does not run at its pinned version."""
    return [f"{name}: {installed.get(name, 'not installed')}, not {version}"
            for name, version in sorted(wanted.items()) if installed.get(name) != version]
