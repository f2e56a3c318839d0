"""The shards' Prometheus series, scraped from Ray's metrics endpoint on the node (what an operator's
Prometheus sees): requests by API and error, commits, heartbeats, joins, rebalances, groups by state,
members, appends, the load, request latency per API."""

from __future__ import annotations

import pytest

from raygroups import Errors, partition_for
from tests.conditions import scrape_metrics, wait_for

pytestmark = pytest.mark.ray


def _series(name, **labels):
    """Values of ``name`` whose labels include ``labels`` (other tests' deployments share this Ray)."""
    return [v for n, lab, v in scrape_metrics() if n == name and all(lab.get(k) == x for k, x in labels.items())]


def test_shard_metrics_reach_the_prometheus_endpoint(cluster):
    cluster.create_topic("orders", 1)
    client = cluster.client()
    group = "metrics-g"
    p = str(partition_for(group, cluster.num_partitions))
    ns = cluster.namespace
    join = dict(group_id=group, protocol_type="consumer", protocols=[("range", b"")], session_timeout_ms=30_000,
                rebalance_timeout_ms=30_000)
    first = client.join_group(member_id="", **join).result(30)
    joined = client.join_group(member_id=first.member_id, **join).result(30)
    assert client.sync_group(group_id=group, generation_id=joined.generation_id, member_id=joined.member_id,
                             assignments={joined.member_id: b""}).result(30).error is Errors.NONE
    for i in range(5):
        assert client.heartbeat(group_id=group, generation_id=joined.generation_id,
                                member_id=joined.member_id).result(30).error is Errors.NONE
        client.commit_offsets(group_id=group, offsets={("orders", 0): (i, "")}, generation_id=joined.generation_id,
                              member_id=joined.member_id).result(30)
    client.commit_offsets(group_id=group, offsets={("nope", 0): (1, "")}, generation_id=joined.generation_id,
                          member_id=joined.member_id).result(30)

    def complete():
        return (sum(_series("ray_raygroups_offset_commits_total", namespace=ns, partition=p)) >= 5
                and sum(_series("ray_raygroups_heartbeats_total", namespace=ns, partition=p)) >= 5
                and sum(_series("ray_raygroups_rebalances_total", namespace=ns, partition=p)) >= 1
                and _series("ray_raygroups_groups", namespace=ns, partition=p, state="Stable") == [1.0]
                and _series("ray_raygroups_members", namespace=ns, partition=p) == [1.0]
                and sum(_series("ray_raygroups_request_latency_seconds_count", namespace=ns, partition=p,
                                api="OffsetCommit")) >= 6)

    wait_for(complete, timeout_s=90, interval_s=1, what="the shard's series on the metrics endpoint")
    assert sum(_series("ray_raygroups_requests_total", namespace=ns, partition=p, api="OffsetCommit",
                       error="UNKNOWN_TOPIC_OR_PARTITION")) == 0  # per-partition errors: the request succeeded
    assert sum(_series("ray_raygroups_requests_total", namespace=ns, partition=p, api="JoinGroup", error="MEMBER_ID_REQUIRED")) == 1
    assert sum(_series("ray_raygroups_append_latency_seconds_count", namespace=ns, partition=p)) >= 6
    assert sum(_series("ray_raygroups_appended_records_total", namespace=ns, partition=p)) >= 6
    # Per API: five heartbeats and six commits answered, each counted once in its own histogram.
    assert sum(_series("ray_raygroups_request_latency_seconds_count", namespace=ns, partition=p, api="Heartbeat")) == 5
    assert sum(_series("ray_raygroups_request_latency_seconds_count", namespace=ns, partition=p,
                       api="OffsetCommit")) == 6
    assert sum(_series("ray_raygroups_request_latency_seconds_count", namespace=ns, partition=p, api="JoinGroup")) == 2
    assert _series("ray_raygroups_shard_active", namespace=ns, partition=p, node="local") == [1.0]
    assert len(_series("ray_raygroups_load_seconds", namespace=ns, partition=p)) == 1
