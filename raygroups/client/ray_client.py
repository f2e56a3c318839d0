"""The Ray client: the group API of ``raygroups.client.api.GroupApi`` against the shard actors.

Routing is Kafka's FindCoordinator: ``partition_for(group_id)`` → the shard actor named
``raygroups-shard-<p>`` in the deployment's namespace (handle cached). A Ray failure on a call (dead or
restarting actor, missing name) is turned into ``NOT_COORDINATOR`` and the handle is dropped; a shard that
answers ``NOT_COORDINATOR`` or ``COORDINATOR_NOT_AVAILABLE`` (``COORDINATOR_LOAD_IN_PROGRESS``: at most every
``MOVED_CHECK_S``) has the partition's actor looked up again; the
retriable coordinator errors (``COORDINATOR_LOAD_IN_PROGRESS``, ``NOT_COORDINATOR``,
``COORDINATOR_NOT_AVAILABLE``) are retried with exponential backoff and KIP-580's jitter until ``request.timeout.ms``
(JoinGroup: ``max(request.timeout.ms, rebalance_timeout_ms + 5000)``, as Kafka's client), then
surfaced. Ray exceptions never reach the caller.

Coalescing: requests bound for one shard are merged into one Ray call (``handle_batch``) when they are
issued close together, as Kafka's producer fills a batch per partition while one is in flight
(``linger.ms``, ``batch.size``). The shard answers each one separately, exactly as a single call
would; what may merge (a *lane*, named by each request type's entry in ``coordinator.requests``):

* Heartbeat and OffsetFetch of any groups of a shard (they never park): one call in flight per lane,
  what arrives meanwhile goes in the next call -- so batches grow with the load, and a quiet client's
  request leaves at once (after ``client.linger.ms``, 0 by default);
* OffsetCommit of any groups of a shard: a lane of its own, so that a heartbeat never waits for a
  commit's append in the same call (no head-of-line blocking);
* JoinGroups of one group, and SyncGroups of one group and generation (they complete together: when
  the leader's assignment is durable, or when a rebalance or the pending-sync timeout ends the
  generation), with no limit on calls in flight, so a parked call never holds back the request that
  completes it. A JoinGroup may be answered at once (a first join asking for a member id, KIP-394; the
  rejoin that completes the join phase) or park until the others rejoin, so the joins travel in a
  streaming call (``handle_stream``) that brings each answer back as soon as it is ready: none waits
  for another;
* everything else is sent alone.

Order is kept per lane (so per member and kind), retries included: a request that gets a retriable
coordinator error goes back to the head of its lane after its backoff, and a one-in-flight lane waits
for it. Each request keeps its own deadline; a batch call that fails in Ray fails each of its requests
with ``NOT_COORDINATOR``, as a single call would.

Thread-safe: calls are submitted to one private asyncio loop thread; every method returns a
``concurrent.futures.Future``. Code running on that loop (``loop``) may use ``send_here`` instead, which
returns a future of the loop.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from typing import Any

import ray

from raygroups.client.api import GroupApi
from raygroups.coordinator.api import error_response, response_errors
from raygroups.coordinator.config import CoordinatorConfig
from raygroups.coordinator.errors import Errors
from raygroups.coordinator.partitioning import partition_for
from raygroups.coordinator.requests import REQUESTS, Routing
from raygroups.deployment.seam import Directory

# Kafka's client backs off 100 ms growing to 1 s (KIP-580). A promoted hot standby serves soon after the
# controller's decision, so the cap is Kafka's fixed retry.backoff.ms of before KIP-580, 100 ms: once the
# new leader serves, a client notices within a tenth of a second. A try while the coordinator is unknown
# costs a name lookup per lane.
_BACKOFF_START_S = 0.02
_BACKOFF_MAX_S = 0.1
# KIP-580's jitter (Kafka's ExponentialBackoff: each backoff times a random factor in [0.8, 1.2], then
# capped): the clients of a failed-over partition do not all retry in lockstep.
BACKOFF_JITTER = 0.2
# A call unanswered this long asks the GCS which actor serves its partition now, and again as long as it
# waits: Ray holds a call to an actor it is restarting (or to a paused one) until it answers, while the
# controller may have failed the partition over to another node's shard -- whose answer is then the one to
# wait for (Kafka's client likewise drops a request to a broker it no longer believes is the coordinator).
# A call that never parks (a commit, a fetch, a heartbeat) asks every MOVED_CHECK_S: its answer is due at once,
# so one that does not come means a shard in trouble, and the partition's new shard is found within this
# much of serving (one lookup per partition is shared by every call waiting on it). A call that may park (a
# JoinGroup or SyncGroup waits for the others) asks after PARKED_CHECK_S, then at doubling intervals up to
# PARKED_CHECK_MAX_S.
MOVED_CHECK_S = 0.25
PARKED_CHECK_S = 0.5
PARKED_CHECK_MAX_S = 2.0


def jittered(backoff_s: float, rng: random.Random) -> float:
    """One retry's wait: ``backoff_s`` times a random factor within the jitter, at most the cap."""
    return min(_BACKOFF_MAX_S, backoff_s * rng.uniform(1 - BACKOFF_JITTER, 1 + BACKOFF_JITTER))


