"""`make demo` (shortened) runs through a shard crash and a consumer leaving, and its final checks pass."""

import pytest

from raygroups import demo

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_demo_passes_its_own_checks(ray_session, capsys):
    assert demo.main(["--seconds", "9"]) == 0
    out = capsys.readouterr().out
    assert "killing shard" in out and "leaves the group" in out
    assert "every acknowledged commit is still committed ... OK" in out
