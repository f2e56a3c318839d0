"""Hot standbys: a node's spare shard process keeps a replayed state of every partition the node follows, so
that a leader change onto this node is a promotion -- the rest of the log after the standby's position
is replayed, not the whole log.

A thread in the spare asks the node's ``LogServer`` (``tail``) for what each followed replica's log holds
past the standby's position and feeds it to that partition's ``offsets_log.loader.Replayer`` (the loader's
own fast replay, fed in pieces). A position is ``(token, next offset)``: the LogServer replaces a log's
token whenever the log loses or rewrites records (leader-epoch truncation, a compaction swap, a reopen),
and a standby whose token is no longer the log's starts that partition again from the log's start.

At promotion (``CoordinatorShard`` adopting a partition) the shard takes the partition's standby, opens
the log it now leads and continues the standby (``continue_standby``) only if the LogServer released
the log under the token the standby last read with (the LogServer rewrote nothing since), the log's
open generation is the one the standby read at plus one (nobody but this shard opened the log since the
LogServer closed it: another shard could have compacted or truncated it), the log reaches the
standby's position, and the batch before it has the leader epoch the standby saw there (Kafka's
log-matching argument; with the two checks before it, a last guard). Then the log is the standby's
prefix followed by more batches, which are replayed on top. Anything else, or a batch after the
position that cannot be replayed, and the shard replays the whole log into a fresh state as it would
without a standby. The other partitions' standbys go with the spare: the spare the controller starts
next builds them again -- unless each spare stands by for one partition (``shard.standby.per.partition``:
the controller keeps one spare per followed partition, and the LogServer's ``tail`` reads that partition
only), so that every partition of a lost leader is a promotion and the node's other standbys stay.

Not Kafka's: Kafka's group coordinator loads a partition from the log when it becomes leader
(``CoordinatorLoaderImpl``); its followers keep no replayed state. Costs: every followed partition's
state in the spare's memory (``shard.standby.enable`` turns it off) and a ``tail`` call to the LogServer
at once again while batches come, ``STANDBY_POLL_S`` after a read that brought nothing, doubling up to
``STANDBY_IDLE_POLL_MAX_S`` while nothing comes (one call for all the partitions the spare stands by for).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from raygroups.coordinator.state import DurableState
from raygroups.offsets_log.errors import CorruptLogError, LogError
from raygroups.offsets_log.loader import Replayer, gc_paused

log = logging.getLogger(__name__)

STANDBY_POLL_S = 0.25  # between reads when nothing new came (at once again while there was) ...
STANDBY_IDLE_POLL_MAX_S = 1.0  # ... doubling up to this while nothing comes (an idle spare's CPU)
STANDBY_READ_BYTES = 8 << 20  # per read, all partitions together


@dataclass
class Follow:
    """One partition's standby: the token its reads were made under, and the replay so far."""

    partition: int
    token: str
    generation: int  # the log's open generation when the LogServer read it
    replayer: Replayer
    broken: str | None = None  # why it stopped (a batch it could not decode); the promotion replays the log


class StandbyRefused(Exception):
    """The standby does not continue the promoted shard's log (the message says why)."""


def epoch_at(entries: list[tuple[int, int]], offset: int) -> int | None:
    """The leader epoch of the record at ``offset`` from a log's epoch entries ``(epoch, start offset)``."""
    epoch = None
    for e, start in entries:
        if start > offset:
            break
        epoch = e
    return epoch


def standby_matches(follow: Follow, released_token: str | None, log) -> str | None:
    """None if ``log`` (just opened by the promoted shard) continues ``follow``'s state, else why not."""
    r = follow.replayer
    if follow.broken:
        return f"the standby stopped: {follow.broken}"
    if released_token is None:
        return "the log server holds no token for the log it released (restarted, or never opened it)"
    if released_token != follow.token:
        return "the log was rewritten or reopened after the standby's last read"
    if log.open_generation != follow.generation + 1:
        return (f"the log was opened {log.open_generation - follow.generation - 1} more time(s) since the log "
                f"server released it")
    if not log.log_start_offset <= r.next_offset <= log.log_end_offset:
        return (f"the standby's position {r.next_offset} is outside the log "
                f"[{log.log_start_offset}, {log.log_end_offset}]")
    if r.records and r.last_epoch != epoch_at(log.epoch_entries, r.next_offset - 1):
        return f"the batch before offset {r.next_offset} is not of leader epoch {r.last_epoch} any more"
    return None


