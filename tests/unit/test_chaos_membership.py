"""The membership changes a coordinator decided, from its log to the checker: ``offsets_log.membership``
on real records (a file log, the audit's own pass, a compacted prefix), the run's conversion into
``coordinator`` operations, and ``rebalance-on-failover`` judging a late rebalance by them (a session
expiry that failovers delayed is a cause; a new epoch with neither a client-side nor a coordinator-recorded
change of its group is still a violation)."""

from __future__ import annotations

import json

from raygroups.actors.audit import _replay_and_runs
from raygroups.coordinator.consumer_records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
)
from raygroups.coordinator.records import (
    MemberMetadata,
    new_empty_group_metadata_record,
    new_group_metadata_record,
    new_offset_commit_record,
)
from raygroups.offsets_log import Batch, compact_batches, open_log
from raygroups.offsets_log.membership import membership_changes

from raygroups.chaos import read_history
from raygroups.chaos.run import coordinator_events, write_history
from tests.unit.test_chaos_checker import H, invariants

CG = "chaos-group-1"
T0_MS = 1_700_000_000_000  # the run's wall-clock start in the tests below


def _classic_member(member_id: str, client_id: str) -> MemberMetadata:
    return MemberMetadata(member_id, None, client_id, "/127.0.0.1", 10_000, 10_000, b"sub", b"assignment")


def _consumer_member(client_id: str, host: str = "/127.0.0.1") -> ConsumerGroupMemberMetadataValue:
    return ConsumerGroupMemberMetadataValue(None, None, client_id, host, ("chaos-topic",), None, "uniform", 10_000)


def _epoch(group: str, epoch: int) -> tuple:
    return ConsumerGroupMetadataKey(group), ConsumerGroupMetadataValue(epoch, (("chaos-topic", 6),))


def _removal(group: str, member_id: str, epoch: int) -> tuple:
    """Kafka's removeMember then the new group epoch, as the coordinator writes a session expiry."""
    return ((ConsumerGroupCurrentMemberAssignmentKey(group, member_id), None),
            (ConsumerGroupTargetAssignmentMemberKey(group, member_id), None),
            (ConsumerGroupMemberMetadataKey(group, member_id), None), _epoch(group, epoch))


def _batches() -> list[Batch]:
    """A partition's log: classic group ``g0`` (created, generation 1 with m1 and m2, generation 2 with m2
    and m3), consumer group ``chaos-group-1`` (u1 joins at epoch 1, u2 at epoch 2, u1 rewritten with another
    host: no change, u1 expired at epoch 3), and offset commits between."""
    ms = [_classic_member("m1", "g0-c0"), _classic_member("m2", "g0-c1"), _classic_member("m3", "g0-c2")]
    records = [
        (new_empty_group_metadata_record("g0", T0_MS + 1_000),),
        (new_group_metadata_record("g0", "consumer", 1, "cooperative-sticky", "m1", T0_MS + 2_000, ms[:2]),),
        ((ConsumerGroupMemberMetadataKey(CG, "u1"), _consumer_member("g1-c3")), _epoch(CG, 1)),
        (new_offset_commit_record("g0", "chaos-topic", 0, 17, -1, "", T0_MS + 4_000),),
        ((ConsumerGroupMemberMetadataKey(CG, "u2"), _consumer_member("g1-c4")), _epoch(CG, 2)),
        ((ConsumerGroupMemberMetadataKey(CG, "u1"), _consumer_member("g1-c3", host="/10.0.0.9")),),
        (new_group_metadata_record("g0", "consumer", 2, "cooperative-sticky", "m2", T0_MS + 7_000, ms[1:]),),
        _removal(CG, "u1", 3),
    ]
    out, offset = [], 0
    for i, recs in enumerate(records):
        out.append(Batch(offset, 1, T0_MS + (i + 1) * 1_000, recs))
        offset += len(recs)
    return out


def _short(changes: list[dict]) -> list[tuple]:
    return [(c["group"], c["change"], c["member"], c["client_id"], c.get("generation", c.get("epoch")),
             c["timestamp_ms"] - T0_MS) for c in changes]


EXPECTED = [
    ("g0", "added", "m1", "g0-c0", 1, 2_000),
    ("g0", "added", "m2", "g0-c1", 1, 2_000),
    (CG, "added", "u1", "g1-c3", 1, 3_000),
    (CG, "added", "u2", "g1-c4", 2, 5_000),
    ("g0", "removed", "m1", "g0-c0", 2, 7_000),
    ("g0", "added", "m3", "g0-c2", 2, 7_000),
    (CG, "removed", "u1", "g1-c3", 3, 8_000),
]


