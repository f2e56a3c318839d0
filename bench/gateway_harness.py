"""What ``bench/gateway.py`` measures with: a group of librdkafka consumers (confluent-kafka) driven from
threads, and what a measurement window cost (the gateway's requests and loop CPU, the Ray client thread's
CPU, this process's CPU)."""

from __future__ import annotations

import os
import resource
import threading
import time

from confluent_kafka import Consumer as KafkaConsumer

CLIENT_THREAD = "raygroups-client"  # the Ray client's loop thread (raygroups.client.ray_client)
SOURCE_THREADS = "raygroups-gateway-source"  # the gateway's thread pool for its source (Fetch, ListOffsets)
WARMUP_S = 1.0


# --- what a window cost ------------------------------------------------------------------------------
def thread_cpu_s(prefix: str) -> float | None:
    """CPU seconds used so far by this process's live threads whose names start with ``prefix`` (Linux
    ``/proc``); None when there is none or no ``/proc``."""
    tick = os.sysconf("SC_CLK_TCK")
    total, found = 0.0, False
    for t in threading.enumerate():
        if not t.name.startswith(prefix) or not t.native_id:
            continue
        try:
            with open(f"/proc/self/task/{t.native_id}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        found = True
    return total if found else None


def process_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Window:
    """Counters at the start and the end of a measurement window: the gateway's (when given), the Ray
    client thread's CPU, this process's CPU."""

    def __init__(self, gw=None) -> None:
        self.gw = gw

    def _snap(self) -> dict:
        return {"t": time.perf_counter(), "gw": self.gw.stats() if self.gw else None,
                "client_cpu_s": thread_cpu_s(CLIENT_THREAD), "source_cpu_s": thread_cpu_s(SOURCE_THREADS),
                "process_cpu_s": process_cpu_s()}

    def __enter__(self) -> Window:
        self.start = self._snap()
        return self

    def __exit__(self, *exc: object) -> None:
        self.end = self._snap()

    @property
    def seconds(self) -> float:
        return self.end["t"] - self.start["t"]

    def cpu_s(self, key: str) -> float | None:
        """CPU seconds spent in the window by ``client`` (the Ray client's thread), ``source`` (the
        gateway's source pool: a thread started in the window counts from 0), ``process``, ``loop``."""
        if key == "loop":
            return self.end["gw"]["loop_cpu_s"] - self.start["gw"]["loop_cpu_s"]
        a, b = self.start[f"{key}_cpu_s"], self.end[f"{key}_cpu_s"]
        return None if b is None else b - (a or 0.0)

    def requests(self, api: str | None = None) -> int:
        a, b = self.start["gw"]["requests"], self.end["gw"]["requests"]
        if api is not None:
            return b.get(api, 0) - a.get(api, 0)
        return sum(b.values()) - sum(a.values())

    def costs(self, operations: int) -> dict:
        """CPU microseconds per operation (``operations`` done in the window) and, with a gateway, per
        request it served, with the requests by API."""
        def us(delta: float | None, n: int) -> float | None:
            return None if delta is None or n <= 0 else round(1e6 * delta / n, 1)

        row = {"ray_client_thread_cpu_us_per_op": us(self.cpu_s("client"), operations),
               "process_cpu_us_per_op": us(self.cpu_s("process"), operations)}
        if self.gw is not None:
            loop = self.cpu_s("loop")
            a, b = self.start["gw"]["requests"], self.end["gw"]["requests"]
            row.update({
                "gateway_requests": self.requests(),
                "gateway_requests_by_api": {k: b[k] - a.get(k, 0) for k in sorted(b) if b[k] - a.get(k, 0)},
                "gateway_loop_cpu_us_per_request": us(loop, self.requests()),
                "gateway_loop_busy": round(loop / self.seconds, 3),
            })
        return row


# --- librdkafka members ------------------------------------------------------------------------------
def kafka_consumer(gw, group_id: str, **conf) -> KafkaConsumer:
    return KafkaConsumer({"bootstrap.servers": gw.bootstrap_servers, "group.id": group_id, "log_level": 0,
                          "enable.auto.commit": False, "auto.offset.reset": "earliest", **conf})


class KafkaGroup:
    """``n`` confluent consumers of ``group_id`` subscribed to ``topic``, one thread each polling, until
    ``work`` (when given) takes over the thread. Assigned partitions are paused (no Fetch load: the
    benchmark is about the group APIs). ``events[i]``: member i's last rebalance callback and when."""

    def __init__(self, gw, group_id: str, topic: str, n: int, work=None, **conf) -> None:
        self.group_id = group_id
        self.consumers = [kafka_consumer(gw, group_id, **conf) for _ in range(n)]
        self.topic = topic
        self.assigned: list[list[int] | None] = [None] * n
        self.events: list[tuple[str, float] | None] = [None] * n
        self.history: list[tuple[str, float]] = []  # every callback
        self.errors: dict[str, int] = {}
        self.go = threading.Event()
        self._subscribe = threading.Event()
        self.stop = threading.Event()
        self.counts = [0] * n
        self._work = work
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(n)]
        for t in self._threads:
            t.start()

    def subscribe(self) -> None:
        """Every member subscribes, in its own thread (confluent-kafka serializes calls on a consumer: one
        made from another thread while the member polls may wait long)."""
        self._subscribe.set()

    def _on_assign(self, i: int):
        def cb(consumer, partitions) -> None:
            consumer.assign(partitions)
            consumer.pause(partitions)
            self.assigned[i] = [p.partition for p in partitions]
            self._record(i, "assign")
        return cb

    def _record(self, i: int, kind: str) -> None:
        self.events[i] = (kind, time.perf_counter())
        self.history.append(self.events[i])
        if kind == "revoke":
            self.assigned[i] = None

    def _run(self, i: int) -> None:
        c = self.consumers[i]
        while not self._subscribe.wait(0.1):
            if self.stop.is_set():
                return
        c.subscribe([self.topic], on_assign=self._on_assign(i), on_revoke=lambda _c, _p: self._record(i, "revoke"))
        while not self.stop.is_set() and not (self._work and self.go.is_set()):
            c.poll(0.05)
        if self._work and not self.stop.is_set():
            self._work(self, i, c)

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1

    def all_assigned(self) -> bool:
        return all(e is not None and e[0] == "assign" for e in self.events)

    def close(self) -> None:
        self.stop.set()
        for t in self._threads:
            t.join(timeout=30)
        closers = [threading.Thread(target=c.close, daemon=True) for c in self.consumers]
        for t in closers:
            t.start()
        for t in closers:
            t.join(timeout=60)


def wait_stable(cluster, group_id: str, n: int, ready=lambda: True, timeout_s: float = 180.0) -> None:
    """Until the group is Stable with ``n`` members and ``ready()``."""
    client = cluster.client()
    deadline = time.monotonic() + timeout_s
    while True:
        d = client.describe_groups([group_id]).result(timeout=30)[0]
        if d.group_state == "Stable" and len(d.members) == n and ready():
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"group {group_id} not stable with {n} members after {timeout_s} s: "
                               f"{d.group_state}, {len(d.members)} members")
        time.sleep(0.05)


def measure_counts(counts: list[int], seconds: float) -> tuple[int, float]:
    """Operations counted in ``counts`` during a window of ``seconds`` after a warm-up."""
    time.sleep(WARMUP_S)
    before, t = sum(counts), time.perf_counter()
    time.sleep(seconds)
    return sum(counts) - before, time.perf_counter() - t
