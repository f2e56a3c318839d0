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
        self.lines.append({"time": round(len(self.lines) * 0.1 + getattr(self, "_skip", 0), 1), "process": process,
                           "type": type_, "f": f, "value": value})
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

    def op(self, process, f, ends="ok", **value):
        self.ev(process, "invoke", f, **value)
        return self.ev(process, ends, f, **value)

    def assign(self, process, member, generation, partitions, group=G):
        return self.op(process, "assign", group=group, member=member, generation=generation,
                       partitions=[[T, p] for p in partitions])

    def gen_commit(self, process, offset, generation, ends="ok", partition=0, member=None):
        return self.op(process, "commit", ends, group=G, topic=T, partition=partition, offset=offset,
                       generation=generation, member=member or process)

    def resume(self, process, offset, partition=0):
        self.ev(process, "invoke", "resume", group=G, topic=T, partition=partition)
        return self.ev(process, "ok", "resume", group=G, topic=T, partition=partition, offset=offset)

    def start(self, consumer, group=G, protocol=None):
        extra = {} if protocol is None else {"group_protocol": protocol}
        return self.op("workload", "start-consumer", group=group, consumer=consumer, session_timeout_ms=1_000,
                       rebalance_timeout_ms=1_000, **extra)

    def wait(self, seconds):
        """Let ``seconds`` pass before the next event."""
        self._skip = getattr(self, "_skip", 0) + seconds
        return self

    def digest(self, partition, live, replay):
        return self.op("auditor", "digest", partition=partition, live=live, replay=replay)

    def replica(self, partition, node, runs):
        return self.op("auditor", "replica-log", partition=partition, node=node, runs=runs)

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


def test_a_fetch_overlapping_a_deletion_or_after_an_unknown_commit_expects_nothing():
    # A fetch that completes while a deletion is in flight may see the group deleted already.
    h = H().commit("c1", 5).ev("admin", "invoke", "delete", group=G).fetch("p1", -1)
    assert h.ev("admin", "ok", "delete", group=G).check().ok
    # A commit of unknown outcome may still land after a later deletion: the group may come back.
    assert H().commit("c1", 5, ends="info").delete("admin").fetch("p1", 5).check().ok
    # Once it is known to have failed it cannot.
    assert invariants(H().commit("c1", 5, ends="fail").delete("admin").fetch("p1", 5).check()) == [
        "deleted-group-came-back"]


def test_resume_below_committed():
    result = H().commit("c1", 40).resume("c2", 12).check()
    assert invariants(result) == ["resume-below-committed"]
    assert "returned 12, but a commit of 40 had been acknowledged" in result.violations[0].message
    # Resuming at (or above) what was committed is what a consumer should do; a resume is a fetch too.
    assert H().commit("c1", 40).resume("c2", 40).fetch("p", 40).check().ok
    assert invariants(H().resume("c2", 40).fetch("p", 12).check()) == ["offset-went-backwards"]


def test_exclusive_ownership_per_generation():
    result = H().assign("c1", "m1", 3, [0, 1]).assign("c2", "m2", 3, [1, 2]).check()
    assert invariants(result) == ["exclusive-ownership"]
    v = result.violations[0]
    assert v.key == (G, T, 1) and "generation 3" in v.message and "'m1'" in v.message and "'m2'" in v.message
    # The same partition in two generations (a move), or twice to one member, is fine.
    h = H().start("c1").assign("c1", "m1", 3, [0, 1]).assign("c1", "m1", 3, [1]).start("c2")
    assert h.assign("c2", "m2", 4, [1, 2]).check().ok


