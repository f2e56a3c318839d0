"""The group API over Kafka's protocol: ``KafkaAdminClient`` speaks to a Kafka listener (the raygroups
gateway, or a Kafka broker) given ``bootstrap="HOST:PORT[,HOST:PORT]"``, with no Ray, so that
``raygroups.admin`` runs through it exactly as through ``cluster.client()``.

It serves the admin APIs, as Kafka's ``KafkaAdminClient`` does for ``ConsumerGroupCommand``: ListGroups
(asked of every broker in Metadata, the answers merged), DescribeGroups, OffsetFetch, OffsetCommit,
DeleteGroups and OffsetDelete (each sent to the group's coordinator, found with FindCoordinator), plus the
topics of Metadata (``topics()``). The member APIs (JoinGroup, SyncGroup, Heartbeat, LeaveGroup and
KIP-848's) are not served: ``send`` refuses them with ``NotImplementedError``.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from raygroups.client.api import GroupApi
from raygroups.client.kafka_wire import (
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    FIND_COORDINATOR,
    LIST_GROUPS,
    METADATA,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    BrokerConnection,
    ConnectFailed,
    ProtocolError,
    address,
    error_of,
    parse_bootstrap,
)
from raygroups.coordinator.config import CoordinatorConfig
from raygroups.coordinator.errors import Errors
from raygroups.coordinator.messages import (
    DeleteGroupsRequest,
    DescribedGroup,
    DescribedMember,
    DescribeGroupsRequest,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    PartitionOffset,
)
from raygroups.coordinator.requests import REQUESTS

DEFAULT_TIMEOUT_S = 30.0  # Kafka's request.timeout.ms
# Kafka's retry.backoff.ms growing to retry.backoff.max.ms, each wait jittered by ±20 % (KIP-580).
BACKOFF_START_S = 0.1
BACKOFF_MAX_S = 1.0
BACKOFF_JITTER = 0.2
GROUP_KEY_TYPE = 0  # FindCoordinator's key type of a consumer group
# Kafka's socket.connection.setup.timeout.ms: how long one broker may take to accept a connection (and here
# answer ApiVersions) before the next bootstrap server is tried.
CONNECT_TIMEOUT_S = 10.0


class KafkaAdminClient(GroupApi):
    """``GroupApi`` over Kafka's protocol, after Kafka's ``KafkaAdminClient`` (its ``CoordinatorStrategy``
    and ``ListConsumerGroups`` calls). Every call returns a ``Future`` of the same response dataclass as
    ``cluster.client()``; the calls run one at a time on one private thread.

    Guarantees: a call ends within ``timeout_s`` of being made. A group request goes to the group's
    coordinator; while FindCoordinator or the coordinator answers NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE
    or COORDINATOR_LOAD_IN_PROGRESS, or the coordinator refuses connections, it is retried with backoff, and
    when the time is up the last of those errors is the answer (as the Ray client does), or the refusal a
    ``ConnectionError``. A bootstrap list of which no server accepts a connection fails at once with
    ``ConnectionError`` naming the addresses; no answer in time raises ``TimeoutError`` naming what was
    waited for; a listener that speaks no common version of an API raises ``ProtocolError``.

    Not guaranteed: a request whose connection fails after it was sent is not retried (a DeleteGroups or
    OffsetCommit may have been carried out), its ``ConnectionError`` says so; nothing is read from a
    broker's answer that this project's dataclasses have no field for (throttling, authorized operations).
    """

    def __init__(self, bootstrap: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, client_id: str = "raygroups-admin",
                 config: CoordinatorConfig | None = None) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or not (
                math.isfinite(timeout_s) and timeout_s > 0):
            raise ValueError(f"timeout_s must be a number of seconds > 0, got {timeout_s!r}")
        self.timeout_s = float(timeout_s)
        self.client_id = client_id
        # Validates requests before they are sent, with the limits of Kafka's defaults (message.max.bytes).
        self.config = config if config is not None else CoordinatorConfig()
        self._connections: dict[tuple[str, int], BrokerConnection] = {}
        self._coordinators: dict[str, tuple[str, int]] = {}
        self._rng = random.Random()
        self._lock = threading.Lock()
        self._closed = False
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="raygroups-kafka-admin")
        self._calls: dict[type, Callable[[Any, float], Any]] = {
            ListGroupsRequest: self._list_groups,
            DescribeGroupsRequest: self._describe_groups,
            OffsetFetchRequest: self._fetch_offsets,
            OffsetCommitRequest: self._commit_offsets,
            DeleteGroupsRequest: self._delete_groups,
            OffsetDeleteRequest: self._delete_offsets,
        }

    def __repr__(self) -> str:
        return f"KafkaAdminClient(bootstrap={','.join(address(h, p) for h, p in self.bootstrap)!r})"

    def __enter__(self) -> KafkaAdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Cancel the calls not started, wait for the running one (it ends by its timeout), close the
        connections."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._executor.shutdown(wait=True, cancel_futures=True)
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    # --- GroupApi ---------------------------------------------------------------------------------
    def _submit(self, request: Any, validated: bool = False) -> Future:
        call = self._calls.get(type(request))
        if call is None:
            raise NotImplementedError(f"{type(self).__name__} serves the admin APIs only (ListGroups, DescribeGroups, "
                                      f"OffsetFetch, OffsetCommit, DeleteGroups, OffsetDelete), not "
                                      f"{type(request).__name__}")
        return self._run(call, request)

    def _run(self, call: Callable[[Any, float], Any], request: Any = None) -> Future:
        deadline = time.monotonic() + self.timeout_s
        with self._lock:
            if self._closed:
                raise RuntimeError("this client is closed")
            return self._executor.submit(call, request, deadline)

    def topics(self) -> dict[str, int]:
        """Every topic's partition count, from Metadata (internal topics left out, as Kafka's listTopics)."""
        return self._run(self._topics).result()

    def find_coordinator(self, group_id: str) -> dict:
        """The coordinator of ``group_id``: ``{"node_id", "host", "port", "error"}`` (FindCoordinator, retried
        as a group request is; ``"error"`` is an ``Errors`` name, ``"NONE"`` when found and reachable)."""
        return self._run(self._coordinator_of, group_id).result()

    # --- connections ------------------------------------------------------------------------------
    def _connection(self, host: str, port: int, deadline: float) -> BrokerConnection:
        """The open connection to ``host:port`` (opened and versions negotiated if need be)."""
        connection = self._connections.get((host, port))
        if connection is None or connection.stale():
            connection = BrokerConnection(host, port, self.client_id)
            connection.open(deadline)
            self._connections[(host, port)] = connection
        return connection

    def _any_connection(self, deadline: float) -> BrokerConnection:
        """An open connection to any broker, else the first bootstrap server that accepts one (Kafka's
        least loaded node), each given at most ``CONNECT_TIMEOUT_S`` (a silent one -- powered off, paused --
        does not use up the call's time). ``ConnectionError`` naming every address if none answered one that
        refused; ``TimeoutError`` if each was silent."""
        for connection in self._connections.values():
            if not connection.stale():
                return connection
        failed, silent = [], 0
        for host, port in self.bootstrap:
            try:
                return self._connection(host, port, min(deadline, time.monotonic() + CONNECT_TIMEOUT_S))
            except ConnectFailed as e:
                failed.append(str(e).removeprefix("cannot connect to "))
            except TimeoutError as e:
                failed.append(f"{address(host, port)} ({e})")
                silent += 1
            if time.monotonic() >= deadline:
                break
        what = f"the bootstrap server{'s' if len(failed) > 1 else ''} {'; '.join(failed)}"
        if silent == len(failed):
            raise TimeoutError(f"no answer in time from {what}")
        raise ConnectionError(f"cannot connect to {what}")

    def _retrying(self, deadline: float, attempt: Callable[[], tuple[Any, Errors]],
                  on_retry: Callable[[], None] = lambda: None) -> Any:
        """``attempt() -> (result, error)`` until ``error`` is not a coordinator error or the time is up;
        a connection refused by a broker the cluster named (``ConnectFailed``) is retried as well."""
        backoff = BACKOFF_START_S
        while True:
            refused = None
            try:
                result, error = attempt()
            except ConnectFailed as e:
                refused, result, error = e, None, Errors.COORDINATOR_NOT_AVAILABLE
            except (TimeoutError, ConnectionError):
                # As Kafka's client after a request timeout or a dropped connection: the coordinator is
                # looked up again by the next call (the request itself may have been carried out).
                on_retry()
                raise
            if not error.is_coordinator_error:
                return result
            on_retry()
            wait = min(BACKOFF_MAX_S, backoff * self._rng.uniform(1 - BACKOFF_JITTER, 1 + BACKOFF_JITTER))
            if time.monotonic() + wait >= deadline:
                if refused is not None:
                    raise ConnectionError(str(refused)) from None
                return result
            time.sleep(wait)
            backoff *= 2

    # --- coordinators -----------------------------------------------------------------------------
    def _find(self, group_id: str, deadline: float) -> tuple[int, str, int] | Errors:
        """FindCoordinator of ``group_id`` once (cached until a coordinator error): ``(node id, host, port)``
        or the error."""
        found = self._coordinators.get(group_id)
        if found is not None:
            return found
        _, body = self._any_connection(deadline).call(FIND_COORDINATOR, {
            "key": group_id, "key_type": GROUP_KEY_TYPE, "coordinator_keys": (group_id,)}, deadline)
        entry = body.coordinators[0] if hasattr(body, "coordinators") else body
        error = error_of(entry.error_code)
        if error is not Errors.NONE:
            return error
        self._coordinators[group_id] = (int(entry.node_id), entry.host, int(entry.port))
        return self._coordinators[group_id]

    def _coordinator_of(self, group_id: str, deadline: float) -> dict:
        def attempt() -> tuple[dict, Errors]:
            found = self._find(group_id, deadline)
            if isinstance(found, Errors):
                return {"node_id": None, "host": None, "port": None, "error": found.name}, found
            self._connection(found[1], found[2], deadline)
            return {"node_id": found[0], "host": found[1], "port": found[2], "error": Errors.NONE.name}, Errors.NONE

        return self._retrying(deadline, attempt, lambda: self._coordinators.pop(group_id, None))

    def _to_coordinator(self, group_id: str, deadline: float, api_key: int, values: dict,
                        decode: Callable[[int, Any], tuple[Any, Errors]], failed: Callable[[Errors], Any]) -> Any:
        """One group request to the group's coordinator (Kafka's ``CoordinatorStrategy``): ``decode(version,
        body) -> (result, error)``; ``failed(error)`` is the result when FindCoordinator answers ``error``."""
        def attempt() -> tuple[Any, Errors]:
            found = self._find(group_id, deadline)
            if isinstance(found, Errors):
                return failed(found), found
            version, body = self._connection(found[1], found[2], deadline).call(api_key, values, deadline)
            return decode(version, body)

        return self._retrying(deadline, attempt, lambda: self._coordinators.pop(group_id, None))

    # --- the APIs ---------------------------------------------------------------------------------
    def _topics(self, _request: Any, deadline: float) -> dict[str, int]:
        body = self._metadata(deadline)
        return {t.name: len(t.partitions) for t in body.topics
                if error_of(t.error_code) is Errors.NONE and not getattr(t, "is_internal", False)}

    def _metadata(self, deadline: float) -> Any:
        _, body = self._any_connection(deadline).call(METADATA, {
            "topics": None, "allow_auto_topic_creation": False, "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False}, deadline)
        return body

    def _list_groups(self, request: ListGroupsRequest, deadline: float) -> ListGroupsResponse:
        # Kafka's KafkaAdminClient.listConsumerGroups: ListGroups to every broker of Metadata, merged.
        brokers = sorted({(b.host, int(b.port)) for b in self._metadata(deadline).brokers})
        values = {"states_filter": tuple(request.states_filter), "types_filter": tuple(request.types_filter)}
        groups: dict[str, ListedGroup] = {}
        error = Errors.NONE
        for host, port in brokers:
            def attempt(host=host, port=port) -> tuple[ListGroupsResponse, Errors]:
                connection = self._connection(host, port, deadline)
                version = connection.version_for(LIST_GROUPS)
                for field, needs, given in (("states", 4, values["states_filter"]),
                                            ("types", 5, values["types_filter"])):
                    if given and version < needs:  # Kafka's ListGroupsRequest.Builder refuses the same
                        raise ProtocolError(f"{connection.address} serves ListGroups up to v{version}, but "
                                            f"filtering by {field} needs v{needs}")
                _, body = connection.call(LIST_GROUPS, values, deadline)
                found = error_of(body.error_code)
                return ListGroupsResponse(found, [ListedGroup(g.group_id, g.protocol_type,
                                                              getattr(g, "group_state", ""),
                                                              getattr(g, "group_type", "")) for g in body.groups]), found

            answer = self._retrying(deadline, attempt)
            for g in answer.groups:
                groups.setdefault(g.group_id, g)
            if error is Errors.NONE:
                error = answer.error
        return ListGroupsResponse(error, sorted(groups.values(), key=lambda g: g.group_id))

    def _describe_groups(self, request: DescribeGroupsRequest, deadline: float) -> list[DescribedGroup]:
        # One request per group, each to its coordinator (Kafka's DescribeConsumerGroupsHandler unbatched).
        return [self._describe_group("" if g is None else g, deadline) for g in request.group_ids]

    def _describe_group(self, group_id: str, deadline: float) -> DescribedGroup:
        def decode(_version: int, body: Any) -> tuple[DescribedGroup, Errors]:
            (d,) = body.groups
            described = DescribedGroup(
                error_of(d.error_code), d.group_id, d.group_state, d.protocol_type, d.protocol_data,
                [DescribedMember(m.member_id, getattr(m, "group_instance_id", None), m.client_id, m.client_host,
                                 m.member_metadata, m.member_assignment) for m in d.members])
            return described, described.error

        return self._to_coordinator(group_id, deadline, DESCRIBE_GROUPS,
                                    {"groups": (group_id,), "include_authorized_operations": False}, decode,
                                    lambda error: DescribedGroup(error, group_id, "", "", "", []))

    def _delete_groups(self, request: DeleteGroupsRequest, deadline: float) -> dict[str | None, Errors]:
        out: dict[str | None, Errors] = {}
        for group_id in request.group_ids:
            def decode(_version: int, body: Any) -> tuple[Errors, Errors]:
                (result,) = body.results
                return error_of(result.error_code), error_of(result.error_code)

            out[group_id] = self._to_coordinator("" if group_id is None else group_id, deadline, DELETE_GROUPS,
                                                 {"groups_names": ("" if group_id is None else group_id,)},
                                                 decode, lambda error: error)
        return out

    def _fetch_offsets(self, request: OffsetFetchRequest, deadline: float) -> OffsetFetchResponse:
        group_id = request.group_id or ""
        topics = None if request.partitions is None else _by_topic(
            request.partitions, lambda t, ps: {"name": t, "partition_indexes": ps})
        values = {"group_id": group_id, "topics": topics, "require_stable": request.require_stable,
                  "groups": ({"group_id": group_id, "member_id": request.member_id,
                              "member_epoch": request.member_epoch, "topics": topics},)}

        def decode(version: int, body: Any) -> tuple[OffsetFetchResponse, Errors]:
            answer = body.groups[0] if version >= 8 else body
            error = error_of(answer.error_code)
            offsets = {(t.name, int(p.partition_index)): PartitionOffset(
                int(p.committed_offset), int(getattr(p, "committed_leader_epoch", -1)),
                "" if p.metadata is None else p.metadata, error_of(p.error_code))
                for t in answer.topics for p in t.partitions}
            return OffsetFetchResponse(error, {} if error is not Errors.NONE else offsets), error

        return self._to_coordinator(group_id, deadline, OFFSET_FETCH, values, decode,
                                    lambda error: REQUESTS.spec(request).error_response(request, error))

    def _commit_offsets(self, request: OffsetCommitRequest, deadline: float) -> OffsetCommitResponse:
        group_id = request.group_id or ""
        values = {"group_id": group_id, "generation_id_or_member_epoch": request.generation_id,
                  "member_id": request.member_id, "group_instance_id": request.group_instance_id,
                  "retention_time": request.retention_time_ms,
                  "topics": _by_topic(request.offsets, lambda t, ps: {"name": t, "partitions": tuple(
                      {"partition_index": p, "committed_offset": request.offsets[(t, p)][0],
                       "committed_metadata": request.offsets[(t, p)][1],
                       "committed_leader_epoch": request.offsets[(t, p)][2]} for p in ps)})}

        def decode(_version: int, body: Any) -> tuple[OffsetCommitResponse, Errors]:
            answered = {(t.name, int(p.partition_index)): error_of(p.error_code)
                        for t in body.topics for p in t.partitions}
            errors = {tp: answered.get(tp, Errors.UNKNOWN_SERVER_ERROR) for tp in request.offsets}
            # Kafka's AlterConsumerGroupOffsetsHandler: a coordinator error on any partition retries them all.
            retry = next((e for e in errors.values() if e.is_coordinator_error), Errors.NONE)
            return OffsetCommitResponse(errors), retry

        return self._to_coordinator(group_id, deadline, OFFSET_COMMIT, values, decode,
                                    lambda error: REQUESTS.spec(request).error_response(request, error))

    def _delete_offsets(self, request: OffsetDeleteRequest, deadline: float) -> OffsetDeleteResponse:
        group_id = request.group_id or ""
        values = {"group_id": group_id, "topics": _by_topic(request.partitions, lambda t, ps: {
            "name": t, "partitions": tuple({"partition_index": p} for p in ps)})}

        def decode(_version: int, body: Any) -> tuple[OffsetDeleteResponse, Errors]:
            error = error_of(body.error_code)
            return OffsetDeleteResponse(error, {(t.name, int(p.partition_index)): error_of(p.error_code)
                                                for t in body.topics for p in t.partitions}), error

        return self._to_coordinator(group_id, deadline, OFFSET_DELETE, values, decode,
                                    lambda error: REQUESTS.spec(request).error_response(request, error))


def _by_topic(partitions: Any, entry: Callable[[str, tuple[int, ...]], dict]) -> tuple[dict, ...]:
    """``(topic, partition)`` pairs (or a dict keyed by them) as Kafka's per-topic entries, in first-seen order."""
    topics: dict[str, list[int]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(partition)
    return tuple(entry(t, tuple(ps)) for t, ps in topics.items())
