"""The chaos report on hand-made histories: availability and failover times come from the availability
probes' commits (not the consumers'), the consumers' first commit and commit gaps are kept beside them,
a full restart is a recovery and not a failover, every figure is given per fault type, and the pictures
are drawn (a zoomed timeline too when there are many faults). Also the probes' groups and the client's
retry jitter (KIP-580)."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

from raygroups.coordinator.partitioning import partition_for

from raygroups.chaos import check
from raygroups.chaos.history import pair_events, parse_event
from raygroups.chaos.nemesis import Disruption
from raygroups.chaos.report import (
    MAX_FAULT_LINES,
    build_report,
    failovers,
    plot_failover_cdf,
    plot_timeline,
    unavailable_windows,
)
from raygroups.chaos.workload import AVAILABILITY_PROCESS, TOPIC, availability_group
from raygroups.client.ray_client import _BACKOFF_MAX_S, BACKOFF_JITTER, jittered

PARTITIONS = 4
PROBE = f"{AVAILABILITY_PROCESS}1"


def consumer_group(partition: int) -> str:
    return next(g for g in (f"orders-{i}" for i in range(1000)) if partition_for(g, PARTITIONS) == partition)


class Timeline:
    """A history with explicit times (events are sorted by time when read)."""

    def __init__(self) -> None:
        self.lines: list[dict] = []

    def op(self, process: str, f: str, start: float, end: float, ends: str = "ok", **value) -> Timeline:
        self.lines.append({"time": start, "process": process, "type": "invoke", "f": f, "value": value})
        self.lines.append({"time": end, "process": process, "type": ends, "f": f, "value": value})
        return self

    def probe_commit(self, start: float, end: float, ends: str = "ok", offset: int = 1, partition: int = 1):
        return self.op(f"{AVAILABILITY_PROCESS}{partition}", "commit", start, end, ends,
                       group=availability_group(partition, PARTITIONS), topic=TOPIC, partition=0, offset=offset)

    def consumer_commit(self, start: float, end: float, ends: str = "ok", offset: int = 1, partition: int = 1):
        return self.op("g0-c0", "commit", start, end, ends, group=consumer_group(partition), topic=TOPIC,
                       partition=0, offset=offset, generation=1, member="m0")

    def fault(self, at: float, name: str, **target) -> Timeline:
        self.lines.append({"time": at, "process": "nemesis", "type": "info", "f": name, "value": target})
        return self

    def history(self):
        ordered = sorted(self.lines, key=lambda e: e["time"])
        return pair_events(parse_event(json.dumps(e), n) for n, e in enumerate(ordered, 1))


def node_kill_then_full_restart() -> tuple[Timeline, SimpleNamespace]:
    """A node kill at 10 s (partition 1's new leader started at 11 s) and a full restart at 30 s."""
    t = Timeline()
    t.probe_commit(9.8, 9.85, offset=1)
    t.fault(10.0, "node-kill", node="coordinator-1")
    t.consumer_commit(10.2, 12.5, "info", offset=5)      # the consumer's commit timed out in the failover
    t.probe_commit(10.0, 12.0, "info", offset=2)          # the probe's too
    t.probe_commit(12.0, 12.1, offset=3)                  # the first only the new leader can have served
    t.consumer_commit(15.0, 15.05, offset=6)              # the consumers came back later (a rebalance, say)
    t.fault(30.0, "full-restart")
    t.probe_commit(30.0, 32.0, "info", offset=4)
    t.probe_commit(32.0, 38.0, "fail", offset=5)          # a probe's failed commit is unavailability too
    t.probe_commit(38.0, 40.5, offset=6)
    t.consumer_commit(39.0, 39.1, "fail", offset=7)       # a consumer's refused commit was served
    t.consumer_commit(41.0, 41.1, offset=8)
    nemesis = SimpleNamespace(skipped={}, errors=[], disruptions=[
        Disruption("node-kill", 10.0, [1], breakdown={1: {"detection_s": 0.5, "election_s": 0.4, "load_s": 0.1,
                                                         "served_from": 11.0}}),
        Disruption("full-restart", 30.0, [1], breakdown={1: {"served_from": 37.0}}),
    ])
    return t, nemesis


def test_failover_time_is_the_probes_first_commit_that_only_the_new_leader_can_have_served():
    t, nemesis = node_kill_then_full_restart()
    kill, restart = failovers(t.history(), nemesis, PARTITIONS)
    assert kill == {"fault": "node-kill", "time": 10.0, "partition": 1, "total_s": 2.1, "consumers_s": 5.05,
                    "detection_s": 0.5, "election_s": 0.4, "load_s": 0.1, "rediscovery_s": 1.1}
    assert restart["total_s"] == 10.5 and restart["consumers_s"] == 11.1 and restart["detection_s"] is None


def test_a_partition_no_probe_commit_served_within_the_horizon_is_unserved():
    t = Timeline().probe_commit(1.0, 1.1).fault(2.0, "shard-kill", partition=1).probe_commit(2.0, 200.0, offset=2)
    nemesis = SimpleNamespace(disruptions=[Disruption("shard-kill", 2.0, [1], breakdown={1: {"served_from": 3.0}})])
    (row,) = failovers(t.history(), nemesis, PARTITIONS)
    assert row["total_s"] is None and row["consumers_s"] is None and row["rediscovery_s"] is None


def test_unavailability_is_the_probes_and_the_consumers_gaps_are_kept_apart():
    history = node_kill_then_full_restart()[0].history()
    # The probe: from the timed-out commit to the first served one invoked since; a failed one counts.
    assert unavailable_windows(history, PARTITIONS) == {1: [[10.0, 12.1], [30.0, 40.5]]}
    # The consumers: their timed-out commit until their next served one; a refused commit was served.
    gaps = unavailable_windows(history, PARTITIONS, keep=lambda op: "member" in op.invoke.value)
    assert gaps == {1: [[10.2, 15.05]]}


def test_the_report_gives_failovers_per_fault_type_and_a_full_restart_as_a_recovery(tmp_path):
    t, nemesis = node_kill_then_full_restart()
    t.op("g0-c0", "commit", 50.0, 50.1, group=consumer_group(2), topic=TOPIC, partition=0, offset=1,
         generation=1, member="m0")
    history = t.history()
    report = build_report(history, check(history), nemesis, SimpleNamespace(availability_interval_s=0.2), 5.0,
                          {"coordinator_partitions": PARTITIONS, "group_partitions": {"g": 1}})
    failover, recovery = report["failover"], report["recovery"]
    assert failover["total_s"] == {"count": 1, "p50": 2.1, "p99": 2.1, "max": 2.1}
    assert failover["consumers_s"]["max"] == 5.05 and failover["unserved"] == 0
    assert list(failover["by_fault"]) == ["node-kill"] and failover["by_fault"]["node-kill"]["total_s"]["count"] == 1
    assert recovery["total_s"]["max"] == 10.5 and list(recovery["by_fault"]) == ["full-restart"]
    assert report["unavailability_s"] == {"1": 12.6}
    assert report["consumer_commit_gaps_s"] == {"1": 4.85}
    assert report["availability_probe"]["commits"] == {"ok": 3, "info": 2, "fail": 1}
    assert report["availability_probe"]["interval_s"] == 0.2
    # The workload's commit figures leave the probes' out: 3 consumer commits served.
    assert report["commits"]["ok"] == 3 and report["ok"]
    plot_timeline(history, report, str(tmp_path / "timeline.png"))
    plot_failover_cdf(report, str(tmp_path / "failover-cdf.png"))
    assert (tmp_path / "timeline.png").stat().st_size > 10_000
    assert (tmp_path / "failover-cdf.png").stat().st_size > 10_000
    assert not (tmp_path / "timeline-zoom.png").exists()  # two faults: every one is a line already


def test_a_run_with_many_faults_also_gets_a_zoomed_timeline(tmp_path):
    t = Timeline()
    for i in range(MAX_FAULT_LINES + 5):
        t.probe_commit(i * 3.0, i * 3.0 + 0.05, offset=i + 1)
        t.fault(i * 3.0 + 1, "consumer-kill", group="g")
    history = t.history()
    report = build_report(history, check(history), SimpleNamespace(skipped={}, errors=[], disruptions=[]),
                          SimpleNamespace(), 0.0, {"coordinator_partitions": PARTITIONS})
    assert report["failover"]["total_s"]["count"] == 0 and report["recovery"]["events"] == []
    plot_timeline(history, report, str(tmp_path / "timeline.png"))
    assert (tmp_path / "timeline-zoom.png").stat().st_size > 10_000


def test_each_coordinator_partition_has_its_own_probe_group():
    groups = [availability_group(p, 8) for p in range(8)]
    assert [partition_for(g, 8) for g in groups] == list(range(8)) and len(set(groups)) == 8
    assert availability_group(3, 8) == availability_group(3, 8)  # stable across runs


def test_retry_backoff_is_jittered_within_kip_580s_bounds_and_capped():
    rng = random.Random(7)
    waits = [jittered(0.04, rng) for _ in range(500)]
    assert min(waits) >= 0.04 * (1 - BACKOFF_JITTER) and max(waits) <= 0.04 * (1 + BACKOFF_JITTER)
    assert len(set(waits)) > 400  # no two clients retry in lockstep
    assert max(jittered(_BACKOFF_MAX_S, rng) for _ in range(100)) == _BACKOFF_MAX_S  # never above the cap


def test_a_leader_flap_is_one_fault_of_three_failovers_and_the_plan_is_reported():
    t = Timeline()
    for i, at in enumerate((10.0, 14.0, 18.0)):
        t.fault(at, "leader-flap", partition=1, **({"continues": True} if i else {}))
        t.probe_commit(at + 1, at + 1.1, offset=i + 1)
    history = t.history()
    nemesis = SimpleNamespace(skipped={}, errors=[], disruptions=[
        Disruption("leader-flap", at, [1], breakdown={1: {"served_from": at + 0.5}}) for at in (10.0, 14.0, 18.0)])
    report = build_report(history, check(history), nemesis, SimpleNamespace(), 5.0,
                          {"coordinator_partitions": PARTITIONS, "faults_planned": {"leader-flap": 2}})
    assert report["faults_injected"] == 1 and report["faults"] == {"leader-flap": 1}
    assert report["faults_planned"] == {"leader-flap": 2}  # the second was not reached
    assert report["failover"]["by_fault"]["leader-flap"]["total_s"]["count"] == 3


def test_a_failover_disrupted_again_before_its_first_commit_is_interrupted_not_timed_twice():
    """A leader flap's first kill (10 s): its successor serves at 10.5 s and is killed at 11 s, before a
    probe commit reached it; the first commit (13.1 s) is the third leader's. The first row is interrupted
    (no time), the second is 2.1 s, and neither is unserved."""
    t = Timeline().probe_commit(9.0, 9.1, offset=1)
    t.fault(10.0, "leader-flap", partition=1).fault(11.0, "leader-flap", partition=1, continues=True)
    t.probe_commit(10.0, 13.0, "info", offset=2)
    t.probe_commit(13.0, 13.1, offset=3)
    t.consumer_commit(12.0, 14.0, offset=4)
    history = t.history()
    nemesis = SimpleNamespace(skipped={}, errors=[], disruptions=[
        Disruption("leader-flap", 10.0, [1], breakdown={1: {"detection_s": 0.2, "election_s": 0.3,
                                                           "served_from": 10.5}}),
        Disruption("leader-flap", 11.0, [1], breakdown={1: {"detection_s": 0.3, "election_s": 0.4,
                                                           "served_from": 11.7}}),
        Disruption("shard-kill", 12.0, [2], breakdown={2: {"served_from": 12.5}}),  # another partition
    ])
    first, second, _ = failovers(history, nemesis, PARTITIONS)
    assert first["total_s"] is None and first["interrupted_by"] == "leader-flap"
    assert first["consumers_s"] is None and first["rediscovery_s"] is None and first["detection_s"] == 0.2
    assert second["total_s"] == 2.1 and second["consumers_s"] == 3.0 and "interrupted_by" not in second
    report = build_report(history, check(history), nemesis, SimpleNamespace(), 5.0,
                          {"coordinator_partitions": PARTITIONS})
    flap = report["failover"]["by_fault"]["leader-flap"]
    assert flap["total_s"]["count"] == 1 and flap["interrupted"] == 1 and flap["unserved"] == 0
    # partition 2 had no probe commit at all: unserved, not interrupted (no later fault of its own)
    assert report["failover"]["interrupted"] == 1 and report["failover"]["unserved"] == 1


def test_a_partition_disrupted_again_but_never_served_within_the_horizon_is_still_unserved():
    t = Timeline().fault(2.0, "shard-kill", partition=1).fault(3.0, "shard-kill", partition=1)
    t.probe_commit(2.0, 200.0, "info", offset=2)
    nemesis = SimpleNamespace(disruptions=[Disruption("shard-kill", at, [1], breakdown={1: {"served_from": at + .5}})
                                           for at in (2.0, 3.0)])
    rows = failovers(t.history(), nemesis, PARTITIONS)
    assert [r["total_s"] for r in rows] == [None, None] and not any("interrupted_by" in r for r in rows)