def test_generation_never_decreases():
    result = H().assign("c1", "m1", 5, [0]).gen_commit("c2", 10, 4).check()
    assert invariants(result) == ["generation-went-backwards"]
    assert "acknowledged at generation 4, but generation 5" in result.violations[0].message
    # Failed or unknown operations of an older generation are what fencing looks like, not a violation.
    assert H().assign("c1", "m1", 5, [0]).gen_commit("c2", 10, 4, ends="fail").gen_commit("c2", 10, 4, ends="info") \
        .check().ok
    # An operation invoked before the newer generation was acknowledged may complete after it.
    h = H().assign("c1", "m1", 4, [0]).start("c2")
    h.ev("c2", "invoke", "commit", group=G, topic=T, partition=0, offset=10, generation=4, member="m2")
    h.assign("c1", "m1", 5, [0]).ev("c2", "ok", "commit", group=G, topic=T, partition=0, offset=10, generation=4,
                                     member="m2")
    assert h.check().ok


def test_no_rebalance_from_a_coordinator_failover():
    h = H().start("c1").assign("c1", "m1", 1, [0, 1]).wait(30).fault("node-kill", node="node-0")
    result = h.assign("c1", "m1", 2, [0, 1]).check()
    assert invariants(result) == ["rebalance-on-failover"]
    assert "generation 2" in result.violations[0].message and "node-kill" in result.violations[0].message
    # The same generation step after a consumer fault of the group (or a consumer the workload started) is a
    # rebalance with a cause.
    h = H().start("c1").assign("c1", "m1", 1, [0, 1]).wait(30).fault("node-kill", node="node-0")
    assert h.fault("consumer-kill", group=G, consumer="c2").assign("c1", "m1", 2, [0, 1]).check().ok
    h = H().start("c1").assign("c1", "m1", 1, [0, 1]).wait(30).start("c2")
    assert h.assign("c1", "m1", 2, [0]).check().ok
    # A rebalance a consumer fault started (commits refused from then on) that coordinator failovers drag on
    # beyond the window still has its cause; the same refusals with no cause do not.
    h = H().start("c1").assign("c1", "m1", 1, [0, 1]).wait(30).fault("consumer-kill", group=G, consumer="c2")
    h.wait(2).gen_commit("c1", 7, 1, ends="fail").fault("node-kill", node="node-0").wait(40)
    assert h.assign("c1", "m1", 2, [0, 1]).check().ok
    h = H().start("c1").assign("c1", "m1", 1, [0, 1]).wait(30).fault("node-kill", node="node-0")
    h.wait(2).gen_commit("c1", 7, 1, ends="fail").wait(40)
    assert invariants(h.assign("c1", "m1", 2, [0, 1]).check()) == ["rebalance-on-failover"]
    # A consumer started after the previous generation is a cause however late failovers let the group
    # reach the next one; a cooperative second round (the previous generation left a partition unowned) has
    # the first round's cause.
    h = H().start("c1").assign("c1", "m1", 1, [0, 1]).wait(30).start("c2").wait(60)
    assert h.assign("c1", "m1", 2, [0]).wait(60).assign("c1", "m1", 3, [0]).assign("c2", "m2", 3, [1]).check().ok
    # A consumer whose actor started long after the workload asked for it (a loaded host) joins late: its
    # first join is the cause, not the workload's start; without it the same history has no cause.
    def late_join(joined: bool) -> H:
        h = H().start("c1").start("c2").wait(30).assign("c1", "m1", 1, [0, 1]).wait(1)
        if joined:
            h.op("c2", "join", group=G)
        return h.wait(1).assign("c1", "m1", 2, [0]).assign("c2", "m2", 2, [1])
    assert late_join(True).check().ok
    assert invariants(late_join(False).check()) == ["rebalance-on-failover"]
    # ... but not a round after a complete one.
    h = H().start("c1").assign("c1", "m1", 1, [0, 1]).wait(30).start("c2").wait(5).assign("c1", "m1", 2, [0])
    h.assign("c2", "m2", 2, [1]).wait(60).fault("node-kill", node="node-0")
    assert invariants(h.assign("c1", "m1", 3, [0]).assign("c2", "m2", 3, [1]).check()) == ["rebalance-on-failover"]


def _consumer_group(*consumers: str) -> H:
    """A KIP-848 consumer group's history: its consumers started with ``group_protocol: consumer``."""
    h = H()
    for c in consumers:
        h.start(c, protocol="consumer")
    return h


