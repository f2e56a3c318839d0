"""A shard process started without a partition: a *warm spare* of a replicated deployment's node.

A spare serves nothing until the controller hands it a partition (``CoordinatorShard.adopt``), so a
failover skips starting a process. A spare of a replicated node is also a hot standby: it keeps the node's
followed partitions replayed (``actors.standby``) -- or, with ``standby_for``, that one partition only
(``shard.standby.per.partition``; then a spare without it stands by for none) -- and, when it adopts one,
continues that state (``promote``) instead of replaying the whole log. A spare that Ray restarts after it
adopted a partition finds that partition again through its binding (``Spare.binding``).

Guarantees: a promotion continues a standby only when ``continue_standby`` accepts it for the log just
opened; otherwise the caller replays the whole log, as without a standby (``ServedPartition`` records why).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from raygroups.actors.standby import Standby, StandbyRefused, continue_standby
from raygroups.coordinator.config import CoordinatorConfig
from raygroups.coordinator.state import DurableState
from raygroups.offsets_log.loader import LoadSummary

log = logging.getLogger(__name__)
STANDBY_CALL_TIMEOUT_S = 10.0


class Spare:
    """The spare side of a shard actor: its binding and its standby (None when it keeps none)."""

    def __init__(self, config: dict, directory: Any, replicated: bool, node: str | None,
                 standby_for: int | None, cold: bool = False) -> None:
        self.directory = directory
        self.node = node
        self.standby_for = standby_for  # the one partition the standby reads (None: all followed)
        self.standby: Standby | None = None
        self._log_server = None  # the node's LogServer, for the standby's reads
        self._wants_standby = (replicated and directory is not None and node is not None and not cold
                               and self.stands_by(config, standby_for))

    @staticmethod
    def stands_by(config: dict, standby_for: int | None) -> bool:
        c = CoordinatorConfig.from_properties(config)
        return c.shard_standby_enable and (standby_for is not None or not c.shard_standby_per_partition)

    def binding(self) -> int | None:
        """The partition this spare adopted before Ray restarted it, if any."""
        return None if self.directory is None else self.directory.spare_binding()

    def start_standby(self) -> None:
        """Keep the node's followed partitions (or the one it stands by for) replayed, if this spare may."""
        if not self._wants_standby:
            return
        self.standby = Standby(self._tail_log_server, name=f"standby-{self.node}" + (
            "" if self.standby_for is None else f"-p{self.standby_for}"))
        self.standby.start()

    def take_standby(self) -> Standby | None:
        """The standby, for the promotion; the spare keeps none after."""
        standby, self.standby = self.standby, None
        return standby

    def stop(self) -> None:
        """The spare goes (closed before it adopted a partition): its standby stops reading."""
        if self.standby is not None:
            self.standby.stop()

    def _tail_log_server(self, positions: dict, max_bytes: int) -> dict:
        import ray

        if self._log_server is None:
            self._log_server = self.directory.log_server(self.node)
        try:
            return ray.get(self._log_server.tail.remote(positions, max_bytes, self.standby_for),
                           timeout=STANDBY_CALL_TIMEOUT_S)
        except Exception:
            self._log_server = None  # a restarted LogServer is looked up again
            raise


async def promote(served, standby: Standby | None, plog) -> tuple[LoadSummary, DurableState] | None:
    """A promoted spare: ``served``'s partition's hot standby, continued to the end of ``plog`` (the log
    just opened), as the load's summary and state; None when there is none or it does not continue this
    log (the caller replays the whole log; ``served.standby_refused`` says why)."""
    if standby is None:
        return None
    partition = served.partition
    follow = await served.run_io(standby.take, partition)
    if follow is None:
        served.standby_refused = "no standby of this partition"
        return None
    try:
        released = await asyncio.wait_for(
            served.directory.log_server(served.node).released_token.remote(partition), STANDBY_CALL_TIMEOUT_S)
    except Exception as e:  # noqa: BLE001 - no answer: the log is replayed as without a standby
        released = None
        log.warning("shard %d: the log server did not say which log it released: %s", partition, e)

    def finish() -> tuple[LoadSummary, DurableState] | None:
        start = time.perf_counter()
        state = DurableState()  # a refused continuation may leave part of itself here
        try:
            served.standby_tailed = continue_standby(follow, released, plog, state)
        except StandbyRefused as e:
            served.standby_refused = str(e)
            log.info("shard %d: standby not used: %s", partition, e)
            return None
        r = follow.replayer
        return LoadSummary(records=r.records, bytes=r.bytes, seconds=time.perf_counter() - start,
                           bytes_dropped=plog.bytes_dropped), state

    promoted = await served.run_io(finish)
    if promoted is not None:
        served.timeline["standby_promoted"] = time.time()
    return promoted
