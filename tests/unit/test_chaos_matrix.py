"""The chaos matrix's packing of a run's folder for the repository (``bench/chaos_matrix.py``): the history
gzipped to the same lines, and no absolute path of the machine left in the report or the log."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _matrix():
    spec = importlib.util.spec_from_file_location("chaos_matrix", ROOT / "bench" / "chaos_matrix.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_packed_run_keeps_its_history_and_names_no_absolute_path(tmp_path):
    matrix = _matrix()
    folder = tmp_path / "kills-seed2"
    folder.mkdir()
    lines = [json.dumps({"time": t, "process": "nemesis", "type": "info", "f": "shard-kill"}) for t in range(3)]
    (folder / "history.jsonl").write_text("\n".join(lines) + "\n")
    elsewhere = "/somewhere/else/results/chaos-matrix/kills-seed2"  # where the run wrote, before a move
    (folder / "report.json").write_text(json.dumps({"ok": True, "options": {"out": str(folder)}, "seen": elsewhere}))
    (folder / "run.log").write_text(f"history  {folder}/history.jsonl\ntimeline {elsewhere}/timeline.png, x\n")

    matrix.pack(folder)
    matrix.pack(folder)  # again: nothing changes

    assert not (folder / "history.jsonl").exists()
    with gzip.open(folder / "history.jsonl.gz", "rt") as f:
        assert f.read().splitlines() == lines
    report = json.loads((folder / "report.json").read_text())
    assert report == {"ok": True, "options": {"out": "kills-seed2"}, "seen": "kills-seed2"}
    assert (folder / "run.log").read_text() == "history  kills-seed2/history.jsonl\ntimeline kills-seed2/timeline.png, x\n"
    assert matrix.row("kills", 2, report, folder)["valid"] is True