def test_consumer_groups_reconcile_per_member_epoch():
    # Kafka's CurrentAssignmentBuilder: m1 (epoch 5) must give up partition 0 for m2. m2 moves to epoch 6 at
    # once with what is free, m1 stays at epoch 5 while it revokes (committing at epoch 5 after m2's epoch 6
    # was acknowledged), acknowledges and reaches epoch 6; only then does m2 get partition 0, at epoch 6.
    h = _consumer_group("c1", "c2").assign("c1", "m1", 5, [0, 1]).wait(30).start("c2", protocol="consumer")
    h.assign("c2", "m2", 6, []).gen_commit("c1", 40, 5, member="m1").assign("c1", "m1", 5, [1])
    h.assign("c1", "m1", 6, [1]).assign("c2", "m2", 6, [0]).gen_commit("c2", 41, 6, member="m2")
    assert h.check().ok
    # The same history in a classic group is a commit acknowledged at an older generation.
    h = H().start("c1").assign("c1", "m1", 5, [0, 1]).wait(30).start("c2").assign("c2", "m2", 6, [])
    assert invariants(h.gen_commit("c1", 40, 5, member="m1").check()) == ["generation-went-backwards"]


def test_consumer_groups_never_give_one_partition_to_two_members_at_one_epoch():
    h = _consumer_group("c1", "c2").assign("c1", "m1", 6, [0, 1]).assign("c2", "m2", 6, [1, 2])
    result = h.check()
    assert invariants(result) == ["exclusive-ownership"]
    assert "member epoch 6" in result.violations[0].message and result.violations[0].key == (G, T, 1)


def test_a_consumer_group_members_epoch_never_decreases():
    result = _consumer_group("c1").assign("c1", "m1", 7, [0]).gen_commit("c1", 10, 6, member="m1").check()
    assert invariants(result) == ["generation-went-backwards"]
    assert "member 'm1'" in result.violations[0].message and "member epoch 6, but member epoch 7" in \
        result.violations[0].message
    # A fenced member that rejoins gets the group's epoch, above its old one; another member's lower epoch
    # is no concern of its own.
    h = _consumer_group("c1", "c2").assign("c1", "m1", 7, [0]).assign("c2", "m2", 9, [1])
    assert h.gen_commit("c1", 10, 7, member="m1").check().ok


def test_a_zombie_members_commit_below_the_new_owners_epoch_is_a_violation():
    # m1 was fenced at epoch 5 without knowing it; m2 got partition 0 at epoch 7: m1's commit at epoch 5 must
    # be refused (STALE_MEMBER_EPOCH or UNKNOWN_MEMBER_ID).
    h = _consumer_group("c1", "c2").assign("c1", "m1", 5, [0, 1]).assign("c2", "m2", 7, [0])
    result = h.gen_commit("c1", 40, 5, member="m1").check()
    assert invariants(result) == ["generation-went-backwards"] and result.violations[0].key == (G, T, 0)
    assert "member 'm2' had been assigned the partition at member epoch 7" in result.violations[0].message
    # Refused, it is what fencing looks like; another partition, or the new owner's own commit, is fine; and a
    # commit that the workload read epoch 0 for (joining) is no epoch anything is acknowledged at.
    h = _consumer_group("c1", "c2").assign("c1", "m1", 5, [0, 1]).assign("c2", "m2", 7, [0])
    h.gen_commit("c1", 40, 5, ends="fail", member="m1").gen_commit("c1", 41, 5, partition=1, member="m1")
    assert h.gen_commit("c2", 42, 7, member="m2").gen_commit("c1", 43, 0, partition=1, member="m1").check().ok


