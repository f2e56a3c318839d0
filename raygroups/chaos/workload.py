"""The chaos benchmark's clients: consumer actors, probes and a group-lifecycle client, each recording its
operations as history events.

* ``ChaosConsumer`` (a Ray actor, one per consumer process of a group): a real ``raygroups.Consumer``
  working through a live ``SyntheticSource``. It records ``assign`` (generation, member, assignment, once
  per new assignment), ``join`` (when its consumer first polls, which sends its first JoinGroup: the
  membership change its start makes, which a loaded host may delay well after the workload started it),
  ``resume`` (the committed offset a newly assigned partition resumes from) and ``commit`` (one partition
  per request, so every commit is one history operation). A commit rejected for
  the member's generation is ``fail``; a timeout or any other error is ``info`` (it may have been written).
* ``Probe`` (a thread of the benchmark's process): ``fetch`` of one partition's committed offset after
  another, round robin.
* ``AvailabilityProbe`` (a thread per coordinator partition): ``commit`` to a scratch group of its own that
  hashes to that partition, at a fixed rate, with a short timeout: what a client of that coordinator sees,
  whatever the consumers do (the report's availability and failover times come from it).
* ``Lifecycle`` (a thread): commits to a scratch group with no members, fetches it, deletes it (``delete``)
  and fetches again, with a new scratch group each round: deleted groups must stay deleted.

Every event carries ``clock()`` (CLOCK_MONOTONIC) minus the run's start: the benchmark keeps its clients on
its own host, where that clock is one for all processes, and merges the events by time into the history. A client stamps an invocation
before it sends and a completion after the answer, so the merged order never claims that an operation
began later, or ended earlier, than it did.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from typing import Any

from raygroups.client.consumer import CommitFailedError, Consumer, ConsumerError, FatalConsumerError
from raygroups.coordinator.errors import Errors
from raygroups.coordinator.partitioning import partition_for

TOPIC = "orders"
# How long a consumer's commit or offset fetch may retry: well below its max.poll.interval.ms (the run uses
# 10 s), as Kafka's default.api.timeout.ms is below its max.poll.interval.ms, so that a coordinator outage
# does not keep the poll loop away long enough for the member to leave its group.
COMMIT_TIMEOUT_S = 5.0
# A recorded event: (time, process, type, f, value).
HistoryEvent = tuple[float, str, str, str, dict]


def clock() -> float:
    """The history's clock: CLOCK_MONOTONIC, one clock for every process of this host, and never stepped."""
    return time.monotonic()


class EventLog:
    """What one client recorded and the benchmark has not collected yet (thread-safe); ``t0`` is the run's
    start on ``clock()``."""

    def __init__(self, process: str, t0: float) -> None:
        self.process = process
        self.t0 = t0
        self._events: list[HistoryEvent] = []
        self._lock = threading.Lock()

    def add(self, type_: str, f: str, value: dict) -> None:
        with self._lock:
            self._events.append((clock() - self.t0, self.process, type_, f, value))

    def drain(self) -> list[HistoryEvent]:
        with self._lock:
            out, self._events = self._events, []
        return out