def lane_of(request: Any, partition: int) -> tuple | None:
    """The lane a request may merge in (see the module docstring; its registry entry says which), or None
    to send it alone. ``(partition, kind, group, one_in_flight)``."""
    return REQUESTS.spec(request).lane_of(request, partition)


class _Lane:
    __slots__ = ("queue", "in_flight", "scheduled")

    def __init__(self) -> None:
        self.queue: list[_Slot] = []
        self.in_flight = 0
        self.scheduled = False


class _ShardMoved(Exception):
    """The partition is served by another actor than the one a call waits on: the call is abandoned (the old
    actor, deposed, can only refuse it) and sent again to the new one."""


def _retrieve(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()


async def _answer(ref: Any) -> Any:
    return await ref


class _Slot:
    """One coalesced request: its caller's future, deadline and backoff (no task of its own)."""

    __slots__ = ("request", "future", "deadline", "backoff")

    def __init__(self, request: Any, future: Future, deadline: float) -> None:
        self.request = request
        self.future = future  # a concurrent Future, or (send_here) an asyncio one of the client's loop
        self.deadline = deadline
        self.backoff = _BACKOFF_START_S


class RayGroupClient(GroupApi):
    def __init__(self, namespace: str, num_partitions: int, config: CoordinatorConfig) -> None:
        self.namespace = namespace
        self.num_partitions = num_partitions
        self.config = config
        self._linger_s = config.client_linger_ms / 1000.0
        self._max_batch = config.client_max_batch_requests
        self._lanes: dict[tuple, _Lane] = {}
        self._inbox: list[tuple[tuple, _Slot]] = []  # from callers' threads to the loop
        self._inbox_lock = threading.Lock()
        self._outstanding: set[_Slot] = set()  # the loop's: coalesced requests not answered yet
        # Ray calls made: "calls" carried "requests" coalesced requests; "single_calls" one request each.
        self.batch_stats = {"calls": 0, "requests": 0, "single_calls": 0}
        self._handles: dict[int, Any] = {}
        self._rng = random.Random()  # the retries' jitter: each client its own
        self._handles_lock = threading.Lock()
        # The moved-shard checks' GCS lookups: one in flight per partition, whatever waits on it, on threads of
        # their own (a GCS away must not hold up the handles' lookups, nor grow without bound).
        self._lookups: dict[int, asyncio.Future] = {}
        self._load_lookups: dict[int, float] = {}  # partition -> when a load-in-progress answer last asked
        self._lookup_pool = ThreadPoolExecutor(2, thread_name_prefix="raygroups-shard-lookup")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="raygroups-client", daemon=True)
        self._thread.start()
        self._closed = False

    # ------------------------------------------------------------------------------------------
    def close(self) -> None:
        with self._inbox_lock:
            if self._closed:
                return
            self._closed = True
        try:  # calls still in flight end here: their callers see them cancelled
            asyncio.run_coroutine_threadsafe(self._cancel_pending(), self._loop).result(timeout=5)
        except Exception:  # noqa: BLE001 - closing regardless
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._lookup_pool.shutdown(wait=False, cancel_futures=True)

    async def _cancel_pending(self) -> None:
        with self._inbox_lock:
            arrived, self._inbox = self._inbox, []
        for slot in [*self._outstanding, *(slot for _, slot in arrived)]:
            slot.future.cancel()
        self._outstanding.clear()
        tasks = [t for t in asyncio.all_tasks(self._loop) if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _submit(self, request: Any, validated: bool = False) -> Future:
        # ``validated`` or not, the shard checks what arrives: it cannot tell this client from a raw call.
        lane = self._lane_for(request)
        if lane is None:
            return asyncio.run_coroutine_threadsafe(self._call(request), self._loop)
        # Coalesced: the request joins the loop's inbox; one wake-up of the loop takes all that arrived.
        future: Future = Future()
        slot = self._slot(request, future)
        with self._inbox_lock:
            if self._closed:
                raise RuntimeError("this client is closed")
            self._inbox.append((lane, slot))
            wake = len(self._inbox) == 1
        if wake:
            self._loop.call_soon_threadsafe(self._drain_inbox)
        return future

    def _lane_for(self, request: Any) -> tuple | None:
        """The lane the request coalesces in, or None to send it alone; RuntimeError once closed."""
        if self._closed:
            raise RuntimeError("this client is closed")
        spec = REQUESTS.spec(request)
        if self._max_batch > 1 and spec.lane is not None:
            return spec.lane_of(request, self._partition_of(request.group_id))
        return None

    def _slot(self, request: Any, future: Any) -> _Slot:
        return _Slot(request, future, time.monotonic() + self._timeout_ms(request) / 1000.0)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The client's own event loop: code running on it may call ``send_here``."""
        return self._loop

    def send_here(self, request: Any) -> asyncio.Future:
        """``send`` for a caller running on this client's own loop (the Kafka gateway's listener): the answer
        as a future of that loop, with no thread crossed either way. Validated, routed, coalesced and retried
        exactly as ``send``."""
        request = REQUESTS.spec(request).validate(request, self.config.message_max_bytes)
        lane = self._lane_for(request)
        if lane is None:
            return self._loop.create_task(self._call(request))
        future = self._loop.create_future()
        slot = self._slot(request, future)
        self._outstanding.add(slot)
        self._enqueue(lane, slot)
        return future

    def _partition_of(self, group_id: str | None) -> int:
        return partition_for(group_id if group_id is not None else "", self.num_partitions)

    def _timeout_ms(self, request: Any) -> int:
        return REQUESTS.spec(request).client_timeout_ms(request, self.config.request_timeout_ms)

    def _drain_inbox(self) -> None:
        with self._inbox_lock:
            arrived, self._inbox = self._inbox, []
        for lane, slot in arrived:
            self._outstanding.add(slot)
            self._enqueue(lane, slot)

    async def _handle(self, partition: int):
        """The partition's shard actor handle, cached; a lookup (GCS calls that block) runs off the loop,
        which serves a Kafka gateway's connections too (ValueError if no such actor)."""
        with self._handles_lock:
            handle = self._handles.get(partition)
        if handle is None:
            handle = await asyncio.to_thread(Directory(self.namespace).shard, partition)
            with self._handles_lock:
                self._handles[partition] = handle
        return handle

    def _forget(self, partition: int) -> None:
        with self._handles_lock:
            self._handles.pop(partition, None)

    def _rediscover_if_refused(self, partition: int, handle: Any, response: Any) -> None:
        """A shard that *answered* NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE may no longer be the partition's
        (Kafka's client marks the coordinator unknown on either and runs FindCoordinator again,
        ``AbstractCoordinator.markCoordinatorUnknown``): ask the GCS which actor serves the partition now, and
        send the retries there once it answers. Without this a deposed leader that lives on -- cut off from
        the controller, not from its clients, or restarted in place by Ray under the same actor id while a
        spare took over -- would take every retry until its process died. COORDINATOR_LOAD_IN_PROGRESS asks
        too, at most every ``MOVED_CHECK_S`` per partition: a restarted old leader loads before it learns it
        was replaced (Kafka's brokers never answer so for a partition that moved; a restarted actor here
        might). The lookup is shared and does not hold the retry up: it is sent as soon as its backoff ends,
        to whichever shard is known by then."""
        if isinstance(response, BaseException):
            return
        errors = response_errors(response)
        if not any(e in (Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE) for e in errors):
            if Errors.COORDINATOR_LOAD_IN_PROGRESS not in errors \
                    or time.monotonic() - self._load_lookups.get(partition, -MOVED_CHECK_S) < MOVED_CHECK_S:
                return
            self._load_lookups[partition] = time.monotonic()

        def learned(lookup: asyncio.Future) -> None:
            if lookup.cancelled() or lookup.exception() is not None:
                return  # the GCS away, or no actor named: the retries go where they went
            current = lookup.result()
            with self._handles_lock:
                cached = self._handles.get(partition)
                if cached is not None and cached._actor_id == handle._actor_id != current._actor_id:
                    self._handles[partition] = current

        self._current_shard(partition).add_done_callback(learned)

    def _current_shard(self, partition: int) -> asyncio.Future:
        """The GCS's answer to which actor serves ``partition`` (a lookup in flight is shared)."""
        lookup = self._lookups.get(partition)
        if lookup is None or lookup.done():
            lookup = self._loop.run_in_executor(self._lookup_pool, Directory(self.namespace).shard, partition)
            lookup.add_done_callback(_retrieve)
            self._lookups[partition] = lookup
        return lookup

    async def _unless_moved(self, partition: int, handle: Any, ref: Any, parks: bool = False) -> Any:
        """``ref``'s answer, or ``_ShardMoved`` once the partition's shard is known to be another actor than
        ``handle``'s, asked of the GCS while the answer does not come: every ``MOVED_CHECK_S``, or for a call
        that ``parks``, after ``PARKED_CHECK_S`` and then at doubling intervals up to ``PARKED_CHECK_MAX_S``. A
        lookup that fails or hangs (the GCS away) changes nothing: the call is still waited for, even when
        its callers have given up on it -- the same shard may still apply it, and the requests behind it in
        its lane must not overtake it (a commit abandoned, then applied after a newer one, would take the
        committed offset back: the chaos checker's lost-acked-commit caught exactly that). A moved partition's
        old shard can apply nothing: its leader epoch is fenced."""
        call = asyncio.ensure_future(_answer(ref))
        try:
            wait = PARKED_CHECK_S if parks else MOVED_CHECK_S
            while True:
                done, _ = await asyncio.wait({call}, timeout=wait)
                if done:
                    return call.result()
                lookup = self._current_shard(partition)
                done, _ = await asyncio.wait({call, lookup}, return_when=asyncio.FIRST_COMPLETED)
                if call in done:
                    return call.result()
                current = None if lookup.cancelled() or lookup.exception() is not None else lookup.result()
                if current is not None and current._actor_id != handle._actor_id:
                    with self._handles_lock:
                        self._handles[partition] = current
                    raise _ShardMoved()
                if parks:
                    wait = min(2 * wait, PARKED_CHECK_MAX_S)
        finally:
            if not call.done():  # abandoned (moved, or our caller cancelled): its outcome is nobody's
                call.add_done_callback(_retrieve)

    # ------------------------------------------------------------------------------------------
    async def _call(self, request: Any) -> Any:
        spec = REQUESTS.spec(request)
        timeout_ms = self._timeout_ms(request)
        if spec.routing is Routing.GROUP:
            return await self._with_retries(self._partition_of(request.group_id), request, timeout_ms)
        if spec.routing is Routing.ALL:
            # As Kafka's admin client: ask every coordinator, merge what they own.
            parts = [(p, request) for p in range(self.num_partitions)]
        else:
            by_partition: dict[int, list] = {}
            for group_id in request.group_ids:
                by_partition.setdefault(self._partition_of(group_id), []).append(group_id)
            parts = [(p, spec.part_for(request, ids)) for p, ids in by_partition.items()]
        answers = await asyncio.gather(*(self._with_retries(p, part, timeout_ms) for p, part in parts))
        return spec.merge(request, list(answers))

    async def _with_retries(self, partition: int, request: Any, timeout_ms: int) -> Any:
        deadline = time.monotonic() + timeout_ms / 1000.0
        backoff = _BACKOFF_START_S
        while True:
            response = await self._send_one(partition, request)
            errors = response_errors(response)
            if not errors or not any(e.is_coordinator_error for e in errors) or time.monotonic() >= deadline:
                return response
            await asyncio.sleep(min(jittered(backoff, self._rng), max(0.0, deadline - time.monotonic())))
            backoff = min(backoff * 2, _BACKOFF_MAX_S)

    async def _send_one(self, partition: int, request: Any) -> Any:
        self.batch_stats["single_calls"] += 1
        try:
            handle = await self._handle(partition)
            parks = REQUESTS.spec(request).may_park
            response = await self._unless_moved(partition, handle, handle.handle.remote(request), parks)
            self._rediscover_if_refused(partition, handle, response)
            return response
        except _ShardMoved:
            return error_response(request, Errors.NOT_COORDINATOR)  # retried at once on the new shard
        except (ray.exceptions.RayError, ValueError):
            # The shard is dead, restarting or not yet named: a Kafka client sees NOT_COORDINATOR.
            self._forget(partition)
            return error_response(request, Errors.NOT_COORDINATOR)

    # --- coalescing --------------------------------------------------------------------------------
    def _enqueue(self, key: tuple, slot: _Slot) -> None:
        if slot.future.done():  # cancelled by its caller meanwhile
            self._outstanding.discard(slot)
            return
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane()
        lane.queue.append(slot)
        self._schedule(key, lane)

    def _schedule(self, key: tuple, lane: _Lane) -> None:
        if lane.scheduled or not lane.queue or (key[3] and lane.in_flight):
            return  # a flush is due, nothing waits, or the lane's call in flight will flush on return
        lane.scheduled = True
        if self._linger_s > 0:
            self._loop.call_later(self._linger_s, self._flush, key, lane)
        else:
            self._loop.call_soon(self._flush, key, lane)  # what this burst of submissions adds goes too

    def _flush(self, key: tuple, lane: _Lane) -> None:
        lane.scheduled = False
        while lane.queue and not (key[3] and lane.in_flight):
            for slot in lane.queue:
                if slot.future.done():  # its caller gave up on it before it left: it never will
                    self._outstanding.discard(slot)
            lane.queue = [slot for slot in lane.queue if not slot.future.done()]
            batch, lane.queue = lane.queue[:self._max_batch], lane.queue[self._max_batch:]
            if not batch:
                break
            lane.in_flight += 1
            self._loop.create_task(self._send_batch(key, lane, batch))
        if not lane.queue and not lane.in_flight and not lane.scheduled:
            self._lanes.pop(key, None)

    async def _send_batch(self, key: tuple, lane: _Lane, batch: list[_Slot]) -> None:
        partition = key[0]
        requests = [slot.request for slot in batch]
        answered = [False] * len(batch)

        def answer(i: int, response: Any, retry: list[_Slot], shard: Any = None) -> None:
            if shard is not None:  # the shard's own answer (not one made here after a Ray failure)
                self._rediscover_if_refused(partition, shard, response)
            if isinstance(response, BaseException):
                # The shard raised on this request alone: what a single call's RayTaskError becomes.
                response = error_response(batch[i].request, Errors.NOT_COORDINATOR)
            if self._should_retry(batch[i], response):
                retry.append(batch[i])
            else:
                self._settle(batch[i], response)
            answered[i] = True  # only now: a failure above leaves it to the handlers below

        retry: list[_Slot] = []
        try:
            handle = await self._handle(partition)
            self.batch_stats["calls"] += 1
            self.batch_stats["requests"] += len(requests)
            parks = REQUESTS.spec(requests[0]).may_park
            if len(requests) == 1:
                answer(0, await self._unless_moved(partition, handle, handle.handle.remote(requests[0]), parks),
                       retry, handle)
            elif REQUESTS.spec(requests[0]).lane.streamed:
                async for ref in handle.handle_stream.remote(requests):
                    answers_now: list[_Slot] = []
                    for i, response in await ref:
                        answer(i, response, answers_now, handle)
                    self._retry_later(key, lane, answers_now)  # at once: the stream may go on for long
            else:
                answers = await self._unless_moved(partition, handle, handle.handle_batch.remote(requests), parks)
                for i, response in enumerate(answers):
                    answer(i, response, retry, handle)
        except (ray.exceptions.RayError, ValueError, _ShardMoved) as e:
            if not isinstance(e, _ShardMoved):  # (moved: the new shard's handle is cached already)
                self._forget(partition)
            for i, slot in enumerate(batch):
                if not answered[i]:
                    answer(i, error_response(slot.request, Errors.NOT_COORDINATOR), retry)
        except Exception as e:  # noqa: BLE001 - a bug, not the shard's answer: every caller sees it rather than hang
            for i, slot in enumerate(batch):
                if not answered[i]:
                    self._settle(slot, exception=e)
        finally:
            lane.in_flight -= 1
        self._retry_later(key, lane, retry)
        if lane.queue:
            self._schedule(key, lane)
        elif not lane.in_flight and not lane.scheduled:
            self._lanes.pop(key, None)

    def _retry_later(self, key: tuple, lane: _Lane, retry: list[_Slot]) -> None:
        """Back to the head of the lane after the backoff; meanwhile the lane counts them as in flight, so
        nothing issued after them overtakes them."""
        if not retry:
            return
        lane.in_flight += 1
        delay = max(0.0, min(jittered(max(s.backoff for s in retry), self._rng),
                             min(s.deadline for s in retry) - time.monotonic()))
        for s in retry:
            s.backoff = min(s.backoff * 2, _BACKOFF_MAX_S)
        self._loop.call_later(delay, self._requeue, key, lane, retry)

    def _should_retry(self, slot: _Slot, response: Any) -> bool:
        """A retriable coordinator error while the request's deadline allows (as ``_with_retries``)."""
        errors = response_errors(response)
        return bool(errors) and any(e.is_coordinator_error for e in errors) \
            and time.monotonic() < slot.deadline and not slot.future.done()

    def _requeue(self, key: tuple, lane: _Lane, slots: list[_Slot]) -> None:
        lane.in_flight -= 1
        live = [s for s in slots if not s.future.done()]
        for s in slots:
            if s.future.done():
                self._outstanding.discard(s)
        if self._lanes.get(key) is not lane:  # the lane was dropped meanwhile: start it again
            self._lanes[key] = lane
        lane.queue[:0] = live
        self._schedule(key, lane)
        if not lane.queue and not lane.in_flight and not lane.scheduled:
            self._lanes.pop(key, None)

    def _settle(self, slot: _Slot, response: Any = None, exception: BaseException | None = None) -> None:
        self._outstanding.discard(slot)
        try:
            if exception is not None:
                slot.future.set_exception(exception)
            else:
                slot.future.set_result(response)
        except (InvalidStateError, asyncio.InvalidStateError):  # its caller cancelled it meanwhile
            pass
