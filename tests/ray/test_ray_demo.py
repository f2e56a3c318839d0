"""`make demo` (shortened, on a single-node Ray: the single-node faults) passes its checker; the README's
example runs."""

import json
import re
from pathlib import Path

import pytest

from raygroups import demo

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_demo_passes_its_own_checks(ray_session, tmp_path, capfd):
    out = tmp_path / "demo"
    assert demo.main(["--seconds", "12", "--nodes", "1", "--seed", "3", "--out", str(out)]) == 0
    printed = capfd.readouterr().out
    assert "checker (10 invariants): valid: no invariant violated" in printed
    assert f"history  {out}/history.jsonl" in printed and f"timeline {out}/timeline.png" in printed
    report = json.loads((out / "report.json").read_text())
    assert report["ok"] and report["faults_injected"] >= 1 and not report["replicated"]
    assert (out / "timeline.png").stat().st_size > 10_000


def test_readme_ray_example_runs(ray_session, capsys):
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = text.split("## Thirty seconds on Ray", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    exec(compile(block, "README.md", "exec"), {})
    assert "'committed'" in capsys.readouterr().out
