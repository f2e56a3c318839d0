"""Comments and docstrings cite Kafka itself (classes, methods, KIPs, JIRA ids), never a document outside
the repository or an issue tracker's numbers: a reader of the repository must be able to follow every
citation. Scans every *.py, *.md and *.yaml file git knows of (tracked, or new and not ignored), except this one."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SELF = Path(__file__).resolve()

# (what it is, pattern). "\u00a7" is the section sign.
PATTERNS = [
    ("section of an outside reference", re.compile(r"\breference\s*\u00a7", re.IGNORECASE)),
    ("section number", re.compile(r"\u00a7\s*\d")),
    ("appendix of an outside document", re.compile(r"\bAppendix\s+[AB]\b")),
    ("outside document", re.compile(r"kafka-group-protocol\.md", re.IGNORECASE)),
    ("outside directory", re.compile(r"shared/reference", re.IGNORECASE)),
    ("outside design document", re.compile(r"\b(DESIGN|CONVENTIONS)\.md\b")),
    ("issue-tracker number", re.compile(r"\bissue\s*#?\d+", re.IGNORECASE)),
]


def _citation(line: str) -> str | None:
    for name, pattern in PATTERNS:
        if pattern.search(line):
            return name
    return None


def _python_files() -> list[Path]:
    files: list[Path] = []
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "*.py", "*.md", "*.yaml"],
            cwd=ROOT, capture_output=True, text=True, check=True,
        ).stdout
        files = [ROOT / name for name in out.split("\0") if name]
    except (OSError, subprocess.CalledProcessError):
        files = []
    if not files:  # not a git checkout: walk the tree instead
        files = [p for suffix in ("*.py", "*.md", "*.yaml") for p in ROOT.rglob(suffix)
                 if not {".venv", ".git"} & set(p.relative_to(ROOT).parts)]
    return sorted({p for p in files if p.is_file() and p.resolve() != SELF})


def test_the_scan_covers_the_repository():
    names = {p.relative_to(ROOT).as_posix() for p in _python_files()}
    assert {"coordinator/shard.py", "offsets_log/__init__.py", "tests/unit/helpers.py"} <= names
    assert "tests/unit/test_citations.py" not in names


@pytest.mark.parametrize(
    "line",
    [
        "# JoinGroup (reference \u00a72.3)",
        "# SyncGroup (\u00a72.5)",
        '"""Appendix B order: ownership before the session timeout."""',
        "# New coordinator (Appendix A).",
        "reference (kafka-group-protocol.md 1.2)",
        "see /work/shared/reference/ for details",
        "(issue 2, Part 2)",
        "Goals (Issue 5): failover",
        "fixed in issue #3",
        "see issue#12",
        "Write path (DESIGN.md): a request",
        'A state machine (CONVENTIONS.md, "Tests").',
    ],
)
def test_outside_citations_are_recognised(line):
    assert _citation(line) is not None


@pytest.mark.parametrize(
    "line",
    [
        "# SyncGroup (Kafka's GroupMetadataManager.classicGroupSync)",
        "# DelayedSync (GroupMetadataManager.expirePendingSync, KAFKA-12890)",
        "# KIP-394 pending members",
        '"""Reference compactor (single process, pure Python)."""',
        "def test_one_protocol_per_assignor_in_preference_order():",
        "helpers issue requests with sensible defaults",
    ],
)
def test_kafka_citations_and_ordinary_words_pass(line):
    assert _citation(line) is None


def test_no_citation_of_an_outside_document_or_an_issue_number():
    hits = []
    for path in _python_files():
        rel = path.relative_to(ROOT).as_posix()
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            name = _citation(line)
            if name is not None:
                hits.append(f"{rel}:{number}: {name}: {line.strip()}")
    assert not hits, (
        "cite Kafka's own classes/methods, KIPs or JIRA ids (or describe the behaviour) instead of an "
        "outside document or an issue number:\n" + "\n".join(hits)
    )