class ChaosConsumer:
    """One consumer process of a group (``raygroups.deployment.seam.create_worker`` makes it a Ray actor)."""

    def __init__(self, namespace: str, group: str, process: str, source: Any, t0: float,
                 consumer_options: dict, commit_interval_s: float) -> None:
        from raygroups.deployment.start import connect

        self.group = group
        self.source = source
        self.events = EventLog(process, t0)
        self.commit_interval_s = commit_interval_s
        self._stop = threading.Event()
        self._last: tuple[int, frozenset] | None = None
        self._needs_resume: set = set()
        self.fatal: str | None = None
        self.consumer = Consumer(connect(namespace=namespace), group, [TOPIC], listener=self,
                                 enable_auto_commit=False, client_id=process, **consumer_options)

    def pid(self) -> int:
        return os.getpid()

    def drain(self) -> list[HistoryEvent]:
        return self.events.drain()

    def stop(self) -> None:
        self._stop.set()

    # --- the rebalance listener: commit what is revoked, as Kafka's consumers should ---------------------
    def on_partitions_revoked(self, partitions) -> None:
        deadline = time.monotonic() + COMMIT_TIMEOUT_S
        for tp in sorted(partitions):
            if tp not in self._needs_resume:  # never resumed: nothing of ours to commit
                self._commit(tp, deadline)

    def on_partitions_assigned(self, partitions) -> None:
        self._needs_resume.update(partitions)

    def on_partitions_lost(self, partitions) -> None:
        self._needs_resume.difference_update(partitions)

    # --- the loop --------------------------------------------------------------------------------------
    def run(self) -> str | None:
        last_commit = time.monotonic()
        joined = {"group": self.group}
        self.events.add("invoke", "join", joined)
        self.events.add("ok", "join", joined)
        try:
            while not self._stop.is_set():
                self.consumer.poll(0.05)
                generation, member, assignment, stable = self.consumer.group_assignment()
                if stable and (generation, assignment) != self._last and generation >= 0:
                    self._last = (generation, assignment)
                    value = {"group": self.group, "member": member, "generation": generation,
                             "partitions": [[t, p] for t, p in sorted(assignment)]}
                    # The assignment arrived with SyncGroup, before this line: stamping it now is late,
                    # which only weakens what the checker infers from it.
                    self.events.add("invoke", "assign", value)
                    self.events.add("ok", "assign", value)
                progressed = False
                # One budget for the calls of a round, below max.poll.interval.ms: a coordinator outage
                # must not keep this loop from polling long enough to leave the group.
                deadline = time.monotonic() + COMMIT_TIMEOUT_S
                for tp in sorted(assignment):
                    if self._stop.is_set() or time.monotonic() >= deadline:
                        break
                    if tp in self._needs_resume and not self._resume(tp, generation, member, deadline):
                        continue
                    try:
                        position = self.consumer.position(tp)
                        records = self.source.read(tp[0], tp[1], position, 200)
                        if records:
                            self.consumer.seek(tp, records[-1].offset + 1)
                            progressed = True
                    except ValueError:
                        break  # revoked meanwhile: poll again
                if time.monotonic() - last_commit >= self.commit_interval_s:
                    for tp in sorted(self.consumer.assignment()):
                        if tp not in self._needs_resume and time.monotonic() < deadline:
                            self._commit(tp, deadline)
                    last_commit = time.monotonic()
                if not progressed:
                    self._stop.wait(0.02)
            deadline = time.monotonic() + COMMIT_TIMEOUT_S
            for tp in sorted(self.consumer.assignment()):
                if tp not in self._needs_resume:
                    self._commit(tp, deadline)
        except FatalConsumerError as e:
            self.fatal = f"{type(e).__name__}: {e}"
        finally:
            try:
                self.consumer.close()
            except (ConsumerError, TimeoutError):
                pass
        return self.fatal

    def _resume(self, tp, generation: int, member: str, deadline: float) -> bool:
        """Fetch where a newly assigned partition resumes (recorded as ``resume``) and seek there."""
        value = {"group": self.group, "topic": tp[0], "partition": tp[1], "generation": generation, "member": member}
        self.events.add("invoke", "resume", value)
        try:
            committed = self.consumer.committed([tp], timeout_s=_left(deadline)).get(tp)
        except (ConsumerError, TimeoutError, RuntimeError) as e:
            self.events.add("info", "resume", {**value, "error": type(e).__name__})
            return False
        offset = -1 if committed is None else committed
        self.events.add("ok", "resume", {**value, "offset": offset})
        self._needs_resume.discard(tp)
        try:
            self.consumer.seek(tp, max(offset, 0))
        except ValueError:
            return False  # revoked meanwhile
        return True

    def _commit(self, tp, deadline: float) -> None:
        try:
            offset = self.consumer.position(tp)
        except (ValueError, ConsumerError, TimeoutError, RuntimeError):
            return
        generation, member, _, _ = self.consumer.group_assignment()
        value = {"group": self.group, "topic": tp[0], "partition": tp[1], "offset": offset,
                 "generation": generation, "member": member}
        self.events.add("invoke", "commit", value)
        try:
            self.consumer.commit({tp: offset}, timeout_s=_left(deadline))
        except CommitFailedError as e:
            # Refused for the member's generation before anything was written.
            self.events.add("fail", "commit", {**value, "error": type(e).__name__})
        except ValueError as e:  # not assigned any more: nothing was sent
            self.events.add("fail", "commit", {**value, "error": str(e)})
        except (ConsumerError, TimeoutError, RuntimeError) as e:
            self.events.add("info", "commit", {**value, "error": type(e).__name__})
        else:
            self.events.add("ok", "commit", value)