def test_membership_changes_from_a_file_log_and_the_audits_pass(tmp_path):
    log = open_log(tmp_path / "p3")
    for batch in _batches():
        log.append(batch, 1)
    changes = membership_changes(log.batches(0))
    assert _short(changes) == EXPECTED
    assert [c["offset"] for c in changes] == [1, 1, 2, 5, 8, 8, 11]
    assert {c["protocol"] for c in changes if c["group"] == CG} == {"consumer"}
    assert "epoch" not in changes[0] and changes[0]["generation"] == 1 and changes[0]["group_instance_id"] is None
    # The shard's audit answers them beside its digests.
    digest, runs, membership = _replay_and_runs(log, None)
    assert membership == changes and runs[0][:3] == [1, 0, 13]
    log.close()


def test_a_compacted_prefix_only_sets_where_members_stood():
    batches = _batches()
    # The first six batches compacted (generation 1's record, u1's rewrite and u2 survive): what they hold
    # only sets the starting point; generation 2 still shows m1 leaving and m3 joining, u1's expiry stays.
    cleaned = batches[6].base_offset
    compacted = compact_batches(batches[:6], delete_retention_ms=0, now_ms=T0_MS + 60_000) + batches[6:]
    assert _short(membership_changes(compacted, cleaned_offset=cleaned)) == EXPECTED[4:]
    assert _short(membership_changes(batches, cleaned_offset=cleaned)) == EXPECTED[4:]


def test_coordinator_events_are_operations_at_run_time():
    changes = membership_changes(_batches())
    events = coordinator_events(changes, (T0_MS + 2_500) / 1000.0)
    # Generation 1's changes, 0.5 s before the run started, are left out; the others are invoke/ok pairs.
    assert [(round(t, 3), p, ty, f) for t, p, ty, f, _ in events[:2]] == [
        (0.5, "coordinator", "invoke", "member-added"), (0.5, "coordinator", "ok", "member-added")]
    assert [e[4] for e in events[::2]] == [
        {"group": CG, "member": "u1", "client_id": "g1-c3", "group_instance_id": None, "offset": 2, "epoch": 1},
        {"group": CG, "member": "u2", "client_id": "g1-c4", "group_instance_id": None, "offset": 5, "epoch": 2},
        {"group": "g0", "member": "m1", "client_id": "g0-c0", "group_instance_id": None, "offset": 8,
         "generation": 2},
        {"group": "g0", "member": "m3", "client_id": "g0-c2", "group_instance_id": None, "offset": 8,
         "generation": 2},
        {"group": CG, "member": "u1", "client_id": "g1-c3", "group_instance_id": None, "offset": 11, "epoch": 3},
    ]
    assert [e[3] for e in events[::2]] == ["member-added"] * 2 + ["member-removed", "member-added", "member-removed"]


def test_coordinator_events_merge_into_a_readable_history(tmp_path):
    """Written among the clients' events by time, the coordinator's pairs stay pairs and the checker reads
    them (a history without any, as older runs wrote, reads as before)."""
    path = tmp_path / "history.jsonl"
    clients = [(0.2, "workload", "invoke", "start-consumer", {"group": CG, "consumer": "g1-c3"}),
               (0.2, "workload", "ok", "start-consumer", {"group": CG, "consumer": "g1-c3"}),
               (6.0, "auditor", "invoke", "digest", {"partition": 3}),
               (6.1, "auditor", "ok", "digest", {"partition": 3, "live": "a", "replay": "a"})]
    coordinator = coordinator_events(membership_changes(_batches()), (T0_MS + 2_500) / 1000.0)
    write_history(str(path), clients + coordinator)
    history = read_history(path)
    ops = [(op.process, op.f, op.invoke.time) for op in history.operations]
    assert ops == [("workload", "start-consumer", 0.2), ("coordinator", "member-added", 0.5),
                   ("coordinator", "member-added", 2.5), ("coordinator", "member-removed", 4.5),
                   ("coordinator", "member-added", 4.5), ("coordinator", "member-removed", 5.5),
                   ("auditor", "digest", 6.0)]
    assert all(op.type == "ok" for op in history.operations)
    assert [json.loads(line)["time"] for line in path.read_text().splitlines()] == sorted(
        json.loads(line)["time"] for line in path.read_text().splitlines())


