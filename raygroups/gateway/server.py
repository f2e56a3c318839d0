"""The listener: Kafka's request loop over TCP on an asyncio event loop.

Per connection, requests are answered one at a time in the order they arrive, as Kafka's broker does (it
mutes a channel while a request is in flight), so a commit and a fetch of offsets on one connection are
never reordered. A JoinGroup that parks for a rebalance holds only its own connection; the loop never
blocks on the coordinator (answers are awaited) or on the source (it runs on a thread pool).

Bad input never harms the deployment or other connections (Kafka's ``SocketServer``/``KafkaApis``):
a frame size outside [8, ``max_request_bytes``] (``socket.request.max.bytes``) closes the connection
before anything more is read; an unknown API key, an unsupported version of any API but ApiVersions, a
request that does not parse, or a handler that fails closes that connection; an ApiVersions of an unknown
version is answered UNSUPPORTED_VERSION in a v0 body (KIP-511) and the connection stays open.

Memory per connection is bounded whatever the client does. Read-ahead: at most ``max_in_flight_requests``
frames read and not yet answered, of at most ``max_request_bytes`` bytes together (one frame is always let
through), plus the stream's own buffer (asyncio stops reading the socket beyond 128 KiB). Answers: the
next request is answered only once the previous answer has gone to the socket, so a client that stops
reading holds at most one answer (plus the transport's 64 KiB high-water mark); after
``connections_max_idle_ms`` without the client taking it, its connection is closed.

Connections: beyond ``max_connections`` a new one is closed at once. One with nothing in flight that
sends nothing for ``connections_max_idle_ms`` is closed (Kafka's ``connections.max.idle.ms``); one that
waits for its answer (a parked JoinGroup) is not idle. A client that closes its side ends its connection
at once, whatever its requests are waiting for, and their answers are dropped (as Kafka drops answers to
a closed channel): a client cannot hold a slot after it has gone.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import struct
import threading
import time
from dataclasses import dataclass

from raygroups.coordinator.errors import Errors
from raygroups.coordinator.messages import check_int
from raygroups.gateway import wire
from raygroups.gateway.apis import API_TABLE, API_VERSIONS_KEY, Call, CloseConnection, api_versions_body

log = logging.getLogger("raygroups.gateway")

_SIZE = struct.Struct(">i")
MIN_FRAME_BYTES = 8  # api key, api version and correlation id


@dataclass(frozen=True)
class GatewayLimits:
    """The listener's limits, named after Kafka's broker settings. Each bounds what one client can make
    the gateway hold: a frame, its read-ahead, its connections, its idle time, one Fetch answer. Nothing
    bounds the sum over all connections (as Kafka's ``queued.max.request.bytes``, unbounded by default):
    at worst about ``max_connections`` x (``max_request_bytes`` + ``fetch_max_bytes``)."""

    # socket.request.max.bytes is 100 MiB in Kafka, sized for Produce; the gateway refuses Produce, and its
    # largest requests (JoinGroup's metadata, a commit of many partitions) are far smaller, while a frame
    # of small array elements decodes into many Python objects.
    max_request_bytes: int = 8_388_608  # the largest frame accepted
    max_connections: int = 1_000  # max.connections (Kafka's is unbounded by default)
    max_in_flight_requests: int = 32  # frames read and not yet answered, per connection
    connections_max_idle_ms: int = 600_000  # connections.max.idle.ms
    fetch_max_bytes: int = 57_671_680  # fetch.max.bytes: the most one Fetch answer carries

    def __post_init__(self) -> None:
        check_int("max_request_bytes", self.max_request_bytes, MIN_FRAME_BYTES, 2**31 - 1)
        check_int("max_connections", self.max_connections, 1, 1_000_000)
        check_int("max_in_flight_requests", self.max_in_flight_requests, 1, 10_000)
        check_int("connections_max_idle_ms", self.connections_max_idle_ms, 1, 2**31 - 1)
        check_int("fetch_max_bytes", self.fetch_max_bytes, 1, 2**31 - 1)


class _Close(Exception):
    """Close this connection (Kafka's answer to a frame it will not serve); the message is the reason
    counted in ``stats()["closed_connections"]``."""


class Listener:
    """Serves Kafka requests for one ``Broker`` on an event loop: its own, on a thread of its own, or
    (``loop``) the loop of the group client it forwards to, so that a request crosses no thread between the
    socket and the client. ``stop()`` closes the listening socket and every connection, and ends its own
    thread (a loop it was given stays its owner's); it is idempotent."""

    def __init__(self, broker, limits: GatewayLimits, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.broker = broker
        self.limits = limits
        self.loop = asyncio.new_event_loop() if loop is None else loop
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task, _Connection] = {}
        self._thread = threading.Thread(target=self.loop.run_forever, name="raygroups-gateway", daemon=True) \
            if loop is None else None
        self._loop_thread_id: int | None = None  # the loop's thread, once it ran something of ours
        self._stop_lock = threading.Lock()
        self._closing = False
        self._stopped = False
        self.requests: dict[str, int] = {}
        self.closed_connections: dict[str, int] = {}
        self._loop_cpu_s = 0.0  # the loop thread's CPU time, as last read on it

    def _loop_runs(self) -> bool:
        if self._thread is not None:
            return self._thread.is_alive() and not self.loop.is_closed()
        return not self.loop.is_closed() and self.loop.is_running()

    def start(self, host: str, port: int) -> tuple[str, int]:
        if self._thread is not None:
            self._thread.start()
        try:
            return asyncio.run_coroutine_threadsafe(self._listen(host, port), self.loop).result(timeout=30)
        except BaseException:
            self._stop_loop()
            raise

    async def _listen(self, host: str, port: int) -> tuple[str, int]:
        self._loop_thread_id = threading.get_ident()
        self._server = await asyncio.start_server(self._connection, host, port, reuse_address=True)
        bound = self._server.sockets[0].getsockname()
        return bound[0], bound[1]

    def stop(self) -> None:
        with self._stop_lock:
            if self._stopped:
                return
            self._stopped = True
            if self._loop_runs():
                with contextlib.suppress(Exception):
                    asyncio.run_coroutine_threadsafe(self._close(), self.loop).result(timeout=10)
            self._stop_loop()

    def _stop_loop(self) -> None:
        if self._thread is None:
            return  # the loop is its owner's to stop
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self.loop.close()

    async def _close(self) -> None:
        self._loop_cpu_s = time.thread_time()
        self._closing = True  # a connection accepted meanwhile closes as it starts
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        await asyncio.sleep(0)  # the transports' own closing callbacks

    def stats(self) -> dict:
        """Requests served by API name, connections open, connections closed by reason, what the open
        connections hold (``read_ahead_frames`` and ``read_ahead_bytes``: frames read and not yet answered;
        ``unsent_bytes``: answers not yet taken by the sockets), and the CPU seconds the listener's event
        loop thread has used (the group client's work included, when the listener runs on its loop). After
        ``stop()``: the counters, nothing open."""
        def read() -> dict:
            if self._loop_thread_id == threading.get_ident():
                self._loop_cpu_s = time.thread_time()
            conns = list(self._connections.values())
            return {"requests": dict(self.requests), "connections": len(conns),
                    "closed_connections": dict(self.closed_connections),
                    "read_ahead_frames": sum(c.frames for c in conns),
                    "read_ahead_bytes": sum(c.bytes for c in conns),
                    "unsent_bytes": sum(c.unsent_bytes() for c in conns),
                    "loop_cpu_s": self._loop_cpu_s}
        async def on_loop() -> dict:
            return read()
        try:
            if not self._stopped and self._loop_runs():
                return asyncio.run_coroutine_threadsafe(on_loop(), self.loop).result(timeout=10)
        except (RuntimeError, concurrent.futures.TimeoutError):
            if self._loop_runs():
                raise
        return read()  # stopped (or stopping): nothing runs on the loop any more

    # --- one connection ----------------------------------------------------------------------------
    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._closing or len(self._connections) >= self.limits.max_connections:
            self._count_close("gateway stopped" if self._closing else "max_connections")
            writer.close()
            return
        task = asyncio.current_task()
        conn = _Connection(reader, writer, self.limits)
        self._connections[task] = conn
        read_ahead = asyncio.create_task(self._read_frames(conn))
        # When reading ends (the client closed, or the gateway will not read on), the connection ends at
        # once, whatever it is waiting for: a parked JoinGroup or a long Fetch holds no slot after its
        # client has gone (Kafka drops the answers to a closed channel).
        read_ahead.add_done_callback(lambda _: None if conn.reason == "" else task.cancel())
        idle_s = self.limits.connections_max_idle_ms / 1000.0
        try:
            while True:
                frame = await conn.queue.get()
                if frame is None:
                    break
                try:
                    out = await self._answer(frame, conn.client_host)
                except _Close as why:
                    conn.end(str(why))
                    break
                if out:
                    if writer.is_closing():
                        conn.end("closed by the client")
                        break
                    writer.write(out)
                    async with asyncio.timeout(idle_s):
                        await writer.drain()
                conn.answered(len(frame))
        except TimeoutError:
            conn.end("answer not read for connections_max_idle_ms")
        except ConnectionError:
            conn.end("closed by the client")
        except asyncio.CancelledError:
            conn.end("gateway stopped")
        except Exception:
            log.exception("a connection from %s failed; closing it", conn.client_host)
            conn.end("internal error")
        finally:
            self._count_close(conn.reason or "closed")
            conn.reason = ""  # from here on, the end of reading cancels nothing
            read_ahead.cancel()
            with contextlib.suppress(BaseException):
                await read_ahead
            writer.close()
            del self._connections[task]

    async def _read_frames(self, conn: _Connection) -> None:
        """Read frames into the connection's queue while its read-ahead allows; returns (ending the
        connection) when the client closes or the gateway will not read on."""
        idle_s = self.limits.connections_max_idle_ms / 1000.0
        in_frame = False
        try:
            while True:
                head = await self._read_header(conn)
                if head is None:
                    conn.end("idle")
                    return
                (size,) = _SIZE.unpack(head)
                if not MIN_FRAME_BYTES <= size <= self.limits.max_request_bytes:
                    # Kafka's InvalidReceiveException: closed before a byte of the body is read.
                    conn.end("frame size outside [8, max_request_bytes]")
                    return
                in_frame = True
                await conn.reserve(size)
                async with asyncio.timeout(idle_s):
                    frame = await conn.reader.readexactly(size)
                in_frame = False
                conn.active()
                conn.queue.put_nowait(frame)
        except (asyncio.IncompleteReadError, TimeoutError) as e:
            partial = isinstance(e, asyncio.IncompleteReadError) and e.partial
            conn.end("truncated frame" if in_frame or partial else "closed by the client")
        except ConnectionError:
            conn.end("closed by the client")
        finally:
            conn.queue.put_nowait(None)  # also ends the queue, should the cancellation be lost

    async def _read_header(self, conn: _Connection) -> bytes | None:
        """The next frame's size bytes, or None once the connection has been idle (nothing read or
        answered, nothing in flight) for ``connections_max_idle_ms``."""
        idle_s = self.limits.connections_max_idle_ms / 1000.0
        while True:
            wait_s = idle_s if conn.frames else conn.last_active + idle_s - time.monotonic()
            if wait_s <= 0:
                return None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    head = await conn.reader.readexactly(4)
                conn.active()
                return head

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
        except Exception as e:  # noqa: BLE001 - whatever the decoder raises, the frame is Kafka's malformed
            log.debug("closing a connection from %s: %s", client_host, e)
            raise _Close("malformed request") from None
        try:
            answer = await api.handler(self.broker, Call(decoded, client_host))
            if answer is None:
                return b""
            return wire.encode_response(api_key, api_version, correlation_id,
                                        wire.response(api_key, api_version, answer))
        except asyncio.CancelledError:
            raise
        except CloseConnection as why:
            raise _Close(str(why)) from None
        except Exception:
            log.exception("%s v%d from %s failed; closing the connection", api.name, api_version, client_host)
            raise _Close("handler failed") from None


class _Connection:
    """One client's state: its streams, the frames read and not yet answered (at most
    ``max_in_flight_requests`` of at most ``max_request_bytes`` together, except that one frame is always
    let through) and when it last made progress."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, limits: GatewayLimits) -> None:
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.client_host = "/" + (str(peer[0]) if peer else "unknown")
        self.max_frames = limits.max_in_flight_requests
        self.max_bytes = limits.max_request_bytes
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()  # None: reading has ended
        self.reason: str | None = None  # why it ended, once it has; "" while it is being closed
        self.frames = 0
        self.bytes = 0
        self.last_active = time.monotonic()
        self._room = asyncio.Event()

    def end(self, reason: str) -> None:
        """Record why the connection ends (the first reason wins)."""
        if self.reason is None:
            self.reason = reason

    def active(self) -> None:
        self.last_active = time.monotonic()

    async def reserve(self, size: int) -> None:
        while self.frames >= self.max_frames or (self.frames and self.bytes + size > self.max_bytes):
            self._room.clear()
            await self._room.wait()
        self.frames += 1
        self.bytes += size

    def answered(self, size: int) -> None:
        self.frames -= 1
        self.bytes -= size
        self.active()
        self._room.set()

    def unsent_bytes(self) -> int:
        transport = self.writer.transport
        return 0 if transport.is_closing() else transport.get_write_buffer_size()
