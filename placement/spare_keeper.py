"""The controller's performer of the spare decisions (``placement.spares``): it lists a node's spares
through the Ray seam, asks the pure functions what to do, and has the seam do it.

Choosing among a node's spares happens in one call at a time: a failover adopting one and the
controller's background task starting and stopping spares per partition both run in the controller's
threads, and each lists the spares, decides and acts under this keeper's lock, so neither acts on a
listing the other has changed meanwhile (a spare the failover took is recorded as adopting before the
lock is released, and the background task leaves such spares alone).
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
            if needs_spare_for_all(self.per_partition, free, used):
                self._wanting[(node, False)] = 1  # the node's spare for all was taken: ``replenish`` starts one
            self._wanting[(node, True)] = cold_spares_missing(free, self._actors.cold_spares, used)  # and cold ones
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
            for cold in wanted:
                self._actors.create_spare(node, scheduling, cold=cold)
            return bool(wanted)

    def ensure_spare(self, node: str, scheduling: dict[str, Any]) -> bool:
        """See that ``node`` has a spare for every partition (without spares per partition: those are the
        spares then) and its cold spares, running or starting, so that the first partitions it ever leads are
        adopted rather than started; True if one was started now."""
        with self._lock:
            free = free_spares(self._actors.list_spares(node))
            started = False
            if needs_spare_for_all(self.per_partition, free):
                self._actors.create_spare(node, scheduling)
                started = True
            for _ in range(cold_spares_missing(free, self._actors.cold_spares)):
                self._actors.create_spare(node, scheduling, cold=True)
                started = True
            return started

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
