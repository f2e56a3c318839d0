"""Compaction outlives the Ray cluster its Spark session started on: with the Spark modules' session up, a
deployment is shut down with its Ray, another Ray and a second deployment start in the same process, and
``compaction.run`` on it starts a new Spark session by itself (the first one's JVM and Spark master went with
the first Ray) and keeps every committed offset. Last of the Spark modules: it restarts the Ray they share."""

from __future__ import annotations

import logging

import pytest
from raygroups.coordinator.errors import Errors

pytestmark = [pytest.mark.spark, pytest.mark.slow]
CONFIG = {"offsets.topic.segment.bytes": 2048, "group.initial.rebalance.delay.ms": 0}
GROUPS = [f"app-{i}" for i in range(4)]


def _fill(cluster) -> dict:
    cluster.create_topic("events", 4)
    client = cluster.client()
    for r in range(30):
        futures = [client.commit_offsets(group_id=g, offsets={("events", p): (r * 10 + p, f"r{r}") for p in range(4)})
                   for g in GROUPS]
        for f in futures:
            assert set(f.result(30).errors.values()) == {Errors.NONE}
    return _fetch_all(client)


def _fetch_all(client) -> dict:
    return {g: {tp: (po.offset, po.metadata) for tp, po in client.fetch_offsets(group_id=g).result(30).offsets.items()}
            for g in GROUPS}


def _compacted(cluster) -> None:
    from raygroups import compaction

    report = compaction.run(cluster)  # no session given: the process's own, started or reused by the run
    assert report.ok, report.to_dict()
    assert any(r["segments_in"] > 0 and r["swapped"] for r in report.partitions), report.to_dict()


def test_a_second_deployment_on_a_restarted_ray_is_compacted_with_a_new_session(spark, tmp_path):
    import ray

    from raygroups import start_local
    from raygroups.compaction.spark_session import spark_session, stop_spark_session

    first = start_local(num_partitions=2, data_dir=tmp_path / "first", config=CONFIG, namespace="first")
    try:
        _fill(first)
        assert spark_session() is spark  # the same Ray: the warm session is the one a run would use
    finally:
        first.shutdown()

    # The Ray the session runs on goes away, and another starts in this process.
    ray.shutdown()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    second = start_local(num_partitions=2, data_dir=tmp_path / "second", config=CONFIG, namespace="second")
    try:
        before = _fill(second)
        _compacted(second)
        renewed = spark_session()
        assert renewed is not spark and renewed.range(3).count() == 3
        assert _fetch_all(second.client()) == before
    finally:
        second.shutdown()

    # Its Ray gone too, the session is let go without a call that would start a new local Ray.
    ray.shutdown()
    stop_spark_session()
    assert not ray.is_initialized()
