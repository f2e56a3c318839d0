"""The consumer's I/O: the heartbeat thread and the calls into the client, for ``raygroups.Consumer``.

Split out of ``consumer.py`` by concern; it relies on the consumer's ``_member``, ``_lock``, ``_clock``,
``_cluster``/``_client`` and thread fields. Guarantees: ``_lock`` is never held while calling the client or
waiting, so the heartbeat thread cannot deadlock with the application thread; a client that raises or a
call that fails becomes a ``COORDINATOR_NOT_AVAILABLE`` answer, so the member rediscovers and retries as
Kafka's client does. Logs under ``raygroups.consumer``, as before the split.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from typing import Any

from raygroups.consumer_support import _kwargs
from raygroups.coordinator.errors import Errors
from raygroups.coordinator.messages import HeartbeatResponse, LeaveGroupRequest, OffsetCommitResponse

log = logging.getLogger("raygroups.consumer")


class ConsumerIOMixin:
    """The heartbeat thread and client calls of ``Consumer`` (see the module docstring); not usable alone."""

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
            interval_s = self._member.heartbeat_interval_ms / 1000.0
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
                future = self._send("heartbeat", request)
                future.add_done_callback(lambda _f: self._wake.set())
                with self._lock:
                    self._heartbeat_call = (request, future)
                self._collect_heartbeat()

    def _collect_heartbeat(self) -> None:
        with self._lock:
            call = self._heartbeat_call
            if call is None or not call[1].done():
                return
            self._heartbeat_call = None
        response = self._result(call[1], HeartbeatResponse)
        with self._lock:
            self._member.on_heartbeat_response(call[0], response, self._clock.now_ms())

    def _send_leave(self, request: LeaveGroupRequest | None, wait_s: float = 0.0) -> None:
        if request is None:
            return
        future = self._send("leave_group", request)
        try:
            response = future.result(timeout=wait_s) if wait_s > 0 or future.done() else None
        except Exception as e:
            log.info("LeaveGroup failed: %s", e)
            return
        if response is not None and response.error is not Errors.NONE:
            log.info("LeaveGroup answered %s", response.error.name)

    # ------------------------------------------------------------------------------------------
    # Calls into the client
    # ------------------------------------------------------------------------------------------
    def _send(self, method_name: str, request: Any) -> concurrent.futures.Future:
        """Submit ``request``; a client that raises (e.g. the deployment is unreachable) yields a future
        answering COORDINATOR_NOT_AVAILABLE, so the member rediscovers and retries as Kafka's client does.
        After the member rediscovered its coordinator, a fresh ``cluster.client()`` is used."""
        try:
            with self._lock:
                if self._member.rediscoveries != self._client_generation:
                    self._client_generation = self._member.rediscoveries
                    self._client = self._cluster.client()
                client = self._client
            return getattr(client, method_name)(**_kwargs(request))
        except (TypeError, ValueError):
            raise
        except Exception as e:
            log.info("%s failed: %s", type(request).__name__, e)
            future: concurrent.futures.Future = concurrent.futures.Future()
            future.set_exception(e)
            return future

    @staticmethod
    def _result(future: concurrent.futures.Future, response_type: type) -> Any:
        try:
            return future.result(timeout=0)
        except Exception as e:
            log.info("request failed: %s", e)
        if response_type is OffsetCommitResponse:
            return OffsetCommitResponse({("", 0): Errors.COORDINATOR_NOT_AVAILABLE})
        return response_type(Errors.COORDINATOR_NOT_AVAILABLE)

    def _call(self, method_name: str, request: Any, deadline: float, response_type: type) -> Any:
        future = self._send(method_name, request)
        try:
            future.result(timeout=max(0.0, deadline - time.monotonic()))
        except concurrent.futures.TimeoutError:
            # The caller gives up: so does the client, which would otherwise go on retrying in the background
            # and could apply an older commit after a newer one (as Kafka's commitSync stops retrying when
            # its timer expires).
            future.cancel()
            raise TimeoutError(f"{type(request).__name__} got no answer in time") from None
        except Exception:
            pass
        return self._result(future, response_type)

    def _retry_pause(self, deadline: float, what: str) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"{what} did not succeed before the timeout")
        pause = min(remaining, self._retry_backoff_ms / 1000.0)
        (self._sleep if self._real_time else time.sleep)(pause)
