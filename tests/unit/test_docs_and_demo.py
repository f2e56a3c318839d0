"""The README's example and `make demo` keep working."""

import re
from pathlib import Path

from raygroups import demo_inprocess as demo

ROOT = Path(__file__).resolve().parents[2]


def test_readme_example_runs(capsys):
    text = (ROOT / "README.md").read_text()
    section = text.split("## The group API without Ray", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    exec(compile(block, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "offset=42" in out and out.strip().endswith("Empty")


def test_demo_shows_join_leave_and_rebalance(capsys):
    demo.main()
    out = capsys.readouterr().out
    assert "join complete: generation 1" in out
    assert "consumer-b leaves the group" in out
    assert "join complete: generation 2" in out
    assert "orders-0,orders-1,orders-2" in out