def _left(deadline: float) -> float:
    """What remains of a round's budget for one call (at least a moment, so that it is sent)."""
    return max(0.05, deadline - time.monotonic())


def _answer(future: Any, timeout_s: float) -> Any:
    """The response, or the exception; a request that outlives ``timeout_s`` is cancelled (the client stops
    retrying it), so that it cannot land after the client's later operations."""
    try:
        return future.result(timeout_s)
    except BaseException:
        future.cancel()
        raise


def _outcome(error: Errors) -> str:
    """A read's or a deletion's history type for an error code: a coordinator error that outlived the
    client's retries leaves the outcome unknown; any other error is a failure."""
    return "info" if error.is_coordinator_error else "fail"


class Probe(threading.Thread):
    """Fetches the committed offset of one (group, partition) after another, as fast as ``pause_s`` allows."""

    def __init__(self, client: Any, process: str, t0: float, keys: list[tuple[str, str, int]],
                 stop: threading.Event, pause_s: float = 0.05, timeout_s: float = 15.0) -> None:
        super().__init__(name=process, daemon=True)
        self.client = client
        self.events = EventLog(process, t0)
        self.keys = keys
        self._stop_event = stop
        self.pause_s = pause_s
        self.timeout_s = timeout_s

    def run(self) -> None:
        for group, topic, partition in itertools.cycle(self.keys):
            if self._stop_event.is_set():
                return
            fetch(self.client, self.events, group, topic, partition, self.timeout_s)
            self._stop_event.wait(self.pause_s)


def fetch(client: Any, events: EventLog, group: str, topic: str, partition: int, timeout_s: float) -> None:
    value = {"group": group, "topic": topic, "partition": partition}
    events.add("invoke", "fetch", value)
    try:
        response = _answer(client.fetch_offsets(group_id=group, partitions=[(topic, partition)]), timeout_s)
    except Exception as e:  # noqa: BLE001 - a timeout or a closed client: the outcome is unknown
        events.add("info", "fetch", {**value, "error": type(e).__name__})
        return
    if response.error is not Errors.NONE:
        events.add(_outcome(response.error), "fetch", {**value, "error": response.error.name})
        return
    committed = response.offsets.get((topic, partition))
    error = getattr(committed, "error", Errors.NONE)
    if error is not Errors.NONE:
        events.add(_outcome(error), "fetch", {**value, "error": error.name})
        return
    events.add("ok", "fetch", {**value, "offset": -1 if committed is None else committed.offset})


def commit_scratch(client: Any, events: EventLog, group: str, offset: int, timeout_s: float) -> None:
    """Commit ``offset`` for partition 0 of a group with no members, recorded as a ``commit``."""
    value = {"group": group, "topic": TOPIC, "partition": 0, "offset": offset}
    events.add("invoke", "commit", value)
    try:
        r = _answer(client.commit_offsets(group_id=group, offsets={(TOPIC, 0): (offset, "")}), timeout_s)
    except Exception as e:  # noqa: BLE001 - unknown outcome
        events.add("info", "commit", {**value, "error": type(e).__name__})
        return
    error = r.errors[(TOPIC, 0)]
    if error is Errors.NONE:
        events.add("ok", "commit", value)
    else:
        events.add("info" if error.is_coordinator_error or error.retriable else "fail", "commit",
                   {**value, "error": error.name})