def continue_standby(follow: Follow, released_token: str | None, log, state: DurableState) -> int:
    """The promotion: ``follow`` continued to the end of ``log`` (just opened by the promoted shard) and
    installed lazily in ``state`` (empty); returns how many records were replayed past the standby's
    position. Raises ``StandbyRefused`` when it does not continue the log or the rest cannot be replayed
    (``state`` may then hold part of it: load the log into a fresh one)."""
    why = standby_matches(follow, released_token, log)
    if why is not None:
        raise StandbyRefused(why)
    replayer = follow.replayer
    read = replayer.records
    try:
        with gc_paused():
            replayer.feed(log.raw_payloads(replayer.next_offset), skip_applied=True)
            replayer.install(state)
    except CorruptLogError as e:
        raise StandbyRefused(f"continuing it failed: {e}") from e
    return replayer.records - read


class Standby:
    """The standbys of one node's followed partitions. ``tail(positions, max_bytes)`` is the node's
    ``LogServer.tail`` (through Ray in a spare). Thread-safe: ``poll`` runs on the standby thread,
    ``take`` on the shard's."""

    def __init__(self, tail: Callable[[dict, int], dict], name: str = "standby") -> None:
        self._tail = tail
        self._name = name
        self._follows: dict[int, Follow] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True, name=self._name)
        self._thread.start()

    def _run(self) -> None:
        wait = STANDBY_POLL_S
        while not self._stopped.is_set():
            try:
                fed = self.poll()
            except Exception as e:  # noqa: BLE001 - a LogServer away or restarting: try again later
                log.debug("%s: read failed: %s: %s", self._name, type(e).__name__, e)
                fed = 0
            if fed:
                wait = STANDBY_POLL_S
            else:
                self._stopped.wait(wait)
                wait = min(2 * wait, STANDBY_IDLE_POLL_MAX_S)

    def poll(self) -> int:
        """One read of every followed partition; returns how many batches were applied."""
        with self._lock:
            # A broken standby asks for nothing more of its log (None) until the log's token changes.
            positions = {p: (f.token, None if f.broken else f.replayer.next_offset) for p, f in self._follows.items()}
        answer = self._tail(positions, STANDBY_READ_BYTES)
        fed = 0
        with self._lock:
            if self._stopped.is_set():
                return 0
            parts = answer["partitions"]
            for p, a in parts.items():
                f = self._follows.get(p)
                if f is not None and f.broken and f.token == a["token"]:
                    continue
                if f is None or f.token != a["token"] or f.replayer.next_offset != a["from"]:
                    f = self._follows[p] = Follow(p, a["token"], a["generation"],
                                                  Replayer(f"standby of partition {p}", a["from"], lazy=True,
                                                           standby=True))
                if not a["payloads"]:
                    continue
                before = f.replayer.next_offset
                try:
                    f.replayer.feed(((f.replayer.where, i, payload) for i, payload in enumerate(a["payloads"])),
                                    skip_applied=True)
                except (CorruptLogError, LogError) as e:
                    f.broken = str(e)
                    log.warning("%s: partition %d: %s", self._name, p, e)
                if f.replayer.next_offset != before:
                    fed += 1
            # Kept: the followed partitions (those the LogServer could not read this time included) and the
            # released ones this standby may still continue (released under its token); a partition
            # reassigned away, or released after a rewrite, goes.
            released, unavailable = answer["released"], set(answer.get("unavailable", ()))
            for p in [p for p, f in self._follows.items()
                      if p not in parts and p not in unavailable and released.get(p) != f.token]:
                del self._follows[p]
        return fed

    def take(self, partition: int) -> Follow | None:
        """Stop for good and hand over ``partition``'s standby (None if there is none); the others go."""
        self._stopped.set()
        with self._lock:
            follow = self._follows.pop(partition, None)
            self._follows.clear()
        return follow

    def stop(self) -> None:
        self._stopped.set()
        with self._lock:
            self._follows.clear()

    def status(self) -> dict:
        with self._lock:
            return {p: {"next_offset": f.replayer.next_offset, "records": f.replayer.records,
                        "broken": f.broken} for p, f in sorted(self._follows.items())}
