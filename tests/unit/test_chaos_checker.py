"""The chaos history checker on hand-made histories: for every invariant a history that violates it (the
checker must say so, naming the invariant and the operations) and a close one that does not; histories
that break the schema are refused with the line named; the CLI's exit codes."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from raygroups.chaos import INVARIANTS, HistoryError, check, read_history
from raygroups.chaos.history import pair_events, parse_event
from raygroups.cli import main

G, T = "orders-app", "orders"


class H:
    """Builds a history line by line; ``t`` advances by 0.1 s per event."""

    def __init__(self) -> None:
        self.lines: list[dict] = []

    def ev(self, process, type_, f, **value):
        self.lines.append({"time": round(len(self.lines) * 0.1, 1), "process": process, "type": type_, "f": f,
                           "value": value})
        return self

    def commit(self, process, offset, ends="ok", group=G, partition=0):
        self.ev(process, "invoke", "commit", group=group, topic=T, partition=partition, offset=offset)
        return self.ev(process, ends, "commit", group=group, topic=T, partition=partition, offset=offset)

    def fetch(self, process, returned, group=G, partition=0):
        self.ev(process, "invoke", "fetch", group=group, topic=T, partition=partition)
        return self.ev(process, "ok", "fetch", group=group, topic=T, partition=partition, offset=returned)

    def delete(self, process, ends="ok", group=G):
        self.ev(process, "invoke", "delete", group=group)
        return self.ev(process, ends, "delete", group=group)

    def fault(self, name, **target):
        return self.ev("nemesis", "info", name, **target)

    def check(self):
        return check(pair_events(parse_event(json.dumps(obj), n) for n, obj in enumerate(self.lines, 1)))


def invariants(result) -> list[str]:
    return [v.invariant for v in result.violations]


def test_a_valid_history_with_faults_passes():
    h = H().commit("c1", 5).fault("kill-leader-node", node="node-0").fetch("p1", 5).commit("c1", 9, ends="info")
    h.fetch("p1", 9).commit("c1", 12, ends="fail").fetch("p1", 9).commit("c1", 13).fetch("p2", 13)
    result = h.check()
    assert result.ok and result.violations == []
    assert result.operations == {"ok": 6, "fail": 1, "info": 1} and result.faults == 1
    assert result.to_dict()["invariants"] == list(INVARIANTS)


def test_lost_acked_commit():
    result = H().commit("c1", 5).commit("c1", 9).fault("kill").fetch("p1", 5).check()
    assert invariants(result) == ["lost-acked-commit"]
    v = result.violations[0]
    assert v.key == (G, T, 0) and [op.f for op in v.operations] == ["commit", "fetch"]
    assert "returned 5, but a commit of 9 had been acknowledged" in v.message
    # A fetch invoked while the commit is still in flight may see the older offset: not a violation.
    h = H().commit("c1", 5)
    h.ev("c1", "invoke", "commit", group=G, topic=T, partition=0, offset=9)
    h.fetch("p1", 5).ev("c1", "ok", "commit", group=G, topic=T, partition=0, offset=9)
    assert h.check().ok
    # An unknown or failed commit sets no expectation.
    assert H().commit("c1", 9, ends="info").commit("c2", 11, ends="fail").fetch("p1", -1).check().ok


def test_offset_went_backwards():
    result = H().commit("c1", 9, ends="info").fetch("p1", 9).fetch("p2", 4).check()
    assert invariants(result) == ["offset-went-backwards"]
    assert "returned 4, but an earlier fetch had returned 9" in result.violations[0].message
    # Overlapping fetches may return in any order; other partitions are independent.
    h = H()
    h.ev("p1", "invoke", "fetch", group=G, topic=T, partition=0)
    h.commit("c1", 9).fetch("p2", 9)
    h.ev("p1", "ok", "fetch", group=G, topic=T, partition=0, offset=-1)
    assert h.fetch("p3", 9).fetch("p3", -1, partition=1).check().ok


def test_deleted_group_came_back():
    result = H().commit("c1", 9).delete("admin").fetch("p1", 9).check()
    assert invariants(result) == ["deleted-group-came-back"]
    assert "the group's deletion had been acknowledged" in result.violations[0].message
    # A commit after the deletion recreates the group; so may one in flight while it ran.
    assert H().commit("c1", 9).delete("admin").commit("c1", 3).fetch("p1", 3).check().ok
    h = H().commit("c1", 9)
    h.ev("c1", "invoke", "commit", group=G, topic=T, partition=0, offset=10)
    h.delete("admin").ev("c1", "info", "commit", group=G, topic=T, partition=0, offset=10)
    assert h.fetch("p1", 10).check().ok
    # After a deletion, lower offsets are not "lost" nor "backwards".
    assert H().commit("c1", 9).fetch("p1", 9).delete("admin").fetch("p1", -1).check().ok
    # A fetch overlapping an acknowledged deletion may see the group before or after it.
    h = H().commit("c1", 9).fetch("p1", 9)
    h.ev("p2", "invoke", "fetch", group=G, topic=T, partition=0)
    h.delete("admin").ev("p2", "ok", "fetch", group=G, topic=T, partition=0, offset=-1)
    assert h.check().ok
    # A deletion whose outcome is unknown may take effect later: nothing about the group is checked.
    assert H().commit("c1", 9).delete("admin", ends="info").fetch("p1", -1).fetch("p1", 9).check().ok


def test_every_named_invariant_has_a_failing_history_here():
    caught = set()
    for history in (H().commit("c", 9).fetch("p", 1), H().fetch("p", 9).fetch("p", 1),
                    H().commit("c", 9).delete("a").fetch("p", 9)):
        caught.update(invariants(history.check()))
    assert caught == set(INVARIANTS)


@pytest.mark.parametrize(("lines", "message"), [
    (['{"time": 0}'], "line 1: missing process, type, f, value"),
    (["[1, 2]"], "line 1: must be a JSON object, got list"),
    (["{nope"], "line 1: not JSON"),
    (['{"time": -1, "process": "c", "type": "invoke", "f": "fetch", "value": {}}'], "time must be a number"),
    (['{"time": 0, "process": "c", "type": "done", "f": "fetch", "value": {}}'], "type must be one of"),
    (['{"time": 0, "process": "c", "type": "ok", "f": "fetch", "value": {}}'], "without an invocation"),
    (['{"time": 0, "process": "nemesis", "type": "ok", "f": "kill", "value": {}}'], "must be of type info"),
    (['{"time": 0, "process": "c", "type": "invoke", "f": "fetch", "value": {}}',
      '{"time": 1, "process": "c", "type": "invoke", "f": "fetch", "value": {}}'], "line 2: process 'c' invokes"),
    (['{"time": 0, "process": "c", "type": "invoke", "f": "fetch", "value": {"group": "g"}}',
      '{"time": 1, "process": "c", "type": "ok", "f": "fetch", "value": {"offset": 1}}'], "needs group, topic"),
    (['{"time": 0, "process": "c", "type": "invoke", "f": "fetch", "value": {"group": "g", "topic": "t", '
      '"partition": 0}}', '{"time": 1, "process": "c", "type": "ok", "f": "fetch", "value": {}}'],
     "line 2: a fetch needs an int offset"),
])
def test_a_history_that_breaks_the_schema_is_refused_naming_the_line(tmp_path, lines, message):
    path = tmp_path / "history.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(HistoryError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check(read_history(path))


def test_the_cli_exit_codes_and_json(tmp_path):
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    good.write_text("\n".join(json.dumps(x) for x in H().commit("c", 3).fetch("p", 3).lines) + "\n")
    bad.write_text("\n".join(json.dumps(x) for x in H().commit("c", 3).fetch("p", 1).lines) + "\n")
    runner = CliRunner()
    ok = runner.invoke(main, ["chaos", "check", str(good)])
    assert ok.exit_code == 0 and "valid: no invariant violated" in ok.output
    broken = runner.invoke(main, ["chaos", "check", str(bad), "--json"])
    assert broken.exit_code == 1
    verdict = json.loads(broken.output)
    assert not verdict["ok"] and [v["invariant"] for v in verdict["violations"]] == ["lost-acked-commit"]
    assert verdict["violations"][0]["operations"][0]["invoke_line"] == 1
    missing = runner.invoke(main, ["chaos", "check", str(tmp_path / "none.jsonl")])
    assert missing.exit_code == 1 and missing.output.startswith("error: ")
