"""`make demo` (shortened) runs through a shard crash and a consumer leaving, and its final checks pass."""

import re
from pathlib import Path

import pytest

from raygroups import demo

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_demo_passes_its_own_checks(ray_session, capsys):
    assert demo.main(["--seconds", "9", "--nodes", "1"]) == 0
    out = capsys.readouterr().out
    assert "killing shard" in out and "leaves the group" in out
    assert "every acknowledged commit is still committed ... OK" in out


def test_readme_ray_example_runs(ray_session, capsys):
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = text.split("## Thirty seconds on Ray", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    exec(compile(block, "README.md", "exec"), {})
    assert "'committed'" in capsys.readouterr().out
