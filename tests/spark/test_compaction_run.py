"""raygroups.compaction.run on the embedded default: committed offsets read through the client are the same
before compaction, after it, after the shard replays its compacted log, and in the Parquet snapshot."""

from __future__ import annotations

import os

import pytest
from raygroups.coordinator.errors import Errors

pytestmark = [pytest.mark.spark, pytest.mark.slow]
CONFIG = {"offsets.topic.segment.bytes": 2048, "group.initial.rebalance.delay.ms": 0}
GROUPS = [f"pipeline-{i}" for i in range(6)]


@pytest.fixture(scope="module")
def env(spark, tmp_path_factory):
    from raygroups import start_local

    cluster = start_local(num_partitions=2, data_dir=tmp_path_factory.mktemp("data"), config=CONFIG,
                          namespace="compaction-test")
    cluster.create_topic("events", 4)
    yield cluster, spark
    cluster.shutdown()


def _commit_rounds(client, rounds: int, start: int = 0) -> None:
    for r in range(start, start + rounds):
        for g in GROUPS:
            response = client.commit_offsets(
                group_id=g, offsets={("events", p): (r * 10 + p, f"r{r}") for p in range(4)}).result(30)
            assert set(response.errors.values()) == {Errors.NONE}


def _fetch_all(client) -> dict:
    out = {}
    for g in GROUPS:
        response = client.fetch_offsets(group_id=g).result(30)
        assert response.error is Errors.NONE
        out[g] = {tp: (po.offset, po.metadata) for tp, po in response.offsets.items()}
    return out


def test_compaction_keeps_every_committed_offset_and_shrinks_the_log(env):
    from raygroups import compaction
    from raygroups.compaction import read_snapshot
    from tests.conditions import wait_for

    cluster, spark = env
    client = cluster.client()
    _commit_rounds(client, 40)
    assert client.delete_groups([GROUPS[-1]]).result(30) == {GROUPS[-1]: Errors.NONE}
    before = _fetch_all(client)

    report = compaction.run(cluster, spark=spark)
    assert report.ok, report.to_dict()
    rows = {r["partition"]: r for r in report.partitions}
    assert set(rows) == {0, 1}
    compacted = [r for r in rows.values() if r["segments_in"] > 0]
    assert compacted, "the commits should have closed segments on some partition"
    for r in compacted:
        assert r["equivalent"] and r["swapped"]
        assert r["records_out"] < r["records_in"] and r["bytes_out"] < r["bytes_in"]
        assert r["segments_out"] == r["segments_in"]
    assert _fetch_all(client) == before

    # A shard that restarts replays its compacted log to the same offsets.
    for p in (0, 1):
        cluster.kill_shard(p)
    cluster.wait_ready()
    wait_for(lambda: _fetch_all(client) == before, timeout_s=60, what="offsets after the shards replayed")

    # The snapshot holds exactly the committed offsets the client sees.
    table = read_snapshot(None, report.snapshot_path).to_pylist()
    snap: dict = {}
    for row in table:
        snap.setdefault(row["group_id"], {})[(row["topic"], row["partition"])] = (row["offset"], row["metadata"])
    assert {g: v for g, v in before.items() if v} == snap
    assert read_snapshot(spark, report.snapshot_path).count() == len(table)

    # More commits, then a second run: it compacts the new closed segments and the old ones again.
    _commit_rounds(client, 10, start=40)
    after_more = _fetch_all(client)
    again = compaction.run(cluster, spark=spark, partitions=[0, 1])
    assert again.ok, again.to_dict()
    assert _fetch_all(client) == after_more


def test_a_corrupt_stored_segment_stops_its_partition_only_and_the_next_run_repairs_it(env):
    import ray

    from raygroups import compaction

    cluster, spark = env
    client = cluster.client()
    _commit_rounds(client, 30, start=100)
    expected = _fetch_all(client)
    uri = compaction.default_storage_uri(cluster)
    # The leader uploads (as a run would) and the stored copy of one new segment rots in the store.
    uploaded = ray.get(cluster.shard(0).compaction_upload.remote(uri, "manual"), timeout=60)
    name = uploaded["segments"][-1][0]
    path = os.path.join(uri, "0", name)
    with open(path, "r+b") as f:
        f.seek(30)
        byte = f.read(1)
        f.seek(30)
        f.write(bytes([byte[0] ^ 0xFF]))
    local = os.path.join(cluster.data_dir, "__consumer_offsets-0", name)
    local_bytes = open(local, "rb").read()

    report = compaction.run(cluster, spark=spark)
    rows = {r["partition"]: r for r in report.partitions}
    assert not report.ok and not rows[0]["ok"] and not rows[0]["swapped"]
    assert f"stored segment {name} of partition 0 fails its CRC" in rows[0]["error"]
    assert rows[1]["ok"]
    assert open(local, "rb").read() == local_bytes  # partition 0's log was not touched
    assert _fetch_all(client) == expected

    repaired = compaction.run(cluster, spark=spark)
    assert repaired.ok, repaired.to_dict()
    assert _fetch_all(client) == expected


