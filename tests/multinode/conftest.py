"""A simulated 3-coordinator-node deployment for the module (about 10 s to start), with a spare per followed
partition (``shard.standby.per.partition``) and a Kafka listener on each node."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time

import pytest

from raygroups import Errors, partition_for
from tests.conditions import wait_for  # noqa: F401  (re-exported for the test modules)


@contextlib.contextmanager
def leader_balance_every(ms: int):
    """Deployments started inside run the controller's preferred-leader election every ``ms`` (10 s by
    default, not a config property): a test that waits for leadership to go back to the preferred replicas
    after a node's return waits that long at least."""
    from raygroups.deployment import start

    settings = start._settings
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(start, "_settings", lambda cfg: dataclasses.replace(settings(cfg), leader_balance_interval_ms=ms))
        yield


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    import ray

    from raygroups.deployment.start import start_local

    if ray.is_initialized():  # another module's single-node Ray: this module needs its own cluster
        ray.shutdown()
    c = start_local(num_partitions=4, num_nodes=3, data_dir=tmp_path_factory.mktemp("data"),
                    config={"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 10,
                            "request.timeout.ms": 30_000, "shard.standby.per.partition": True},
                    listeners="127.0.0.1:0")
    c.create_topic("orders", 1)
    yield c
    c.shutdown()


class Workload:
    """Continuous commits from several groups (one per partition at least) and a stable group whose
    member heartbeats throughout; records what was acknowledged and what was observed."""

    def __init__(self, cluster, name: str) -> None:
        self.cluster = cluster
        self.client = cluster.client()
        n = cluster.num_partitions
        self.groups = []
        for p in range(n):
            self.groups.append(next(g for g in (f"{name}-{p}-{i}" for i in range(1000)) if partition_for(g, n) == p))
        self.stable = self.groups[0]
        first = self._join("").result(60)
        assert first.error is Errors.MEMBER_ID_REQUIRED, first
        joined = self._join(first.member_id).result(60)
        assert joined.error is Errors.NONE, joined
        self.member, self.generation = joined.member_id, joined.generation_id
        synced = self.client.sync_group(group_id=self.stable, generation_id=self.generation, member_id=self.member,
                                        assignments={self.member: b"orders-0"}).result(60)
        assert synced.error is Errors.NONE, synced
        self.acked: dict[str, int] = {}
        self.observed: dict[str, list[int]] = {g: [] for g in self.groups}
        self.heartbeat_errors: list[Errors] = []
        self.commit_errors: list[Errors] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._commit_loop, args=(g,), daemon=True) for g in self.groups]
        self._threads.append(threading.Thread(target=self._heartbeat_loop, daemon=True))

    def _join(self, member_id):
        return self.client.join_group(group_id=self.stable, member_id=member_id, protocol_type="consumer",
                                      protocols=[("range", b"")], session_timeout_ms=30_000,
                                      rebalance_timeout_ms=30_000, client_id="chaos")

    def _commit_loop(self, group: str) -> None:
        offset = 0
        kw = {"generation_id": self.generation, "member_id": self.member} if group == self.stable else {}
        while not self._stop.is_set():
            offset += 1
            r = self.client.commit_offsets(group_id=group, offsets={("orders", 0): (offset, "")}, **kw).result(120)
            error = r.errors[("orders", 0)]
            if error is Errors.NONE:
                self.acked[group] = offset
            else:
                self.commit_errors.append(error)
                self._stop.wait(0.05)

    def _heartbeat_loop(self) -> None:
        while not self._stop.is_set():
            r = self.client.heartbeat(group_id=self.stable, generation_id=self.generation,
                                      member_id=self.member).result(120)
            self.heartbeat_errors.append(r.error)
            self._stop.wait(0.2)

    def observe(self) -> None:
        for g in self.groups:
            f = self.client.fetch_offsets(group_id=g, partitions=[("orders", 0)]).result(120)
            self.observed[g].append(f.offsets[("orders", 0)].offset)

    def __enter__(self) -> Workload:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(180)

    def progressed(self, since: dict[str, int], by: int = 3) -> bool:
        return all(self.acked.get(g, 0) >= since.get(g, 0) + by for g in self.groups)

    def check_invariants(self) -> None:
        """(1) every acknowledged commit is readable; (2) committed offsets never moved backwards;
        (3)+(4) the stable group kept its generation and was never asked to rebalance."""
        self.observe()
        for g in self.groups:
            fetched = self.observed[g][-1]
            assert fetched >= self.acked.get(g, 0), f"{g}: acknowledged {self.acked.get(g)} but fetched {fetched}"
            seen = self.observed[g]
            assert seen == sorted(seen), f"{g}: committed offsets moved backwards: {seen}"
        described = self.client.describe_groups([self.stable]).result(60)[0]
        assert described.group_state == "Stable", described
        assert [m.member_id for m in described.members] == [self.member]
        hb = self.client.heartbeat(group_id=self.stable, generation_id=self.generation, member_id=self.member)
        assert hb.result(60).error is Errors.NONE
        assert set(self.heartbeat_errors) <= {Errors.NONE}, set(self.heartbeat_errors)