def _r600d(coordinator_group: str | None, ends: str = "ok") -> H:
    """chaos-group-1 (KIP-848) at epoch 9; g1-c3 (member u3) is killed, its replacement g1-c24 joins (the
    coordinator records u24 added) and the group reaches epoch 10 without u3, whose session has not expired
    yet; then the group's coordinator fails over again and again, each new one restarting u3's session, so
    that only 35 s after the kill does one expire u3 (recorded for ``coordinator_group``) and the group move
    to epoch 11 -- long after the clients' last change."""
    h = H().start("g1-c3", group=CG, protocol="consumer").start("g1-c21", group=CG, protocol="consumer")
    h.assign("g1-c3", "u3", 9, [0, 1], group=CG).assign("g1-c21", "u21", 9, [2, 3], group=CG).wait(40)
    h.fault("consumer-kill", group=CG, consumer="g1-c3").start("g1-c24", group=CG, protocol="consumer")
    h.op("coordinator", "member-added", group=CG, member="u24", client_id="g1-c24", group_instance_id=None,
         offset=4700, epoch=10).wait(8)
    h.assign("g1-c24", "u24", 10, [], group=CG).assign("g1-c21", "u21", 10, [2, 3], group=CG).wait(5)
    for _ in range(4):
        h.fault("leader-flap", partition=3).wait(4)
    h.fault("controller-kill").wait(4.5)
    if coordinator_group is not None:
        h.op("coordinator", "member-removed", ends, group=coordinator_group, member="u3", client_id="g1-c3",
             group_instance_id=None, offset=4711, epoch=11)
    return h.assign("g1-c24", "u24", 11, [0, 1], group=CG).assign("g1-c21", "u21", 11, [2, 3], group=CG)


def _times(h: H) -> dict[str, float]:
    """When each completion (and fault) of ``h`` happened, the first of each kind."""
    out: dict[str, float] = {}
    for line in h.lines:
        if line["type"] != "invoke":
            name = line["f"] if line["f"] != "assign" else f"assign-{line['value']['generation']}"
            out.setdefault(name, line["time"])
    return out


def test_a_session_expiry_the_coordinator_recorded_late_is_the_new_epochs_cause():
    h = _r600d(CG)
    t = _times(h)
    assert round(t["member-removed"] - t["consumer-kill"], 1) == 35.0
    assert round(t["assign-10"] - t["consumer-kill"], 1) == 8.6
    assert t["assign-11"] > t["member-removed"]
    assert h.check().ok


def test_a_late_new_epoch_with_no_coordinator_record_is_a_violation():
    result = _r600d(None).check()
    assert invariants(result) == ["rebalance-on-failover"]
    v = result.violations[0]
    assert v.key == (CG, "", -1) and "member epoch 11" in v.message and "in the 7 s before it" in v.message
    assert "nor one its coordinator recorded since member epoch 10 was acknowledged at 49.400 s" in v.message
    # u24's join, recorded before epoch 10 was acknowledged, explains epoch 10, not epoch 11; nor is a
    # coordinator operation of unknown outcome a record.
    assert invariants(_r600d(CG, ends="info").check()) == ["rebalance-on-failover"]


def test_a_coordinator_record_of_another_group_is_no_cause():
    result = _r600d("chaos-group-0").check()
    assert invariants(result) == ["rebalance-on-failover"] and "member epoch 11" in result.violations[0].message


def _lost_by_the_coordinator(rejoin: bool) -> H:
    """Two live consumers of a classic group at generation 3; the coordinator fails over and loses them:
    it records both removed (and, with ``rejoin``, added again under new ids), and the group reaches
    generation 4 -- with no consumer killed, paused or stopped."""
    h = H().start("c1", group="g").start("c2", group="g")
    h.assign("c1", "m1", 3, [0], group="g").assign("c2", "m2", 3, [1], group="g").wait(40)
    h.fault("leader-flap", partition=0).wait(3)
    for member, client in (("m1", "c1"), ("m2", "c2")):
        h.op("coordinator", "member-removed", group="g", member=member, client_id=client, group_instance_id=None,
             offset=10, generation=4)
        if rejoin:
            h.op("coordinator", "member-added", group="g", member=member + "-again", client_id=client,
                 group_instance_id=None, offset=10, generation=4)
    return h.assign("c1", "m1-again", 4, [0], group="g").assign("c2", "m2-again", 4, [1], group="g")


def test_members_a_failover_lost_explain_nothing_whether_or_not_they_rejoin():
    for rejoin in (False, True):
        result = _lost_by_the_coordinator(rejoin).check()
        assert invariants(result) == ["rebalance-on-failover"], rejoin
        assert "generation 4" in result.violations[0].message
