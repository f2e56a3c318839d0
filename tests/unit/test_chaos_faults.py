"""The chaos run's fault catalogue and seeded schedule (pure)."""

from __future__ import annotations

import pytest

from raygroups.chaos.faults import (
    CATALOGUE,
    HOST_FAULTS,
    SIMULATED_FAULTS,
    faults_for,
    parse_faults,
    schedule,
)


def test_a_seed_gives_the_same_schedule_and_another_seed_another():
    faults = faults_for(replicated=True)
    a = schedule(7, 600, 12, faults, groups=3)
    assert a == schedule(7, 600, 12, faults, groups=3)
    assert a != schedule(8, 600, 12, faults, groups=3)
    assert 80 <= len(a) <= 160  # 12 per minute for 10 minutes, Poisson
    assert all(0 < x.at < 600 for x in a) and [x.at for x in a] == sorted(x.at for x in a)
    assert {x.name for x in a} == set(faults)  # every fault of the catalogue comes up in a long enough run
    assert all(0 <= x.group < 3 for x in a)
    pauses = [x.duration for x in a if x.name == "leader-pause"]
    assert pauses and all(4.0 <= d <= 7.0 for d in pauses)
    outages = [x.duration for x in a if x.name == "head-restart"]
    assert outages and all(3.0 <= d <= 8.0 for d in outages)  # the head's GCS down for seconds, not a blip


def test_a_subset_and_the_single_node_catalogue():
    assert {x.name for x in schedule(1, 300, 30, ["shard-kill", "consumer-kill"], 2)} == {"shard-kill", "consumer-kill"}
    single = faults_for(replicated=False)
    assert "node-kill" not in single and "shard-kill" in single and "leader-pause" in single
    assert set(faults_for(replicated=True, compaction=True)) == set(CATALOGUE) - set(HOST_FAULTS)
    assert schedule(1, 60, 12, [], 3) == []


def test_the_hosts_catalogue_has_links_and_whole_hosts_and_not_a_simulated_nodes_disk():
    hosts = faults_for(replicated=True, hosts=True)
    assert set(HOST_FAULTS) <= set(hosts) and "node-kill" in hosts and "controller-kill" in hosts
    assert not set(SIMULATED_FAULTS) & set(hosts)
    assert not set(HOST_FAULTS) & set(faults_for(replicated=True, compaction=True))
    pauses = [x.duration for x in schedule(3, 600, 30, ["host-pause"], 2)]
    assert pauses and all(4.0 <= d <= 7.0 for d in pauses)  # longer than Ray's detection of a silent node
    isolations = [x.duration for x in schedule(3, 600, 30, ["head-isolate"], 2)]
    assert isolations and all(3.0 <= d <= 8.0 for d in isolations)  # as long as a head-restart's outage
    assert parse_faults("leader-isolate,node-kill", True, hosts=True) == ["node-kill", "leader-isolate"]
    with pytest.raises(ValueError, match="fault 'host-partition' needs real hosts"):
        parse_faults("host-partition", True)
    with pytest.raises(ValueError, match="fault 'disk-full' needs a simulated cluster"):
        parse_faults("disk-full", True, hosts=True)


def test_parse_faults():
    assert parse_faults(None, True, compaction=True) == [f for f in CATALOGUE if f not in HOST_FAULTS]
    assert parse_faults("all", False) == faults_for(False)
    assert parse_faults("node-kill, shard-kill,node-kill", True) == ["shard-kill", "node-kill"]
    assert parse_faults("head-restart,node-kill", True) == ["node-kill", "head-restart"]
    with pytest.raises(ValueError, match="fault 'head-restart' needs a replicated deployment"):
        parse_faults("head-restart", False)
    with pytest.raises(ValueError, match="unknown fault 'disk-melt'"):
        parse_faults("shard-kill,disk-melt", True)
    with pytest.raises(ValueError, match="needs a replicated deployment"):
        parse_faults("node-kill", False)
    with pytest.raises(ValueError, match="names no fault"):
        parse_faults(" , ", True)


def test_group_protocols_of_a_run():
    from raygroups.chaos.run import coordinator_config, group_protocols

    groups = ["g0", "g1", "g2"]
    assert group_protocols(groups, "mixed") == {"g0": "classic", "g1": "consumer", "g2": "classic"}
    assert set(group_protocols(groups, "consumer").values()) == {"consumer"}
    assert set(group_protocols(groups, "classic").values()) == {"classic"}
    with pytest.raises(ValueError, match="group protocol must be one of classic, consumer, mixed, got 'eager'"):
        group_protocols(groups, "eager")
    # A consumer-protocol group's session is the coordinator's: the run gives it the classic consumers' own.
    config = coordinator_config({}, session_timeout_ms=8_000)
    assert config["group.consumer.session.timeout.ms"] == 8_000
    assert config["group.consumer.heartbeat.interval.ms"] == 1_000