AVAILABILITY_PROCESS = "availability-p"  # an availability probe's process: this and its partition


def availability_group(partition: int, num_partitions: int) -> str:
    """The scratch group an availability probe commits to: the first ``chaos-availability-<p>-<i>`` that
    hashes to ``partition``."""
    for i in itertools.count():
        group = f"chaos-availability-{partition}-{i}"
        if partition_for(group, num_partitions) == partition:
            return group
    raise AssertionError("unreachable")


class AvailabilityProbe(threading.Thread):
    """Commits a growing offset to one coordinator partition's scratch group every ``interval_s`` (the next
    one at once when a commit took longer), each with ``timeout_s``: a client that only needs its
    coordinator, unaffected by consumers' rebalances, so that its failed or slow commits are the partition's
    unavailability. Its group is read back at the end (``final_read``), so the checker holds every
    acknowledged probe commit to its invariants too."""

    def __init__(self, client: Any, partition: int, num_partitions: int, t0: float, stop: threading.Event,
                 interval_s: float = 0.5, timeout_s: float = 2.0) -> None:
        super().__init__(name=f"{AVAILABILITY_PROCESS}{partition}", daemon=True)
        self.client = client
        self.group = availability_group(partition, num_partitions)
        self.events = EventLog(f"{AVAILABILITY_PROCESS}{partition}", t0)
        self._stop_event = stop
        self.interval_s = interval_s
        self.timeout_s = timeout_s

    def run(self) -> None:
        next_at = time.monotonic()
        for offset in itertools.count(1):
            if self._stop_event.is_set():
                return
            commit_scratch(self.client, self.events, self.group, offset, self.timeout_s)
            next_at += self.interval_s
            wait = next_at - time.monotonic()
            if wait > 0:
                self._stop_event.wait(wait)
            else:  # late (a slow or failed commit): the next one now, and the rate from there
                next_at = time.monotonic()

    def final_read(self, client: Any, events: EventLog, timeout_s: float) -> None:
        fetch(client, events, self.group, TOPIC, 0, timeout_s)


class Lifecycle(threading.Thread):
    """Scratch groups with no members: commit, fetch, delete, fetch, then the next scratch group."""

    def __init__(self, client: Any, process: str, t0: float, prefix: str, stop: threading.Event,
                 pause_s: float = 0.3, timeout_s: float = 15.0) -> None:
        super().__init__(name=process, daemon=True)
        self.client = client
        self.events = EventLog(process, t0)
        self.prefix = prefix
        self._stop_event = stop
        self.pause_s = pause_s
        self.timeout_s = timeout_s

    def run(self) -> None:
        for round_ in itertools.count():
            if self._stop_event.is_set():
                return
            group = f"{self.prefix}-{round_}"
            commit_scratch(self.client, self.events, group, round_ + 1, self.timeout_s)
            fetch(self.client, self.events, group, TOPIC, 0, self.timeout_s)
            self._delete_scratch(group)
            fetch(self.client, self.events, group, TOPIC, 0, self.timeout_s)
            self._stop_event.wait(self.pause_s)

    def _delete_scratch(self, group: str) -> None:
        value = {"group": group}
        self.events.add("invoke", "delete", value)
        try:
            error = _answer(self.client.delete_groups([group]), self.timeout_s)[group]
        except Exception as e:  # noqa: BLE001 - unknown outcome
            self.events.add("info", "delete", {**value, "error": type(e).__name__})
            return
        if error is Errors.NONE:
            self.events.add("ok", "delete", value)
        elif error is Errors.GROUP_ID_NOT_FOUND:
            # The client retries a deletion whose answer a failover lost: an earlier attempt may have deleted
            # the group (as with Kafka's admin client), so the outcome is unknown, not a failure.
            self.events.add("info", "delete", {**value, "error": error.name})
        else:
            self.events.add(_outcome(error), "delete", {**value, "error": error.name})
