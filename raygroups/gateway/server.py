"""The listener: Kafka's request loop over TCP on an asyncio event loop.

Per connection, requests are answered one at a time in the order they arrive, as Kafka's broker does (it
mutes a channel while a request is in flight), so a commit and a fetch of offsets on one connection are
never reordered. A JoinGroup that parks for a rebalance holds only its own connection; the loop never
blocks on the coordinator (answers are awaited) or on the source (it runs on a thread pool).

Bad input never harms the deployment or other connections (Kafka's ``SocketServer``/``KafkaApis``):
a frame size outside [8, ``max_request_bytes``] (``socket.request.max.bytes``), an unknown API key, an
unsupported version of any API but ApiVersions, or a request that does not parse closes that connection;
an ApiVersions of an unknown version is answered UNSUPPORTED_VERSION in a v0 body (KIP-511) and the
connection stays open. Read-ahead is bounded (``max_in_flight_requests`` frames and ``max_request_bytes``
bytes per connection), and a client that stops reading stops being read from: it can hold the memory of
one answer, never more. Connections beyond ``max_connections`` are closed at once, and a connection idle
for ``connections_max_idle_ms`` (or whose answer cannot be written for that long) is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import threading
import time
from dataclasses import dataclass

from raygroups.coordinator.errors import Errors
from raygroups.coordinator.messages import check_int
from raygroups.gateway import wire
from raygroups.gateway.apis import API_TABLE, API_VERSIONS_KEY, Call, api_versions_body

log = logging.getLogger("raygroups.gateway")

_SIZE = struct.Struct(">i")
MIN_FRAME_BYTES = 8  # api key, api version and correlation id


@dataclass(frozen=True)
class GatewayLimits:
    """The listener's limits, named after Kafka's broker settings."""

    max_request_bytes: int = 104_857_600  # socket.request.max.bytes
    max_connections: int = 1_000  # max.connections (Kafka's is unbounded by default)
    max_in_flight_requests: int = 32  # frames read ahead per connection while one is answered
    connections_max_idle_ms: int = 600_000  # connections.max.idle.ms
    fetch_max_bytes: int = 57_671_680  # fetch.max.bytes: the most one Fetch answer carries

    def __post_init__(self) -> None:
        check_int("max_request_bytes", self.max_request_bytes, MIN_FRAME_BYTES, 2**31 - 1)
        check_int("max_connections", self.max_connections, 1, 1_000_000)
        check_int("max_in_flight_requests", self.max_in_flight_requests, 1, 10_000)
        check_int("connections_max_idle_ms", self.connections_max_idle_ms, 1, 2**31 - 1)
        check_int("fetch_max_bytes", self.fetch_max_bytes, 1, 2**31 - 1)


class _Close(Exception):
    """Close this connection (Kafka's answer to a frame it will not serve)."""


class Listener:
    """Serves Kafka requests for one ``Broker`` on its own event loop thread."""

    def __init__(self, broker, limits: GatewayLimits) -> None:
        self.broker = broker
        self.limits = limits
        self.loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task] = set()
        self._thread = threading.Thread(target=self.loop.run_forever, name="raygroups-gateway", daemon=True)
        self.requests: dict[str, int] = {}
        self.closed_connections: dict[str, int] = {}

    def start(self, host: str, port: int) -> tuple[str, int]:
        self._thread.start()
        try:
            return asyncio.run_coroutine_threadsafe(self._listen(host, port), self.loop).result(timeout=30)
        except BaseException:
            self._stop_loop()
            raise

    async def _listen(self, host: str, port: int) -> tuple[str, int]:
        self._server = await asyncio.start_server(self._connection, host, port, reuse_address=True)
        bound = self._server.sockets[0].getsockname()
        return bound[0], bound[1]

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._close(), self.loop).result(timeout=10)
        self._stop_loop()

    def _stop_loop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def stats(self) -> dict:
        """Requests served by API name, connections open, connections closed by reason, and the CPU
        seconds the listener's event loop thread has used."""
        async def read() -> dict:
            return {"requests": dict(self.requests), "connections": len(self._connections),
                    "closed_connections": dict(self.closed_connections), "loop_cpu_s": time.thread_time()}
        return asyncio.run_coroutine_threadsafe(read(), self.loop).result(timeout=10)

    # --- one connection ----------------------------------------------------------------------------
    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._connections) >= self.limits.max_connections:
            self._count_close("max_connections")
            writer.close()
            return
        task = asyncio.current_task()
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        client_host = "/" + (peer[0] if peer else "unknown")
        frames: asyncio.Queue = asyncio.Queue(self.limits.max_in_flight_requests)
        budget = _ByteBudget(self.limits.max_request_bytes)
        read_ahead = asyncio.create_task(self._read_frames(reader, frames, budget))
        idle_s = self.limits.connections_max_idle_ms / 1000.0
        try:
            while True:
                frame = await frames.get()
                if frame is None:
                    break
                budget.release(len(frame))
                try:
                    out = await self._answer(frame, client_host)
                except _Close as why:
                    self._count_close(str(why))
                    break
                if out:
                    writer.write(out)
                    await asyncio.wait_for(writer.drain(), idle_s)
        except (TimeoutError, ConnectionError):
            self._count_close("write stalled or reset")
        except asyncio.CancelledError:
            pass
        finally:
            read_ahead.cancel()
            with contextlib.suppress(BaseException):
                await read_ahead
            writer.close()
            self._connections.discard(task)

    async def _read_frames(self, reader: asyncio.StreamReader, frames: asyncio.Queue, budget: _ByteBudget) -> None:
        idle_s = self.limits.connections_max_idle_ms / 1000.0
        try:
            while True:
                head = await asyncio.wait_for(reader.readexactly(4), idle_s)
                (size,) = _SIZE.unpack(head)
                if not MIN_FRAME_BYTES <= size <= self.limits.max_request_bytes:
                    # Kafka's InvalidReceiveException: the size is outside what the broker accepts.
                    self._count_close("frame size outside [8, max_request_bytes]")
                    break
                await budget.take(size)
                await frames.put(await asyncio.wait_for(reader.readexactly(size), idle_s))
        except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
            pass
        await frames.put(None)

    def _count_close(self, reason: str) -> None:
        self.closed_connections[reason] = self.closed_connections.get(reason, 0) + 1

    # --- one request -------------------------------------------------------------------------------
    async def _answer(self, frame: bytes, client_host: str) -> bytes:
        api_key, api_version, correlation_id = wire.peek_header(frame)
        api = API_TABLE.get(api_key)
        if api is None:
            raise _Close("unknown api key")
        self.requests[api.name] = self.requests.get(api.name, 0) + 1
        if not api.min_version <= api_version <= api.max_version:
            if api_key == API_VERSIONS_KEY:
                # KIP-511: the client retries with a version from this v0 answer's ApiVersions range.
                body = wire.response(API_VERSIONS_KEY, 0, api_versions_body(Errors.UNSUPPORTED_VERSION))
                return wire.encode_response(API_VERSIONS_KEY, 0, correlation_id, body)
            raise _Close("unsupported version")
        try:
            decoded = wire.decode_request(frame)
        except wire.MalformedRequest as e:
            log.debug("closing a connection from %s: %s", client_host, e)
            raise _Close("malformed request") from None
        try:
            answer = await api.handler(self.broker, Call(decoded, client_host))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s v%d from %s failed; closing the connection", api.name, api_version, client_host)
            raise _Close("handler failed") from None
        if answer is None:
            return b""
        return wire.encode_response(api_key, api_version, correlation_id, wire.response(api_key, api_version, answer))


class _ByteBudget:
    """The bytes of frames read ahead and not yet answered: at most ``limit``, except that one frame is
    always let through (a frame may be as large as the limit itself)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._freed = asyncio.Event()

    async def take(self, size: int) -> None:
        while self.used > 0 and self.used + size > self.limit:
            self._freed.clear()
            await self._freed.wait()
        self.used += size

    def release(self, size: int) -> None:
        self.used -= size
        self._freed.set()
