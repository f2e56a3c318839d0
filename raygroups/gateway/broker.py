"""What one listener knows as a Kafka broker: the group API it forwards to, the topics it serves from its
source, and where it stands among the deployment's listeners (``Topology``).

Topic data is the source's, read-only: record i of a partition at offset i, the log start offset the
source's ``start_offset`` (0 without one), the high watermark its ``end_offset``. A topic registered with
the deployment that the source does not have is listed and served empty, so that offsets committed
through the Python API for it can be read and managed by Kafka admin tools.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from raygroups.coordinator.errors import Errors
from raygroups.gateway.records import BATCH_OVERHEAD_BYTES, encode_batch, record_size
from raygroups.gateway.topology import BrokerAddress, Topology
from raygroups.sources import Source

# ListOffsets' special timestamps (Kafka's ListOffsetsRequest).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
MAX_SOURCE_TIMESTAMP = 2**62  # the latest time a source is asked about (Source.offset_for_time's range)

TOPICS_TTL_S = 1.0  # how long the deployment's topic registry is cached between Metadata requests
MAX_RECORDS_PER_PARTITION_FETCH = 20_000
FETCH_POLL_S = 0.05  # how often a waiting Fetch (min_bytes not reached) looks for new records


class Broker:
    """The state the API handlers read. Source calls run on a small thread pool, never on the listener's
    event loop (a user's source may block); the source must allow calls from several threads."""

    def __init__(self, cluster: Any, source: Source | None, topology: Topology, cluster_id: str,
                 fetch_max_bytes: int) -> None:
        self.client = cluster.client()
        self.cluster = cluster
        self.source = source
        self.topology = topology
        self.cluster_id = cluster_id
        self.fetch_max_bytes = fetch_max_bytes
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="raygroups-gateway-source")
        # The topic registry is read on a thread of its own, so that Metadata never waits behind source reads.
        self._registry = ThreadPoolExecutor(max_workers=1, thread_name_prefix="raygroups-gateway-topics")
        self._source_topics = dict(source.topics()) if source is not None else {}
        self._topics: dict[str, int] = dict(self._source_topics)
        self._topics_at = -1.0

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._registry.shutdown(wait=False, cancel_futures=True)

    # --- topology ----------------------------------------------------------------------------------
    def brokers(self) -> list[BrokerAddress]:
        return self.topology.brokers()

    def controller_id(self) -> int:
        return self.topology.controller_id()

    def leader_of(self, topic: str, partition: int) -> int:
        return self.topology.leader_of(topic, partition)

    def serves_group(self, group_id: str) -> bool:
        return self.topology.serves_group(group_id)

    async def find_coordinator(self, group_id: str) -> dict:
        return await self.topology.find_coordinator(group_id)

    # --- topics --------------------------------------------------------------------------------------
    async def topics(self) -> dict[str, int]:
        now = time.monotonic()
        if now - self._topics_at >= TOPICS_TTL_S:
            registered = await asyncio.get_running_loop().run_in_executor(self._registry, self.cluster.topics)
            self._topics = {**registered, **self._source_topics}
            self._topics_at = now
        return self._topics

    def _bounds(self, topic: str, partition: int) -> tuple[int, int]:
        """(log start offset, high watermark)."""
        if topic not in self._source_topics:
            return 0, 0
        start = getattr(self.source, "start_offset", None)
        return (0 if start is None else start(topic, partition)), self.source.end_offset(topic, partition)

    async def list_offsets(self, wanted: list[tuple[str, int, int]]) -> list[dict]:
        topics = await self.topics()
        return await asyncio.get_running_loop().run_in_executor(self._pool, self._list_offsets, topics, wanted)

    def _list_offsets(self, topics: dict[str, int], wanted: list[tuple[str, int, int]]) -> list[dict]:
        answers = []
        for topic, partition, timestamp in wanted:
            if not 0 <= partition < topics.get(topic, 0):
                answers.append({"error_code": Errors.UNKNOWN_TOPIC_OR_PARTITION, "timestamp": -1, "offset": -1})
                continue
            start, end = self._bounds(topic, partition)
            if timestamp == LATEST_TIMESTAMP:
                offset = end
            elif timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
                offset = start
            elif timestamp == MAX_TIMESTAMP:
                offset = end - 1 if end > start else -1
            elif timestamp < 0:
                answers.append({"error_code": Errors.INVALID_REQUEST, "timestamp": -1, "offset": -1})
                continue
            else:
                for_time = getattr(self.source, "offset_for_time", None)
                found = None if (for_time is None or topic not in self._source_topics
                                 or timestamp > MAX_SOURCE_TIMESTAMP) else for_time(topic, partition, timestamp)
                if found is None:
                    # Kafka's UNKNOWN_OFFSET and UNKNOWN_TIMESTAMP: no record at or after that time.
                    answers.append({"error_code": Errors.NONE, "timestamp": -1, "offset": -1})
                    continue
                offset = found
            answers.append({"error_code": Errors.NONE, "timestamp": -1 if timestamp < 0 else timestamp,
                            "offset": offset})
        return answers

    # --- fetch ---------------------------------------------------------------------------------------
    async def fetch(self, wanted: list[tuple[str, int, int, int]], max_wait_ms: int, min_bytes: int,
                    max_bytes: int) -> list[dict]:
        """Kafka's fetch: records from each partition's fetch offset within the byte budgets (at least one
        record of the first partition that has any, KIP-74), waiting up to ``max_wait_ms`` for
        ``min_bytes`` (Kafka's fetch purgatory, polled)."""
        topics = await self.topics()
        loop = asyncio.get_running_loop()
        budget = max(1, min(max_bytes, self.fetch_max_bytes))
        deadline = time.monotonic() + max(0, max_wait_ms) / 1000.0
        while True:
            answers, size = await loop.run_in_executor(self._pool, self._fetch, topics, wanted, budget)
            if size >= max(min_bytes, 1) or time.monotonic() >= deadline:
                return answers
            await asyncio.sleep(min(FETCH_POLL_S, max(0.0, deadline - time.monotonic())))

    def _fetch(self, topics: dict[str, int], wanted: list[tuple[str, int, int, int]],
               budget: int) -> tuple[list[dict], int]:
        answers = []
        total = 0
        now_ms = int(time.time() * 1000)
        for topic, partition, offset, partition_max_bytes in wanted:
            if not 0 <= partition < topics.get(topic, 0):
                answers.append({"error_code": Errors.UNKNOWN_TOPIC_OR_PARTITION, "high_watermark": -1,
                                "log_start_offset": -1, "records": b""})
                continue
            start, end = self._bounds(topic, partition)
            answer = {"error_code": Errors.NONE, "high_watermark": end, "log_start_offset": start, "records": b""}
            answers.append(answer)
            if not start <= offset <= end:
                answer["error_code"] = Errors.OFFSET_OUT_OF_RANGE
                continue
            room = min(partition_max_bytes, budget - total)
            if offset == end or (room <= BATCH_OVERHEAD_BYTES and total > 0):
                continue
            records = self.source.read(topic, partition, offset, min(end - offset, MAX_RECORDS_PER_PARTITION_FETCH))
            kept, size = [], BATCH_OVERHEAD_BYTES
            for r in records:
                size += record_size(r)
                if size > room and (kept or total > 0):
                    break
                kept.append(r)
            if kept:
                batch = encode_batch(kept, now_ms)
                answer["records"] = batch
                total += len(batch)
        return answers, total
