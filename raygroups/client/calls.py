"""A consumer's calls into its deployment's client (``cluster.client()``).

A client that raises, or a call that fails, becomes a ``COORDINATOR_NOT_AVAILABLE`` answer, so the member
rediscovers and retries as Kafka's client does; after a rediscovery a fresh ``cluster.client()`` is used.
Nothing here holds the consumer's lock, so the heartbeat thread cannot deadlock with the application thread.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from typing import Any

from raygroups.coordinator.errors import Errors
from raygroups.coordinator.messages import OffsetCommitResponse

log = logging.getLogger("raygroups.client.consumer")


class CoordinatorCalls:
    """The consumer's client and the calls it makes through it (thread-safe)."""

    def __init__(self, cluster: Any) -> None:
        self._cluster = cluster
        self.client = cluster.client()
        self._generation = 0  # the member's rediscoveries when ``client`` was obtained
        self._lock = threading.Lock()

    def send(self, request: Any, rediscoveries: int) -> concurrent.futures.Future:
        """Submit ``request`` as the member built it (the client validates it, once); a client that raises (e.g. the deployment is unreachable) yields a future
        that fails, which ``result`` reads as COORDINATOR_NOT_AVAILABLE. ``rediscoveries``: how often the
        member has rediscovered its coordinator (a new count asks for a fresh client)."""
        try:
            with self._lock:
                if rediscoveries != self._generation:
                    self._generation = rediscoveries
                    self.client = self._cluster.client()
                client = self.client
            return client.send(request)
        except (TypeError, ValueError):
            raise
        except Exception as e:
            log.info("%s failed: %s", type(request).__name__, e)
            future: concurrent.futures.Future = concurrent.futures.Future()
            future.set_exception(e)
            return future

    @staticmethod
    def result(future: concurrent.futures.Future, response_type: type) -> Any:
        try:
            return future.result(timeout=0)
        except Exception as e:
            log.info("request failed: %s", e)
        if response_type is OffsetCommitResponse:
            return OffsetCommitResponse({("", 0): Errors.COORDINATOR_NOT_AVAILABLE})
        return response_type(Errors.COORDINATOR_NOT_AVAILABLE)

    def call(self, request: Any, deadline: float, response_type: type, rediscoveries: int) -> Any:
        future = self.send(request, rediscoveries)
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
        return self.result(future, response_type)
