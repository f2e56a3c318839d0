"""``ConsumerGroup``: N consumer actors that process the partitions of a ``Source`` and commit offsets.

Each consumer actor process hosts ``members_per_process`` group members (1 by default; Kafka Streams runs
many consumers per JVM): each member is one ``raygroups.Consumer`` (a real group member: join, heartbeat
thread, sync, listener) with a thread of its own, and the members of a process share one client, so their
heartbeats and commits bound for one shard travel in one Ray call (the client's coalescing). Each member
loops: ``poll()``, read its partitions from the source from its position, call the user's
``process(records)``, ``seek`` past them, commit every ``commit_interval_s`` and in
``on_partitions_revoked`` (commit before revoke). Delivery is at-least-once: after a rebalance or a
crash a partition resumes at its last committed offset, so nothing is skipped and a few records may be
processed twice.

The processor is a user class: ``processor_cls(*processor_args)`` is constructed in each worker and
must have ``process(records: list[SourceRecord])``; it may have ``stats() -> dict``.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import ray

from raygroups.client.consumer import CommitFailedError, Consumer, ConsumerError, FatalConsumerError
from raygroups.coordinator.messages import check_int, check_type
from raygroups.deployment.seam import create_worker
from raygroups.sources import Source, SourceRecord, SyntheticSource

log = logging.getLogger(__name__)


class VerifyingProcessor:
    """Checks every record against a ``SyntheticSource`` and remembers which offsets it processed."""

    def __init__(self, source: SyntheticSource) -> None:
        self.source = source
        self.processed = 0
        self.invalid = 0
        self.ranges: dict[tuple[str, int], list[list[int]]] = {}

    def process(self, records: list[SourceRecord]) -> None:
        for r in records:
            if not self.source.verify(r):
                self.invalid += 1
            spans = self.ranges.setdefault((r.topic, r.partition), [])
            if spans and spans[-1][1] == r.offset:
                spans[-1][1] = r.offset + 1
            else:
                spans.append([r.offset, r.offset + 1])
        self.processed += len(records)

    def stats(self) -> dict:
        return {"processed": self.processed, "invalid": self.invalid,
                "ranges": {f"{t}:{p}": spans for (t, p), spans in self.ranges.items()}}


class ConsumerWorker:
    """One group member of a consumer actor: its Consumer, processor and loop."""

    def __init__(self, cluster: Any, group_id: str, topics: list[str], source: Source, processor_cls: type,
                 processor_args: tuple, worker_id: int, consumer_options: dict, commit_interval_s: float,
                 max_records_per_poll: int) -> None:
        self.worker_id = worker_id
        self.source = source
        self.processor = processor_cls(*processor_args)
        self.commit_interval_s = commit_interval_s
        self.max_records = max_records_per_poll
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.history: list[dict] = []  # one entry per generation this member held an assignment in
        self.commit_failures = 0
        self.acked: dict[tuple[str, int], int] = {}
        self.fatal: str | None = None
        self.consumer = Consumer(cluster, group_id, topics, listener=self, enable_auto_commit=False,
                                 client_id=f"worker-{worker_id}", **consumer_options)

    # --- the rebalance listener --------------------------------------------------------------------
    def on_partitions_revoked(self, partitions) -> None:
        self._commit([tp for tp in partitions])

    def on_partitions_assigned(self, partitions) -> None:
        pass

    def on_partitions_lost(self, partitions) -> None:
        pass  # nothing to commit: another member may already own them

    # --- the loop ------------------------------------------------------------------------------------
    def run(self) -> dict:
        last_commit = time.monotonic()
        try:
            while not self._stop.is_set():
                assignment = self.consumer.poll(0.05)
                self._note_generation(assignment)
                progressed = False
                for tp in sorted(assignment):
                    if self._stop.is_set():
                        break
                    try:
                        position = self.consumer.position(tp)
                        records = self.source.read(tp[0], tp[1], position, self.max_records)
                        if records:
                            self.processor.process(records)
                            self.consumer.seek(tp, records[-1].offset + 1)
                            progressed = True
                    except ValueError:
                        break  # the partition was revoked meanwhile: poll again
                    except TimeoutError:
                        break  # its committed offset was not fetched in time (a coordinator outage): poll again
                if time.monotonic() - last_commit >= self.commit_interval_s:
                    self._commit(None)
                    last_commit = time.monotonic()
                if not progressed:
                    self._stop.wait(0.02)
            self._commit(None)
        except FatalConsumerError as e:
            self.fatal = f"{type(e).__name__}: {e}"
        finally:
            try:
                self.consumer.close()
            except ConsumerError:
                pass
        return self.stats()

    def _commit(self, partitions) -> None:
        try:
            if partitions is None:
                partitions = self.consumer.assignment()
            offsets = {tp: self.consumer.position(tp) for tp in partitions}
            if offsets:
                self.consumer.commit(offsets)
                with self._lock:
                    for tp, offset in offsets.items():
                        # Acknowledged by the coordinator: it must never be lost.
                        self.acked[tp] = max(offset, self.acked.get(tp, 0))
        except (CommitFailedError, ValueError, RuntimeError):  # lost the generation, revoked, or closed
            self.commit_failures += 1
        except TimeoutError:
            # No answer within the commit's timeout (its shard restarting, a failover): as Kafka's commitSync
            # TimeoutException, retriable; the positions stay and the next commit carries them.
            self.commit_failures += 1
        except ConsumerError as e:
            log.warning("worker %d commit failed: %s", self.worker_id, e)
            self.commit_failures += 1

    def _note_generation(self, assignment) -> None:
        generation = self.consumer.generation_id
        with self._lock:
            if not self.history or self.history[-1]["generation"] != generation \
                    or self.history[-1]["assignment"] != sorted(assignment):
                self.history.append({"generation": generation, "member_id": self.consumer.member_id,
                                     "assignment": sorted(assignment)})

    def stop(self) -> None:
        self._stop.set()

    def stats(self) -> dict:
        with self._lock:
            history = list(self.history)
            acked = [[tp[0], tp[1], offset] for tp, offset in sorted(self.acked.items())]
        processor_stats = self.processor.stats() if hasattr(self.processor, "stats") else {}
        try:
            assignment = sorted(self.consumer.assignment())
        except RuntimeError:  # closed
            assignment = []
        return {"worker": self.worker_id, "member_id": self.consumer.member_id,
                "generation": self.consumer.generation_id, "assignment": assignment,
                "history": history, "acked": acked, "commit_failures": self.commit_failures, "fatal": self.fatal,
                "processor": processor_stats}


class ConsumerHost:
    """One consumer actor process (a plain class; ``raygroups.deployment.seam.create_worker`` makes it a Ray actor)
    hosting ``count`` members (``ConsumerWorker``) that share one connection to the deployment."""

    def __init__(self, namespace: str, group_id: str, topics: list[str], source: Source, processor_cls: type,
                 processor_args: tuple, first_worker_id: int, count: int, consumer_options: dict,
                 commit_interval_s: float, max_records_per_poll: int) -> None:
        from raygroups.deployment.start import connect

        cluster = connect(namespace=namespace)
        self.members = [
            ConsumerWorker(cluster, group_id, topics, source, processor_cls, processor_args, first_worker_id + i,
                           consumer_options, commit_interval_s, max_records_per_poll)
            for i in range(count)
        ]

    def run(self) -> list[dict]:
        """Run every member's loop, each in a thread, until ``stop``; return their final stats."""
        results: list[dict | None] = [None] * len(self.members)

        def run_member(i: int) -> None:
            member = self.members[i]
            try:
                results[i] = member.run()
            except Exception as e:  # noqa: BLE001 - e.g. the user's processor raised: that member's end
                member.fatal = f"{type(e).__name__}: {e}"
                results[i] = member.stats()

        threads = [threading.Thread(target=run_member, args=(i,), name=f"member-{m.worker_id}", daemon=True)
                   for i, m in enumerate(self.members)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return [r if r is not None else m.stats() for r, m in zip(results, self.members, strict=True)]

    def stop(self) -> None:
        for m in self.members:
            m.stop()

    def stats(self) -> list[dict]:
        return [m.stats() for m in self.members]


class ConsumerGroup:
    """Runs ``num_consumers`` members of group ``group_id`` over ``source``, ``members_per_process`` of them
    per consumer actor; ``scale(n)``, ``stop()``, ``stats()``. Registers the source's topics with the
    cluster."""

    def __init__(self, processor_cls: type, cluster: Any, group_id: str, topics: list[str], source: Source,
                 num_consumers: int, *, processor_args: tuple = (), assignors=("cooperative-sticky",),
                 session_timeout_ms: int = 10_000, heartbeat_interval_ms: int = 1_000,
                 max_poll_interval_ms: int = 60_000, commit_interval_s: float = 0.5,
                 max_records_per_poll: int = 500, members_per_process: int = 1,
                 group_protocol: str = "classic") -> None:
        check_type("group_id", group_id, str)
        if group_protocol not in ("classic", "consumer"):
            raise ValueError(f"group_protocol must be 'classic' or 'consumer', got {group_protocol!r}")
        check_int("members_per_process", members_per_process, 1, 1_000)
        if not isinstance(source, Source):
            raise TypeError("source must implement raygroups.Source (topics, read, end_offset)")
        check_int("num_consumers", num_consumers, 0, 100_000)
        known = source.topics()
        for t in topics:
            if t not in known:
                raise ValueError(f"topic {t!r} is not in the source (it has {sorted(known)})")
        existing = cluster.topics()
        for t in topics:
            if existing.get(t) != known[t]:
                cluster.create_topic(t, known[t])
        self.cluster = cluster
        self.group_id = group_id
        self.group_protocol = group_protocol
        self.topics = list(topics)
        self.source = source
        self._spec = dict(processor_cls=processor_cls, processor_args=tuple(processor_args),
                          consumer_options=dict(assignors=tuple(assignors), session_timeout_ms=session_timeout_ms,
                                                heartbeat_interval_ms=heartbeat_interval_ms,
                                                max_poll_interval_ms=max_poll_interval_ms,
                                                group_protocol=group_protocol),
                          commit_interval_s=commit_interval_s, max_records_per_poll=max_records_per_poll)
        self._per_process = members_per_process
        self._workers: list[tuple[Any, Any, int]] = []  # (actor, run ref, members it hosts)
        self._next_id = 0
        self._final_stats: list[dict] = []
        self.scale(num_consumers)

    @property
    def num_consumers(self) -> int:
        return sum(count for _, _, count in self._workers)

    def scale(self, n: int) -> None:
        """Run ``n`` members: new ones in new processes; fewer retire whole processes, the last ones first
        (and start the remainder anew, if a process held more than had to go)."""
        check_int("n", n, 0, 100_000)
        while self.num_consumers > n:
            actor, run, _ = self._workers.pop()
            self._retire(actor, run)
        while self.num_consumers < n:
            count = min(self._per_process, n - self.num_consumers)
            actor = create_worker(ConsumerHost, self.cluster.namespace, self.cluster.namespace, self.group_id,
                                  self.topics, self.source, self._spec["processor_cls"],
                                  self._spec["processor_args"], self._next_id, count,
                                  self._spec["consumer_options"], self._spec["commit_interval_s"],
                                  self._spec["max_records_per_poll"],
                                  resources=getattr(self.cluster, "consumer_resources", None))
            self._next_id += count
            self._workers.append((actor, actor.run.remote(), count))

    def _retire(self, actor, run) -> None:
        try:
            ray.get(actor.stop.remote(), timeout=30)
            self._final_stats.extend(ray.get(run, timeout=60))
        except (ray.exceptions.RayError, TimeoutError) as e:
            log.warning("consumer worker did not stop cleanly: %s", e)
        ray.kill(actor, no_restart=True)

    def kill_consumer(self, index: int) -> None:
        """Kill consumer actor process ``index`` (and every member it hosts) without a goodbye (no
        LeaveGroup): its partitions move only after the session timeout, as when a Kafka consumer's
        process dies."""
        actor, _, _ = self._workers.pop(index)
        ray.kill(actor, no_restart=True)

    def stop(self) -> None:
        while self._workers:
            actor, run, _ = self._workers.pop()
            self._retire(actor, run)

    def stats(self) -> dict:
        workers = []
        for actor, _, count in self._workers:
            try:
                workers.extend(ray.get(actor.stats.remote(), timeout=30))
            except ray.exceptions.RayError:
                workers.extend({"worker": None, "error": "unavailable"} for _ in range(count))
        client = self.cluster.client()
        fetched = client.fetch_offsets(group_id=self.group_id).result(timeout=60)
        if self.group_protocol == "consumer":
            described = client.consumer_group_describe([self.group_id]).result(timeout=60)[0]
        else:
            described = client.describe_groups([self.group_id]).result(timeout=60)[0]
        partitions = []
        for topic in self.topics:
            for p in range(self.source.topics()[topic]):
                committed = fetched.offsets.get((topic, p))
                offset = committed.offset if committed is not None else -1
                end = self.source.end_offset(topic, p)
                partitions.append({"topic": topic, "partition": p, "committed": offset,
                                   "lag": end - max(offset, 0)})
        generation = max((w.get("generation", -1) for w in workers), default=-1)
        return {"group_id": self.group_id, "state": described.group_state, "generation": generation,
                "members": len(described.members), "workers": workers, "partitions": partitions,
                "retired": list(self._final_stats)}
