"""KIP-848 with clients: ``raygroups.Consumer`` members against a real shard (a single-node Ray, one
``__consumer_offsets`` partition), the consumer protocol against the classic one in the same run.

* "10 consumers, the topic grows by 900 partitions" (Kafka's published case: 5 s with KIP-848 against
  103 s classic). Ten consumers, each with its heartbeat thread and an application thread that polls and
  then processes a batch: nine take 1 s per batch, one takes 20 s. The topic grows from 100 to 1 000
  partitions; from then on the partitions that have an owner are sampled every 50 ms until all 1 000 have
  one. Figures: seconds until 90 % of the added partitions and until all 1 000 are owned, and the
  partition-seconds without an owner (what the change cost the application). Kafka's defaults otherwise: classic heartbeats every 3 s,
  the coordinator's consumer-protocol interval 5 s. The classic group uses ``cooperative-sticky`` (its
  members keep their partitions through the rebalance) and its leader reads topic metadata every second
  (Kafka's ``metadata.max.age.ms`` is 300 s: the classic figure would be up to 5 minutes longer).
* The 1 000-member rebalance: a group of 1 000 consumers over 1 000 partitions forms, then one member
  leaves, then one joins; seconds until every partition has exactly one owner and every member holds its
  share, and how many members took part (classic: every member rejoins; consumer protocol: only those
  whose assignment changes reconcile). Here the members have no threads: one loop polls them all (each
  ``poll(0)`` sends the heartbeat that is due and takes what was answered), so that 1 000 of them fit a
  2-core machine; one pass over them is reported beside the figures, as it bounds how soon a member
  notices an answer.
* Heartbeats answered per second by one shard, closed loop from this process (64 in flight, cycling
  through the 1 000 members of each group): the classic Heartbeat and the consumer protocol's
  ConsumerGroupHeartbeat (with what the member owns, as our consumer sends it), against the rate of no-op
  calls to the same shard at the same concurrency.

Writes ``bench/results/kip848-clients.json``. Run: ``.venv/bin/python bench/kip848_clients.py``
(about 6 minutes).
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ray  # noqa: E402

from raygroups.chaos.run import quiet_output  # noqa: E402
from raygroups.client.consumer import Consumer  # noqa: E402
from raygroups.deployment.start import start_local  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
PROTOCOLS = ("classic", "consumer")
# Kafka's defaults, but for the initial delay (the classic group's first rebalance would wait 3 s more).
CONFIG = {"group.initial.rebalance.delay.ms": 0}
CLASSIC = {"assignors": ("cooperative-sticky",), "session_timeout_ms": 45_000, "heartbeat_interval_ms": 3_000}


_TERMINAL = [sys.stdout]  # the real terminal while Ray's output goes to a log


def _say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=_TERMINAL[0], flush=True)


def _consumer(cluster, group: str, topic: str, protocol: str, **kw) -> Consumer:
    options = dict(CLASSIC) if protocol == "classic" else {}
    return Consumer(cluster, group, [topic], group_protocol=protocol, enable_auto_commit=False,
                    max_poll_interval_ms=300_000, **options, **kw)


def _owners(consumers) -> tuple[int, bool]:
    """Partitions that have an owner, and whether no partition has two."""
    owned = [c.assignment() for c in consumers]
    union = frozenset().union(*owned)
    return len(union), sum(map(len, owned)) == len(union)


def _balanced(consumers) -> bool:
    sizes = [len(c.assignment()) for c in consumers]
    return max(sizes) - min(sizes) <= 1


# --- "10 consumers, the topic grows by 900 partitions" -----------------------------------------------
def topic_grows(cluster, protocol: str, before: int = 100, after: int = 1_000,
                batch_s: tuple[float, ...] = (1.0,) * 9 + (20.0,)) -> dict:
    topic, group = f"grows-{protocol}", f"grows-{protocol}"
    cluster.create_topic(topic, before)
    stop = threading.Event()
    consumers: list[Consumer] = []

    def app(c: Consumer, seconds: float) -> None:
        while not stop.is_set():
            if c.poll(0.1):
                stop.wait(seconds)  # processing the batch this poll returned

    threads = []
    for i, seconds in enumerate(batch_s):  # the slow member last: a fast one leads the classic group
        c = _consumer(cluster, group, topic, protocol, client_id=f"c{i}", metadata_max_age_ms=1_000)
        consumers.append(c)
        threads.append(threading.Thread(target=app, args=(c, seconds), daemon=True))
        threads[-1].start()
        time.sleep(0.2)
    deadline = time.monotonic() + 180
    while _owners(consumers) != (before, True) or not _balanced(consumers):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{protocol}: the group of {len(consumers)} did not form")
        time.sleep(0.1)
    time.sleep(3.0)
    cluster.create_topic(topic, after)
    grown = time.monotonic()
    samples: list[tuple[float, int]] = []
    while True:
        owned, exclusive = _owners(consumers)
        assert exclusive, f"{protocol}: a partition has two owners"
        samples.append((time.monotonic() - grown, owned))
        if owned == after or samples[-1][0] > 300:
            break
        time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    for c in consumers:
        c.close()
    unowned = sum((b[0] - a[0]) * (after - a[1]) for a, b in zip(samples, samples[1:], strict=False))
    t90 = next(t for t, n in samples if n >= before + 0.9 * (after - before))
    return {"protocol": protocol, "consumers": len(batch_s), "batch_s": sorted(set(batch_s)),
            "partitions_before": before, "partitions_after": after,
            "all_owned_s": round(samples[-1][0], 2) if samples[-1][1] == after else None,
            "ninety_percent_owned_s": round(t90, 2), "unowned_partition_seconds": round(unowned)}


# --- the 1 000-member rebalance ---------------------------------------------------------------------------
class _RealTime:
    """Wall-clock milliseconds with no ``sleep``: a ``Consumer`` given it starts no heartbeat thread, and its
    ``poll(0)`` does the heartbeat work that is due."""

    @staticmethod
    def now_ms() -> int:
        return int(time.monotonic() * 1000)


class Members:
    """``n`` threadless consumers of one group, polled in turn by ``sweep``."""

    def __init__(self, cluster, protocol: str, n: int, topic: str) -> None:
        self.cluster, self.protocol, self.topic = cluster, protocol, topic
        self.group = f"thousand-{protocol}"
        self.consumers = [self._new(i) for i in range(n)]
        self._next = n
        self.sweeps: list[float] = []

    def _new(self, i: int) -> Consumer:
        return _consumer(self.cluster, self.group, self.topic, self.protocol, client_id=f"m{i}", clock=_RealTime())

    def sweep(self) -> None:
        started = time.perf_counter()
        for c in self.consumers:
            c.poll(0)
        self.sweeps.append(time.perf_counter() - started)

    def settle(self, partitions: int, timeout_s: float = 600.0) -> float:
        """Poll until every partition has one owner and every member holds its share (no member owns two
        more than another); the seconds it took."""
        started = time.monotonic()
        while True:
            self.sweep()
            owned, exclusive = _owners(self.consumers)
            if owned == partitions and exclusive and _balanced(self.consumers) and \
                    all(c.state == "STABLE" for c in self.consumers):
                return time.monotonic() - started
            if time.monotonic() - started > timeout_s:
                raise TimeoutError(f"{self.protocol}: {owned} of {partitions} partitions owned after {timeout_s:g} s")

    def change(self, what: str, partitions: int) -> dict:
        before = {c.member_id: c.assignment() for c in self.consumers}
        generations = {c.member_id: c.generation_id for c in self.consumers}
        if what == "leave":
            gone = self.consumers.pop(len(self.consumers) // 2)
            gone.close()
        else:
            self.consumers.append(self._new(self._next))
            self._next += 1
        seconds = self.settle(partitions)
        moved = sum(1 for c in self.consumers if c.member_id in before and c.assignment() != before[c.member_id])
        # Classic: every member went through JoinGroup/SyncGroup (a new generation); the consumer protocol:
        # a member's epoch moves with the group's, but only those whose assignment changed reconciled.
        took_part = sum(1 for c in self.consumers if c.member_id in generations and
                        (c.assignment() != before[c.member_id] if self.protocol == "consumer"
                         else c.generation_id != generations[c.member_id]))
        return {"seconds": round(seconds, 2), "members_whose_assignment_changed": moved,
                "members_that_took_part": took_part}

    def close(self) -> None:
        for c in self.consumers:
            c.close(timeout_s=5)


def thousand_members(cluster, protocol: str, n: int = 1_000, partitions: int = 1_000) -> tuple[dict, Members]:
    topic = f"thousand-{protocol}"
    cluster.create_topic(topic, partitions)
    members = Members(cluster, protocol, n, topic)
    formed = members.settle(partitions)
    leave = members.change("leave", partitions)
    join = members.change("join", partitions)
    sweeps = sorted(members.sweeps)
    return {"protocol": protocol, "members": n, "partitions": partitions, "forms_s": round(formed, 2),
            "one_leaves": leave, "one_joins": join,
            "poll_pass_over_all_members_ms": {"p50": round(1000 * sweeps[len(sweeps) // 2], 1),
                                              "max": round(1000 * sweeps[-1], 1)}}, members


# --- heartbeats answered per second by one shard -----------------------------------------------------
def _closed_loop(send, seconds: float, concurrency: int = 64) -> float:
    async def run() -> int:
        stop_at = time.perf_counter() + seconds
        count = 0

        async def worker(k: int) -> None:
            nonlocal count
            i = k
            while time.perf_counter() < stop_at:
                await send(i)
                count += 1
                i += concurrency

        await asyncio.gather(*(worker(k) for k in range(concurrency)))
        return count

    started = time.perf_counter()
    count = asyncio.run(run())
    return count / (time.perf_counter() - started)


def noop_rate(cluster, seconds: float = 10.0) -> float:
    shard = cluster.shard(0)

    async def noop(_i: int) -> None:
        await shard.ping.remote()

    return round(_closed_loop(noop, seconds))


def heartbeat_rate(cluster, members: Members, seconds: float = 10.0) -> float:
    """Heartbeats of ``members`` (not polled meanwhile: well within their session) answered per second."""
    client, group, wrap = cluster.client(), members.group, asyncio.wrap_future
    if members.protocol == "classic":
        classic = [(c.member_id, c.generation_id) for c in members.consumers]

        async def send(i: int) -> None:
            member, generation = classic[i % len(classic)]
            r = await wrap(client.heartbeat(group_id=group, generation_id=generation, member_id=member))
            assert r.error.name == "NONE", r.error
    else:
        consumer = [(c.member_id, c.generation_id, _owned(c)) for c in members.consumers]

        async def send(i: int) -> None:
            member, epoch, owned = consumer[i % len(consumer)]
            r = await wrap(client.consumer_group_heartbeat(group_id=group, member_id=member, member_epoch=epoch,
                                                           topic_partitions=owned))
            assert r.error.name == "NONE", r.error

    return round(_closed_loop(send, seconds))


def _owned(c: Consumer) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t, p in sorted(c.assignment()):
        out.setdefault(t, []).append(p)
    return out


def main() -> None:
    os.makedirs(RESULTS, exist_ok=True)
    result: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                "platform": platform.platform(), "ray": ray.__version__}}
    with quiet_output(str(RESULTS / "kip848-clients-ray-output.log")) as terminal:
        _TERMINAL[0] = terminal
        cluster = start_local(num_partitions=1, config=CONFIG, num_cpus=2)
        try:
            grows = {}
            for protocol in PROTOCOLS:
                _say(f"10 consumers, the topic grows by 900 partitions: {protocol}")
                grows[protocol] = topic_grows(cluster, protocol)
                _say(json.dumps(grows[protocol]))
            grows["kafka_published_s"] = {"consumer": 5, "classic": 103}
            result["ten_consumers_topic_grows_by_900"] = grows
            thousand: dict = {}
            rates: dict = {"noop_calls_per_s": noop_rate(cluster), "concurrency": 64, "members": 1_000}
            for protocol in PROTOCOLS:
                _say(f"the 1 000-member rebalance: {protocol}")
                thousand[protocol], members = thousand_members(cluster, protocol)
                _say(json.dumps(thousand[protocol]))
                rates[f"{protocol}_heartbeats_per_s"] = heartbeat_rate(cluster, members)
                members.close()
            result["thousand_member_rebalance"] = thousand
            result["heartbeats_per_shard"] = rates
            _say(json.dumps(rates))
        finally:
            cluster.shutdown()
    _TERMINAL[0] = sys.stdout
    path = RESULTS / "kip848-clients.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    _say(f"wrote {path}")


if __name__ == "__main__":
    main()
