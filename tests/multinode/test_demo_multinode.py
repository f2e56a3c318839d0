"""`make demo` as it runs by default: three simulated coordinator nodes, a leader node killed mid-run."""

import pytest

from raygroups import demo

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_demo_on_three_nodes_passes_its_checks(capsys):
    import ray

    if ray.is_initialized():
        ray.shutdown()
    assert demo.main(["--seconds", "12"]) == 0
    out = capsys.readouterr().out
    assert "killing node" in out and "leaves the group" in out
    assert "every acknowledged commit is still committed ... OK" in out
