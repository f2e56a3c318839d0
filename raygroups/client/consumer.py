"""``raygroups.Consumer``: a member of a consumer group, with Kafka's consumer semantics.

The protocol decisions live in ``membership.member.GroupMember`` (pure); this module is the shell around it:
it sends the requests through ``cluster.client()``, runs the heartbeat thread, keeps positions, runs
auto-commit and invokes the rebalance listener.

* ``poll()`` drives membership: listener callbacks run only inside ``poll()``/``close()``, in the caller's
  thread, at Kafka's points — eager: ``on_partitions_revoked(all owned)`` before every rejoin; cooperative:
  after SyncGroup only the partitions no longer assigned are revoked (then the member rejoins at once);
  ``on_partitions_assigned`` gets the newly added partitions after every completed rebalance (possibly
  empty); ``on_partitions_lost`` replaces "revoked" when the member was fenced or expired. While a
  revocation callback runs the partitions are still owned, so ``commit()`` inside it works.
* ``commit()`` returns only after the coordinator acknowledged the commit; it raises ``CommitFailedError``
  when this member lost its generation to a rebalance (then nothing was committed).
* A dynamic member sends LeaveGroup when closed and when the application does not call ``poll()``
  within ``max_poll_interval_ms``; a static member (``group_instance_id``) never does, so a restart
  within the session timeout causes no rebalance.
* The classic group's leader reads topic metadata again every ``metadata_max_age_ms`` (Kafka's
  ``metadata.max.age.ms``) and rejoins when a subscribed topic gained partitions or appeared, so that they
  get assigned; in a consumer-protocol group the coordinator notices that itself.
* Fatal errors (``FencedInstanceIdError``, ``GroupMaxSizeReachedError``, other unexpected group errors)
  are raised from every later ``poll()``/``commit()``.

Threads: ``poll``, ``commit``, ``committed``, ``seek`` and ``position`` belong to one application thread
(the listener runs in it, as in Kafka); the heartbeat thread is internal. ``close()`` should be called from
that thread too, once the poll loop has stopped.

Not guaranteed: delivery of records (there is no fetcher; the application reports its progress with
``seek``); positions of partitions without a committed offset start at 0.

Time: the wall clock and a daemon heartbeat thread by default. A ``clock`` without ``sleep`` (e.g.
``raygroups.testing.ManualClock``) starts no thread: background work runs in ``poll()`` and in
``run_background_once_for_testing()``, which makes tests deterministic.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from raygroups.actors.timers import WallClock
from raygroups.client.calls import CoordinatorCalls
from raygroups.client.listener import (
    _REQUEST_TIMEOUT_S,
    ConsumerRebalanceListener,
    TopicPartition,
    _check_timeout,
    _check_tp,
    check_consumer_args,
    check_offsets,
    invoke_listener,
)
from raygroups.coordinator.checks import is_int
from raygroups.coordinator.errors import Errors
from raygroups.coordinator.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    OffsetCommitResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
    check_int,
)
from raygroups.membership.consumer_member import ConsumerProtocolMember
from raygroups.membership.member import (
    DEFAULT_RETRY_BACKOFF_MS,
    CommitFailedError,
    ConsumerError,
    FatalConsumerError,
    FencedInstanceIdError,
    GroupMaxSizeReachedError,
    GroupMember,
    JoinComplete,
    ListenerEvent,
    MemberState,
    PrepareJoin,
    RebalanceInProgressError,
    SendRequest,
    Wait,
)

__all__ = [
    "CommitFailedError",
    "Consumer",
    "ConsumerError",
    "ConsumerRebalanceListener",
    "FatalConsumerError",
    "FencedInstanceIdError",
    "GroupMaxSizeReachedError",
    "RebalanceInProgressError",
]

log = logging.getLogger(__name__)


class Consumer:
    """A consumer-group member (see the module docstring for what it guarantees)."""

    def __init__(
        self,
        cluster: Any,
        group_id: str,
        topics: Iterable[str],
        assignors: Iterable[Any] = ("range",),
        group_instance_id: str | None = None,
        session_timeout_ms: int = 45_000,
        heartbeat_interval_ms: int = 3_000,
        max_poll_interval_ms: int = 300_000,
        auto_commit_interval_ms: int = 5_000,
        enable_auto_commit: bool = True,
        listener: Any = None,
        client_id: str | None = None,
        clock: Any = None,
        group_protocol: str = "classic",
        metadata_max_age_ms: int = 300_000,
    ) -> None:
        check_int("metadata_max_age_ms", metadata_max_age_ms, 0)
        if group_protocol not in ("classic", "consumer"):
            raise ValueError(f"group_protocol must be 'classic' or 'consumer' (Kafka's group.protocol), got "
                             f"{group_protocol!r}")
        topics, resolved = check_consumer_args(
            cluster, group_id, topics, assignors, group_instance_id, session_timeout_ms, heartbeat_interval_ms,
            max_poll_interval_ms, auto_commit_interval_ms, enable_auto_commit, listener, client_id, clock)

        self._cluster = cluster
        self._calls = CoordinatorCalls(cluster)
        self._clock = clock if clock is not None else WallClock()
        self._sleep = getattr(self._clock, "sleep", None)
        self._real_time = callable(self._sleep)
        self._listener = listener
        self._enable_auto_commit = enable_auto_commit
        self._auto_commit_interval_ms = auto_commit_interval_ms
        self._retry_backoff_ms = DEFAULT_RETRY_BACKOFF_MS
        self.group_id = group_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id if client_id is not None else (group_instance_id or "consumer")
        now = self._clock.now_ms()
        self.group_protocol = group_protocol
        if group_protocol == "consumer":
            # KIP-848: the coordinator assigns and times the session (``assignors``, ``session_timeout_ms``
            # and ``heartbeat_interval_ms`` are the classic protocol's); the member id is the client's
            # (KIP-1082), kept across rejoins.
            self._member = ConsumerProtocolMember(
                group_id, topics, uuid.uuid4().hex, group_instance_id=group_instance_id,
                rebalance_timeout_ms=max_poll_interval_ms, retry_backoff_ms=self._retry_backoff_ms, now_ms=now)
        else:
            self._member = GroupMember(
                group_id, topics, resolved, group_instance_id=group_instance_id,
                session_timeout_ms=session_timeout_ms, heartbeat_interval_ms=heartbeat_interval_ms,
                rebalance_timeout_ms=max_poll_interval_ms, retry_backoff_ms=self._retry_backoff_ms,
                client_id=self.client_id, metadata_max_age_ms=metadata_max_age_ms, now_ms=now,
            )
        # _lock guards the member and the fields below; it is never held while calling the client or
        # the user's listener, so neither can deadlock with the heartbeat thread.
        self._lock = threading.RLock()
        self._background_lock = threading.Lock()
        self._wake = threading.Event()
        self._wake_foreground = threading.Event()  # a heartbeat answered (the consumer protocol waits on it)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._positions: dict[TopicPartition, int] = {}
        self._last_committed: dict[TopicPartition, int] = {}
        self._next_auto_commit_ms = now + auto_commit_interval_ms
        self._auto_commit: tuple[Any, concurrent.futures.Future, dict] | None = None
        self._rebalance_call: tuple[Any, concurrent.futures.Future] | None = None
        self._heartbeat_call: tuple[HeartbeatRequest, concurrent.futures.Future] | None = None
        self._close_started = False
        self._closed = False

    # ------------------------------------------------------------------------------------------
    # Public API
    # ------------------------------------------------------------------------------------------
    def poll(self, timeout_s: float = 0.0) -> frozenset[TopicPartition]:
        """Drive membership for at most ``timeout_s`` (real time) and return the current assignment.

        Returns as soon as the member is stable. Raises the consumer's fatal error, or the first
        exception raised by a listener callback (after the rebalance step it belongs to completed)."""
        timeout_s = _check_timeout("timeout_s", timeout_s)
        self._check_open()
        deadline = time.monotonic() + timeout_s
        with self._lock:
            leave = self._member.on_poll(self._clock.now_ms())
        self._send_leave(leave)
        self._start_thread_if_needed()
        self._maybe_refresh_metadata()
        self._ensure_active_group(deadline)
        self._maybe_auto_commit()
        self._background_step()
        with self._lock:
            self._member.raise_if_fatal()  # e.g. the heartbeat thread was fenced
            return self._member.assignment

    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions currently owned by this consumer."""
        with self._lock:
            return self._member.assignment

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None, timeout_s: float = 30.0) -> None:
        """Commit ``offsets`` ({(topic, partition): next offset to consume}), or, with ``None``, the positions
        of the owned partitions; returns once acknowledged. Retries coordinator errors until ``timeout_s``
        (then ``TimeoutError``). Raises ``CommitFailedError`` (``RebalanceInProgressError`` while a
        rebalance is under way) when the member lost its generation, or the consumer's fatal error."""
        timeout_s = _check_timeout("timeout_s", timeout_s)
        self._check_open()
        if offsets is None:
            with self._lock:
                offsets = {tp: p for tp, p in self._positions.items() if tp in self._member.assignment}
        else:
            offsets = check_offsets(offsets)
        if offsets:
            self._commit_sync(offsets, time.monotonic() + timeout_s)

    def committed(self, partitions: Iterable[TopicPartition], timeout_s: float = 30.0) -> dict[TopicPartition, int | None]:
        """The group's committed offsets of ``partitions`` (None where nothing is committed)."""
        timeout_s = _check_timeout("timeout_s", timeout_s)
        self._check_open()
        if isinstance(partitions, tuple) and len(partitions) == 2 and isinstance(partitions[0], str):
            raise TypeError("partitions must be a collection of (topic, partition) tuples, not one tuple")
        tps = sorted({_check_tp("partitions entry", tp) for tp in partitions})
        if not tps:
            return {}
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                request = self._member.fetch_request(tps)
            response = self._call(request, deadline, OffsetFetchResponse)
            with self._lock:
                result = self._member.on_fetch_response(response, self._clock.now_ms())
            if result is not None:
                return {tp: result.get(tp) for tp in tps}
            self._retry_pause(deadline, "offset fetch")

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Set the position (next offset to consume) of an owned partition; auto-commit and ``commit()``
        commit positions."""
        tp = _check_tp("partition", partition)
        if not is_int(offset):
            raise TypeError(f"offset must be an int, got {type(offset).__name__}")
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        with self._lock:
            if tp not in self._member.assignment:
                raise ValueError(f"partition {tp} is not assigned to this consumer")
            self._positions[tp] = offset

    def position(self, partition: TopicPartition, timeout_s: float = 30.0) -> int:
        """The position of an owned partition: the last ``seek``, else the committed offset, else 0."""
        tp = _check_tp("partition", partition)
        with self._lock:
            if tp not in self._member.assignment:
                raise ValueError(f"partition {tp} is not assigned to this consumer")
            if tp in self._positions:
                return self._positions[tp]
        committed = self.committed([tp], timeout_s).get(tp)
        with self._lock:
            if tp in self._positions:
                return self._positions[tp]
            offset = committed if committed is not None else 0
            if tp in self._member.assignment:
                self._positions[tp] = offset
                if committed is not None:
                    self._last_committed[tp] = committed
            return offset

    def group_assignment(self) -> tuple[int, str, frozenset[TopicPartition], bool]:
        """``(generation, member id, assignment, stable)`` read together (the heartbeat thread may reset the
        first two between separate reads). ``stable``: SyncGroup completed for that generation (between a
        JoinGroup answer and SyncGroup's, the generation is already the new one while the assignment is
        still the previous generation's)."""
        with self._lock:
            m = self._member
            return m.generation_id, m.member_id, m.assignment, m.state is MemberState.STABLE

    @property
    def member_id(self) -> str:
        with self._lock:
            return self._member.member_id

    @property
    def generation_id(self) -> int:
        with self._lock:
            return self._member.generation_id

    @property
    def state(self) -> str:
        """The member state: UNJOINED, PREPARING_REBALANCE, COMPLETING_REBALANCE or STABLE."""
        with self._lock:
            return self._member.state.value

    @property
    def is_leader(self) -> bool:
        with self._lock:
            return self._member.is_leader

    def close(self, timeout_s: float = 30.0) -> None:
        """Leave the group: auto-commit (if enabled), stop the heartbeat thread, revoke (or lose) the owned
        partitions through the listener, then LeaveGroup for a dynamic member. Idempotent."""
        timeout_s = _check_timeout("timeout_s", timeout_s)
        with self._lock:
            if self._close_started:
                return
            self._close_started = True
            member = self._member
            commit_first = (self._enable_auto_commit and member.state is MemberState.STABLE
                            and member.fatal_error is None)
        deadline = time.monotonic() + timeout_s
        listener_error: BaseException | None = None
        try:
            if commit_first:
                self._commit_quietly(deadline)
        finally:
            self._stop_thread()
            with self._lock:
                event = member.leave_prepare()
            if event is not None:
                listener_error = self._invoke(event)
            with self._lock:
                leave = member.close()
                self._positions.clear()
                self._closed = True
            self._send_leave(leave, wait_s=max(0.0, deadline - time.monotonic()))
        if listener_error is not None:
            raise listener_error

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------
    # Test hooks
    # ------------------------------------------------------------------------------------------
    def run_background_once_for_testing(self) -> None:
        """One step of the heartbeat thread (heartbeat if due, leave if the poll timer expired)."""
        self._background_step()

    def heartbeat_now_for_testing(self) -> None:
        """Send a heartbeat now (if the member is in a generation) and apply its answer if it is done."""
        with self._lock:
            self._member.expedite_heartbeat(self._clock.now_ms())
        self._background_step()

    # ------------------------------------------------------------------------------------------
    # Background: heartbeats and the poll timer
    # ------------------------------------------------------------------------------------------
    def _start_thread_if_needed(self) -> None:
        if not self._real_time or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=f"raygroups-heartbeat-{self.group_id}", daemon=True)
        self._thread.start()

    def _stop_thread(self) -> None:
        self._stopping.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._background_step()
            except Exception:
                log.exception("heartbeat thread step failed")
            with self._lock:
                now = self._clock.now_ms()
                next_ms = self._member.next_background_ms()
            # The consumer protocol's interval is the coordinator's, unknown (0) until its first answer.
            interval_s = max(self._member.heartbeat_interval_ms, self._retry_backoff_ms) / 1000.0
            wait_s = interval_s if next_ms is None else (next_ms - now) / 1000.0
            self._wake.wait(min(max(wait_s, 0.001), interval_s))
            self._wake.clear()

    def _background_step(self) -> None:
        with self._background_lock:
            self._collect_heartbeat()
            with self._lock:
                if self._closed and self._member.closed:
                    return
                request = self._member.poll_background(self._clock.now_ms())
            if isinstance(request, LeaveGroupRequest):
                self._send_leave(request)
            elif request is not None:
                future = self._send(request)
                future.add_done_callback(lambda _f: self._wake.set())
                with self._lock:
                    self._heartbeat_call = (request, future)
                self._collect_heartbeat()

    def _take_answered(self, field: str) -> tuple | None:
        """The call in ``field`` (``_heartbeat_call``, ``_rebalance_call``) once it is answered, cleared."""
        with self._lock:
            call = getattr(self, field)
            if call is None or not call[1].done():
                return None
            setattr(self, field, None)
            return call

    def _collect_heartbeat(self) -> None:
        call = self._take_answered("_heartbeat_call")
        if call is None:
            return
        response = self._result(call[1], getattr(self._member, "heartbeat_response_type", HeartbeatResponse))
        with self._lock:
            self._member.on_heartbeat_response(call[0], response, self._clock.now_ms())
        self._wake_foreground.set()

    def _send_leave(self, request: LeaveGroupRequest | None, wait_s: float = 0.0) -> None:
        if request is None:
            return
        future = self._send(request)
        try:
            response = future.result(timeout=wait_s) if wait_s > 0 or future.done() else None
        except Exception as e:
            log.info("LeaveGroup failed: %s", e)
            return
        if response is not None and response.error is not Errors.NONE:
            log.info("LeaveGroup answered %s", response.error.name)

    def _retry_pause(self, deadline: float, what: str) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"{what} did not succeed before the timeout")
        pause = min(remaining, self._retry_backoff_ms / 1000.0)
        (self._sleep if self._real_time else time.sleep)(pause)

    # ------------------------------------------------------------------------------------------
    # Calls into the client
    # ------------------------------------------------------------------------------------------
    def _send(self, request: Any) -> concurrent.futures.Future:
        with self._lock:
            rediscoveries = self._member.rediscoveries
        return self._calls.send(request, rediscoveries)

    def _call(self, request: Any, deadline: float, response_type: type) -> Any:
        with self._lock:
            rediscoveries = self._member.rediscoveries
        return self._calls.call(request, deadline, response_type, rediscoveries)

    _result = staticmethod(CoordinatorCalls.result)

    # ------------------------------------------------------------------------------------------
    # Membership (foreground)
    # ------------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        # commit() stays usable while close() runs the revocation callback, as in Kafka
        if self._closed:
            raise RuntimeError("the consumer is closed")

    def _maybe_refresh_metadata(self) -> None:
        """The classic group's leader re-reads topic metadata every ``metadata_max_age_ms`` and rejoins when
        a subscribed topic's partitions changed (a consumer-protocol group's coordinator does that itself)."""
        if self.group_protocol != "classic":
            return
        with self._lock:
            due = self._member.metadata_check_due(self._clock.now_ms())
        if due:
            topics = self._cluster.topics()
            with self._lock:
                self._member.on_metadata(topics, self._clock.now_ms())

    def _ensure_active_group(self, deadline: float) -> None:
        while True:
            self._collect_rebalance_response()
            with self._lock:
                action = self._member.poll_rebalance(self._clock.now_ms())
                if isinstance(action, SendRequest):
                    request = action.request
            if action is None:
                if self.group_protocol != "consumer" or not self._await_target(deadline):
                    return
                continue
            if isinstance(action, PrepareJoin):
                self._prepare_join(action)
            elif isinstance(action, JoinComplete):  # the consumer protocol: a reconciliation's new partitions
                self._complete_join(action)
            elif isinstance(action, SendRequest):
                future = self._send(request)
                with self._lock:
                    self._rebalance_call = (request, future)
                self._wake.set()
            elif not self._wait(action, deadline):
                return

    def _await_target(self, deadline: float) -> bool:
        """The consumer protocol: wait (within ``deadline``) for the heartbeat thread to bring this member its
        target while it owns none yet or still reconciles; False when poll should return."""
        with self._lock:
            if self._member.stable or self._member.fatal_error is not None:
                return False
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not self._real_time:
            return False
        self._wake.set()  # the heartbeat thread: an acknowledgement may be due
        self._wake_foreground.wait(min(remaining, 0.1))
        self._wake_foreground.clear()
        return True

    def _wait(self, action: Wait, deadline: float) -> bool:
        """Block for a response or a backoff, within ``deadline``; False when poll should return."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        if action.until_ms is None:
            with self._lock:
                call = self._rebalance_call
            if call is None:
                return True
            done, _ = concurrent.futures.wait([call[1]], timeout=remaining)
            return bool(done)
        if not self._real_time:
            return False  # a manual clock only moves when the test moves it
        delay_s = (action.until_ms - self._clock.now_ms()) / 1000.0
        self._sleep(max(0.0, min(remaining, delay_s)))
        return True

    def _collect_rebalance_response(self) -> None:
        call = self._take_answered("_rebalance_call")
        if call is None:
            return
        request, future = call
        if isinstance(request, JoinGroupRequest):
            response = self._result(future, JoinGroupResponse)
            topics = self._cluster.topics() if self._member.leader_needs_metadata(response) else None
            with self._lock:
                self._member.on_join_response(request, response, self._clock.now_ms(), topics)
            return
        response = self._result(future, SyncGroupResponse)
        with self._lock:
            complete = self._member.on_sync_response(request, response, self._clock.now_ms())
        if complete is not None:
            self._complete_join(complete)

    def _prepare_join(self, action: PrepareJoin) -> None:
        if action.can_commit and self._enable_auto_commit:
            # Bounded by the request timeout, not by poll's timeout: positions must reach the coordinator
            # before the partitions are given away (Kafka bounds this by the rebalance timeout).
            self._commit_quietly(time.monotonic() + _REQUEST_TIMEOUT_S)
        errors = []
        try:
            for event in action.events:
                errors.append(self._invoke(event))
        finally:
            with self._lock:
                self._member.finish_join_prepare(action)
                self._wake.set()
                for tp in action.dropped:
                    self._positions.pop(tp, None)
                    self._last_committed.pop(tp, None)
        self._raise_first(errors)

    def _complete_join(self, complete: JoinComplete) -> None:
        errors = []
        if complete.revoked:
            errors.append(self._invoke(ListenerEvent("on_partitions_revoked", complete.revoked)))
        with self._lock:
            self._member.finish_join(complete)
            self._wake.set()  # the consumer protocol acknowledges its new ownership at once
            for tp in complete.revoked:
                self._positions.pop(tp, None)
                self._last_committed.pop(tp, None)
            self._next_auto_commit_ms = self._clock.now_ms() + self._auto_commit_interval_ms
        errors.append(self._invoke(ListenerEvent("on_partitions_assigned", complete.added)))
        self._raise_first(errors)

    def _invoke(self, event: ListenerEvent) -> BaseException | None:
        return invoke_listener(self._listener, event)

    @staticmethod
    def _raise_first(errors: list[BaseException | None]) -> None:
        for e in errors:
            if e is not None:
                raise e

    # ------------------------------------------------------------------------------------------
    # Offsets
    # ------------------------------------------------------------------------------------------
    def _commit_sync(self, offsets: dict[TopicPartition, int], deadline: float) -> None:
        while True:
            with self._lock:
                request = self._member.commit_request(offsets)
            response = self._call(request, deadline, OffsetCommitResponse)
            with self._lock:
                done = self._member.on_commit_response(request, response, self._clock.now_ms())
                if done:
                    self._last_committed.update(offsets)
            if done:
                return
            self._retry_pause(deadline, "offset commit")

    def _commit_quietly(self, deadline: float) -> None:
        """Auto-commit before a revocation or close; a failure is logged, not raised (as in Kafka)."""
        with self._lock:
            offsets = {tp: p for tp, p in self._positions.items() if tp in self._member.assignment}
        if not offsets:
            return
        try:
            self._commit_sync(offsets, deadline)
        except (ConsumerError, TimeoutError) as e:
            log.warning("auto-commit of %s failed: %s", offsets, e)

    def _maybe_auto_commit(self) -> None:
        """Asynchronous auto-commit of changed positions every ``auto_commit_interval_ms`` (inside poll)."""
        if not self._enable_auto_commit:
            return
        with self._lock:
            now = self._clock.now_ms()
            call = self._auto_commit
            if call is not None:
                if not call[1].done():
                    return
                self._auto_commit = None
        if call is not None:
            self._finish_auto_commit(*call)
        with self._lock:
            member = self._member
            if now < self._next_auto_commit_ms or member.state is not MemberState.STABLE:
                return
            self._next_auto_commit_ms = now + self._auto_commit_interval_ms
            offsets = {tp: p for tp, p in self._positions.items()
                       if tp in member.assignment and self._last_committed.get(tp) != p}
            if not offsets:
                return
            request = member.commit_request(offsets)
        future = self._send(request)
        with self._lock:
            self._auto_commit = (request, future, offsets)
        if future.done():
            with self._lock:
                self._auto_commit = None
            self._finish_auto_commit(request, future, offsets)

    def _finish_auto_commit(self, request: Any, future: concurrent.futures.Future, offsets: dict) -> None:
        response = self._result(future, OffsetCommitResponse)
        with self._lock:
            try:
                if self._member.on_commit_response(request, response, self._clock.now_ms()):
                    self._last_committed.update(offsets)
                else:
                    self._next_auto_commit_ms = self._clock.now_ms() + self._retry_backoff_ms
            except ConsumerError as e:
                log.warning("auto-commit of %s failed: %s", offsets, e)