def node_labels() -> dict[str, str]:
    """Ray node id -> the node's stable name (its raygroups.io/node label), alive nodes only."""
    import ray

    return {n["NodeID"]: n["Labels"].get("raygroups.io/node") for n in ray.nodes() if n["Alive"]}


def shard_placement_problems(cluster) -> list[str]:
    """What contradicts "exactly one shard serves each partition: the controller's leader, at its epoch,
    running on the Ray node that carries the leader's name" right now (empty when it holds)."""
    statuses = cluster.shard_status()
    labels = node_labels()
    problems = []
    for p in range(cluster.num_partitions):
        state = cluster.partition_state(p)
        status = statuses[p]
        if status["state"] != "ACTIVE" or status["node"] != state["leader"] or \
                status["leader_epoch"] != state["leader_epoch"]:
            problems.append(f"partition {p}: shard {status} vs controller {state}")
        elif labels.get(status["ray_node_id"]) != state["leader"]:
            problems.append(f"partition {p}: shard runs on {labels.get(status['ray_node_id'])}, not {state['leader']}")
    return problems


def check_one_shard_per_partition(cluster, timeout_s: float = 60) -> None:
    """(5) once leadership has settled (a preferred-leader move may be under way), exactly one shard
    serves each partition: the controller's leader, at its epoch, on its node (where its log is)."""
    last: list[str] = []

    def settled() -> bool:
        last[:] = shard_placement_problems(cluster)
        return not last

    try:
        wait_for(settled, timeout_s=timeout_s, interval_s=0.2, what="one shard per partition")
    except AssertionError:
        raise AssertionError("; ".join(last)) from None


def check_followers_match_leader(cluster) -> None:
    """(6) every in-sync follower's log equals the leader's log (quiescent, so up to the high watermark).
    Read on a settled leadership and a still log: a read that a leadership move interrupts, or during which
    the leader appended (the coordinator's own records, such as an earlier test's session expiring, come
    whenever they are due), is taken again."""
    import ray

    for p in range(cluster.num_partitions):
        replicas = None
        for _ in range(20):
            check_one_shard_per_partition(cluster)
            state = cluster.partition_state(p)
            try:
                before = cluster.replica_records(p, state["leader"])
                read = {n: cluster.replica_records(p, n) for n in state["isr"]}
                after = cluster.replica_records(p, state["leader"])
            except ray.exceptions.RayError:
                continue
            if cluster.partition_state(p)["leader_epoch"] == state["leader_epoch"] and before == after:
                replicas = read
                break
            time.sleep(0.2)
        assert replicas is not None, f"partition {p}: no stable leadership to compare its replicas under"
        leader_records = replicas[state["leader"]]
        for node, records in replicas.items():
            assert records == leader_records, f"partition {p} replica on {node}"