def test_a_consumer_group_epoch_needs_a_cause_and_has_no_second_round():
    # A new member epoch means the group epoch moved: after a coordinator failover alone it is a violation.
    h = _consumer_group("c1").assign("c1", "m1", 1, [0, 1]).wait(30).fault("leader-kill", partition=3)
    result = h.assign("c1", "m1", 2, [0, 1]).check()
    assert invariants(result) == ["rebalance-on-failover"] and "member epoch 2" in result.violations[0].message
    # A member joining is a cause; the epoch after it, once the newcomer is reconciled, is not a second
    # round of it (a classic cooperative group's would be, after an epoch that left a partition unowned).
    h = _consumer_group("c1").assign("c1", "m1", 1, [0, 1]).wait(30).start("c2", protocol="consumer")
    h.assign("c1", "m1", 2, [0]).assign("c2", "m2", 2, [1]).wait(60).fault("leader-kill", partition=3)
    assert h.check().ok
    h.assign("c1", "m1", 3, [0])
    assert invariants(h.check()) == ["rebalance-on-failover"]
    h = _consumer_group("c1").assign("c1", "m1", 1, [0, 1]).wait(30).start("c2", protocol="consumer")
    h.assign("c1", "m1", 2, [0]).wait(60).assign("c1", "m1", 3, [0])
    assert invariants(h.check()) == ["rebalance-on-failover"]
    h = H().start("c1").assign("c1", "m1", 1, [0, 1]).wait(30).start("c2")
    assert h.assign("c1", "m1", 2, [0]).wait(60).assign("c1", "m1", 3, [0]).check().ok


def test_a_history_naming_an_unknown_group_protocol_is_refused():
    h = H().start("c1", protocol="eager")
    with pytest.raises(HistoryError, match="group_protocol must be classic or consumer, got 'eager'"):
        h.check()


def test_single_writer_per_partition_and_epoch():
    run = [[1, 0, 10, "aa"], [2, 10, 25, "bb"]]
    assert H().replica(0, "node-0", run).replica(0, "node-1", run).check().ok
    result = H().replica(0, "node-0", run).replica(0, "node-1", [[1, 0, 10, "aa"], [2, 10, 25, "cc"]]).check()
    assert invariants(result) == ["single-writer-per-epoch"]
    assert "epoch 2" in result.violations[0].message
    # The same offsets under different epochs (a divergent suffix never truncated) differ too.
    result = H().replica(0, "node-0", run).replica(0, "node-1", [[1, 0, 10, "aa"], [3, 10, 25, "bb"]]).check()
    assert invariants(result) == ["single-writer-per-epoch"] and "epoch 3" in result.violations[0].message
    # Within one replica, an epoch that comes back after a newer one means two writers.
    result = H().replica(3, "node-2", [[1, 0, 5, "aa"], [2, 5, 9, "bb"], [1, 9, 12, "cc"]]).check()
    assert invariants(result) == ["single-writer-per-epoch"]
    assert "go back to an older leader epoch" in result.violations[0].message


def test_replay_equals_live():
    assert H().digest(0, "abc", "abc").check().ok
    result = H().digest(0, "abc", "abd").check()
    assert invariants(result) == ["replay-differs-from-live"]
    assert result.violations[0].key == ("", "__consumer_offsets", 0)


def test_heal_events_are_not_counted_as_faults():
    result = H().fault("leader-pause", partition=1).fault("heal", fault="leader-pause", partition=1).check()
    assert result.ok and result.faults == 1


def test_every_named_invariant_has_a_failing_history_here():
    caught = set()
    for history in (H().commit("c", 9).fetch("p", 1), H().fetch("p", 9).fetch("p", 1),
                    H().commit("c", 9).delete("a").fetch("p", 9), H().commit("c", 9).resume("c2", 1),
                    H().assign("c1", "m1", 1, [0]).assign("c2", "m2", 1, [0]),
                    H().assign("c1", "m1", 2, [0]).gen_commit("c2", 1, 1),
                    H().start("c1").assign("c1", "m1", 1, [0]).wait(100).assign("c1", "m1", 2, [0]),
                    H().replica(0, "a", [[1, 0, 1, "x"]]).replica(0, "b", [[1, 0, 1, "y"]]),
                    H().digest(0, "x", "y"), H().op("compaction", "compact", round=1, unproved_swaps=[0])):
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
