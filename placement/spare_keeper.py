"""The controller's performer of the spare decisions (``placement.spares``): it lists a node's spares
through the Ray seam, asks the pure functions what to do, and has the seam do it.

Choosing among a node's spares happens in one call at a time: a failover adopting one and the
controller's background task starting and stopping spares per partition both run in the controller's
threads, and each lists the spares, decides and acts under this keeper's lock, so neither acts on a
listing the other has changed meanwhile (a spare the failover took is recorded as adopting before the
lock is released, and the background task leaves such spares alone). Only the replacements of a node's
spare for all and cold spares are created outside the lock (a named actor's creation may take a second on
a loaded machine, which the next failover must not wait for), counted as there until the listing shows
them.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

from raygroups.placement.spares import (
    adoption_order,
    cold_spares_missing,
    free_spares,
    needs_spare_for_all,
    standby_spares_plan,
)


class SpareKeeper:
    """Performs spare decisions through ``actors`` (``ActorFactory``: ``list_spares``, ``adopt``,
    ``start_shard``, ``kill_shard``, ``create_spare``, ``kill_spare``, ``standby_per_partition``,
    ``cold_spares``). Thread-safe;
    every method blocks (the controller calls them from its worker threads)."""

    def __init__(self, actors: Any) -> None:
        self._actors = actors
        self._lock = threading.Lock()
        # Per partition, how long its last replacement took, step by step (the controller's shard-started
        # event carries it): waiting for the lock, killing the old actor and listing spares, adoption, and
        # a new shard actor's start when no spare adopted it.
        self.took: dict[int, dict[str, float]] = {}
        self._wanting: Counter[tuple[str, bool]] = Counter()  # (node, cold): spares taken, not yet replaced
        # (node, cold): spares being created, outside the lock (a named actor's creation waits for the GCS to
        # register its name, up to a second under load, which no failover may wait for); the node's listing
        # shows them once created, and until then they count as there.
        self._creating: Counter[tuple[str, bool]] = Counter()
        self._cold_wanted: dict[str, int] = {}  # node -> cold spares it keeps, when not ``cold_spares``

    def cold_wanted(self, node: str) -> int:
        """How many cold spares ``node`` keeps now (``want_cold``, else ``shard.cold.spares``)."""
        return self._cold_wanted.get(node, self._actors.cold_spares)

    def want_cold(self, node: str, count: int) -> bool:
        """From now on ``node`` keeps ``count`` cold spares (``spares.cold_spares_wanted``): True if that is
        more than before, when ``ensure_spare`` should start the new ones. Fewer stop none: those there are
        adopted by the next failovers onto the node and not replaced beyond the new count. (No lock: the
        controller's event loop calls it, and one dict entry written is read whole by the others.)"""
        grew = count > self.cold_wanted(node)
        self._cold_wanted[node] = count
        return grew

    def forget_cold(self, node: str) -> None:
        """Back to ``shard.cold.spares`` for ``node`` (a new incarnation of it, or spares that could not be
        started): the next ``want_cold`` of more counts as more again."""
        self._cold_wanted.pop(node, None)

    @property
    def per_partition(self) -> bool:
        return self._actors.standby_per_partition

    def replace_shard(self, partition: int, node: str, scheduling: dict[str, Any], timeout_s: float = 10.0):
        """Kill whatever actor serves the partition, then serve it on ``node``: by the first spare in
        :func:`adoption_order` that is running and adopts it, else by a new shard actor; and note whether
        ``node`` needs a new spare for every partition for the next time (without spares per partition),
        which ``replenish`` starts."""
        asked = time.monotonic()
        with self._lock:
            took = {"lock_s": time.monotonic() - asked}
            step = time.monotonic()
            self._actors.kill_shard(partition)
            free = free_spares(self._actors.list_spares(node))
            took["kill_and_list_s"], step = time.monotonic() - step, time.monotonic()
            used: set[str] = set()
            handle = None
            for name in adoption_order(partition, free):
                handle, outcome = self._actors.adopt(partition, name)
                if outcome != "starting":
                    used.add(name)  # adopted, gone, or given up on (killed)
                if handle is not None:
                    break
            took["adopt_s"], step = time.monotonic() - step, time.monotonic()
            if needs_spare_for_all(self.per_partition, free, used) and not self._creating[(node, False)]:
                self._wanting[(node, False)] = 1  # the node's spare for all was taken: ``replenish`` starts one
            self._wanting[(node, True)] = max(0, cold_spares_missing(free, self.cold_wanted(node), used)
                                              - self._creating[(node, True)])  # and its cold ones
        if handle is None:
            # No spare took it: a new process, started outside the lock, so that the other partitions of a
            # lost node adopt their spares meanwhile rather than after this start (a second or more).
            handle = self._actors.start_shard(partition, node, scheduling, timeout_s)
            took["new_shard_s"] = time.monotonic() - step
        self.took[partition] = {k: round(v, 3) for k, v in took.items()}
        return handle

    def replenish(self, node: str, scheduling: dict[str, Any]) -> bool:
        """Start the spare for every partition that ``replace_shard`` left ``node`` without (True if it
        did): after the failover's shard is started, since creating an actor may take a second on a loaded
        machine and nothing of the failover needs it."""
        with self._lock:
            wanted = [cold for cold in (False, True) for _ in range(self._wanting.pop((node, cold), 0))]
            self._creating.update((node, cold) for cold in wanted)
        self._create(node, scheduling, wanted)
        return bool(wanted)

    def _create(self, node: str, scheduling: dict[str, Any], kinds: list[bool]) -> None:
        """Create ``node``'s spares of ``kinds`` (cold or not), counted in ``_creating`` by the caller, outside
        the lock: a failover choosing among the node's spares meanwhile does not wait for them."""
        left = list(kinds)
        try:
            while left:
                self._actors.create_spare(node, scheduling, cold=left[0])
                with self._lock:
                    self._creating[(node, left.pop(0))] -= 1
        finally:
            with self._lock:  # not created (an error): no longer being created either
                self._creating.subtract((node, cold) for cold in left)

    def ensure_spare(self, node: str, scheduling: dict[str, Any]) -> bool:
        """See that ``node`` has a spare for every partition (without spares per partition: those are the
        spares then) and its cold spares, running or starting, so that the first partitions it ever leads are
        adopted rather than started; True if one was started now."""
        with self._lock:
            free = free_spares(self._actors.list_spares(node))
            # Those being created, and those a failover took that ``replenish`` is about to replace, count.
            coming = self._creating + self._wanting
            kinds = [False] if needs_spare_for_all(self.per_partition, free) and not coming[(node, False)] else []
            kinds += [True] * max(0, cold_spares_missing(free, self.cold_wanted(node)) - coming[(node, True)])
            self._creating.update((node, cold) for cold in kinds)
        self._create(node, scheduling, kinds)
        return bool(kinds)

    def ensure_standby_spares(self, node: str, followed: set[int] | frozenset[int],
                              scheduling: dict[str, Any]) -> tuple[list[int], list[str]]:
        """With spares per partition: :func:`standby_spares_plan` for ``node``, performed. Returns the
        partitions whose spare was started and the names of the spares stopped. ``followed`` is what the
        controller had performed when it asked: a failover it decided since, adopting one of these spares
        in :meth:`replace_shard`, waits for this to finish or goes first (then the spare it took is
        recorded as adopting, and left alone here)."""
        if not self.per_partition:
            return [], []
        with self._lock:
            start, stop = standby_spares_plan(followed, free_spares(self._actors.list_spares(node)))
            for name in stop:
                self._actors.kill_spare(name)
            for p in start:
                self._actors.create_spare(node, scheduling, standby_for=p)
            return start, stop