def test_a_partition_without_an_equivalence_proof_is_not_swapped(env, monkeypatch):
    from raygroups import compaction
    from raygroups.compaction import job

    cluster, spark = env
    client = cluster.client()
    _commit_rounds(client, 30, start=200)
    expected = _fetch_all(client)
    proofs = job.check_equivalence
    # The proof of every partition but 0 comes back.
    monkeypatch.setattr(job, "check_equivalence", lambda *a, **k: {p: d for p, d in proofs(*a, **k).items() if p})
    report = compaction.run(cluster, spark=spark)
    rows = {r["partition"]: r for r in report.partitions}
    assert rows[0]["segments_in"] > 0, "the commits should have closed segments on partition 0"
    assert not report.ok and not rows[0]["ok"] and not rows[0]["swapped"] and not rows[0]["equivalent"]
    assert rows[0]["error"] == "no equivalence proof came back for this partition; nothing was swapped"
    assert rows[1]["ok"] and (rows[1]["swapped"] or not rows[1]["segments_in"])
    assert _fetch_all(client) == expected


def test_bad_arguments_are_refused_before_anything_runs(env):
    from raygroups import compaction

    cluster, spark = env
    with pytest.raises(ValueError, match="partitions"):
        compaction.run(cluster, spark=spark, partitions=[2])
    with pytest.raises(ValueError, match="at least one"):
        compaction.run(cluster, spark=spark, partitions=[])
    with pytest.raises(TypeError, match="storage_uri"):
        compaction.run(cluster, spark=spark, storage_uri=3)


def test_watch_rounds_compact_only_partitions_at_least_as_dirty_as_the_ratio(env, capsys):
    """The watch mode (``raygroups compact --every``): new closed segments make the compacted partitions
    dirty again and the first round compacts them; in the second round they are clean (dirty ratio below
    min.cleanable.dirty.ratio) and left as they are, but their offsets still go to the round's snapshot."""
    import json

    from raygroups import compaction
    from raygroups.cli.compact import watch_rounds

    cluster, _spark = env
    client = cluster.client()
    _commit_rounds(client, 30, start=300)  # new closed segments: far more dirty than compacted bytes
    expected = _fetch_all(client)
    capsys.readouterr()
    assert watch_rounds(cluster, None, None, True, False, 1.0, 0.5, 2) == 0
    out, err = capsys.readouterr()
    first, second = (json.loads(line) for line in out.strip().splitlines())
    # With --json, the progress is JSON lines on stderr, a machine's to follow (a chaos run strikes on them).
    steps = [json.loads(line) for line in err.strip().splitlines()]
    assert steps[0] == {"step": "spark", "done": 0, "total": 1}
    assert {"step": "compact", "done": 3, "total": 3} in steps  # the first round's proof
    # Then the partitions whose proof held, about to be swapped: every one in the first round, none in the second.
    proved = [s["proved"] for s in steps if s["step"] == "swap" and s["done"] == 0]
    assert proved == [[0, 1], []]
    assert [s["step"] for s in steps].count("spark") == 4 and steps[-1]["step"] == "swap"
    assert all(r["swapped"] and r["dirty_ratio"] >= 0.5 for r in first["partitions"]), first["partitions"]
    for row in second["partitions"]:
        assert row["ok"] and not row["swapped"] and row["dirty_ratio"] < 0.5 and row["records_in"] == 0, row
        assert row["skipped"] and row["note"].startswith("clean: dirty ratio")
    assert _fetch_all(client) == expected
    snapshot: dict = {}
    for row in compaction.read_snapshot(None, second["snapshot_path"]).to_pylist():
        snapshot.setdefault(row["group_id"], {})[(row["topic"], row["partition"])] = (row["offset"], row["metadata"])
    assert snapshot == {g: v for g, v in expected.items() if v}


def test_a_watch_round_past_its_round_timeout_fails_and_changes_nothing(env, capsys):
    """``--round-timeout``: a round still running at its deadline has its Spark jobs cancelled and stops at
    its next step, reported in one line; the offsets are as they were."""
    import json

    from raygroups.cli.compact import watch_rounds

    cluster, _spark = env
    client = cluster.client()
    expected = _fetch_all(client)
    capsys.readouterr()
    assert watch_rounds(cluster, None, None, True, False, 1.0, 0.0, 1, round_timeout_s=0.001) == 1
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert json.loads(line) == {"ok": False, "error": "TimeoutError: the round ran past --round-timeout; its Spark "
                                                      "jobs were cancelled"}
    assert _fetch_all(client) == expected
