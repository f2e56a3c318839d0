"""What ``kafka-consumer-groups.sh`` does, on the group API: list, describe (members, offsets and lag,
state), delete groups, reset and delete committed offsets; plus a deployment's health (``status``).

Everything here takes a ``GroupApi`` client (``cluster.client()`` on Ray, or
``raygroups.testing.InProcessCoordinator``) and plain data, so the rules are tested without Ray; the CLI
(``raygroups groups|offsets|status``) only parses, calls and prints. Bad input raises ``AdminError`` with
one sentence and changes nothing: every check runs before the first write. A deployment that does not
answer within the caller's ``timeout_s`` (or whose coordinator of the group stays unavailable) raises
``Unreachable``, an ``AdminError`` the CLI tells apart by its exit code.

The coordinator keeps committed offsets, not the topics' data, so log-end offsets (lag, ``--to-latest``)
come from a ``raygroups.Source`` when the caller has one (``--source module:attr``), as Kafka's tool asks
the partitions' leaders.
"""

from __future__ import annotations

import datetime as _dt
from collections import Counter
from dataclasses import dataclass
from typing import Any

from raygroups import sources
from raygroups.coordinator.consumer_protocol import SchemaError, decode_assignment
from raygroups.coordinator.errors import Errors
from raygroups.coordinator.group import GroupState
from raygroups.placement.metrics import is_offline, is_under_replicated
from raygroups.sources import Source

GROUP_STATES = tuple(s.value for s in GroupState)
# Kafka's ConsumerGroupCommand resets offsets only of groups without active members.
RESETTABLE_STATES = (GroupState.EMPTY.value, GroupState.DEAD.value)
REQUEST_TIMEOUT_S = 60.0


class AdminError(Exception):
    """A request that cannot be carried out; the message is one sentence for the user. Nothing changed."""


class UnknownGroupError(AdminError):
    """The group has neither members nor committed offsets (Kafka's tool: "does not exist")."""


class Unreachable(AdminError):
    """The deployment did not answer in time, or the coordinator of the group stayed unavailable through the
    client's retries. Nothing is known to have changed, except where the message says a write's outcome is
    unknown."""


# --- topic specs and sources ---------------------------------------------------------------------------
@dataclass(frozen=True)
class TopicSpec:
    """``--topic T`` (every partition of T) or ``--topic T:0,2`` (those partitions)."""

    topic: str
    partitions: tuple[int, ...] | None


def parse_topic_spec(spec: str) -> TopicSpec:
    topic, sep, parts = spec.partition(":")
    if not topic or len(topic) > 249:
        raise AdminError(f"--topic {spec!r}: a topic name must be 1..249 characters, as TOPIC or TOPIC:P[,P...]")
    if not sep:
        return TopicSpec(topic, None)
    partitions = []
    for item in parts.split(","):
        item = item.strip()
        if not item.isdigit():
            raise AdminError(f"--topic {spec!r}: partition {item!r} is not a number >= 0 (TOPIC:P[,P...])")
        partitions.append(int(item))
    return TopicSpec(topic, tuple(sorted(set(partitions))))


def load_source(spec: str | None) -> Source | None:
    """``--source MODULE:ATTR`` (``raygroups.sources.load_source``), or None."""
    if spec is None:
        return None
    try:
        return sources.load_source(spec)
    except ValueError as e:
        raise AdminError(f"--source: {e}") from None


def _start_offset(source: Source, topic: str, partition: int) -> int:
    start = getattr(source, "start_offset", None)
    return 0 if start is None else start(topic, partition)


def _result(future: Any, timeout_s: float) -> Any:
    try:
        return future.result(timeout=timeout_s)
    except TimeoutError:
        future.cancel()
        raise Unreachable(f"the deployment did not answer within {timeout_s * 1000:.0f} ms") from None


def _check(error: Errors, what: str) -> None:
    """A whole-request error: the coordinator's unavailability (after the client's retries) is Unreachable."""
    if error is Errors.NONE:
        return
    if error.is_coordinator_error:
        raise Unreachable(f"{what} failed: the coordinator is not available ({error.name})")
    raise AdminError(f"{what} failed: {error.name}")


# --- groups ------------------------------------------------------------------------------------------
def list_groups(client: Any, states: list[str] | None = None, timeout_s: float = REQUEST_TIMEOUT_S) -> list[dict]:
    response = _result(client.list_groups(states_filter=states or None), timeout_s)
    _check(response.error, "listing groups")
    return sorted(({"group": g.group_id, "state": g.group_state, "protocol_type": g.protocol_type}
                   for g in response.groups), key=lambda g: g["group"])


def _described(client: Any, group: str, timeout_s: float):
    (described,) = _result(client.describe_groups([group]), timeout_s)
    _check(described.error, f"describing group {group!r}")
    return described


def _committed(client: Any, group: str, timeout_s: float) -> dict[tuple[str, int], int]:
    response = _result(client.fetch_offsets(group_id=group), timeout_s)
    _check(response.error, f"fetching the offsets of group {group!r}")
    return {tp: po.offset for tp, po in response.offsets.items() if po.offset >= 0}


def _existing(client: Any, group: str, timeout_s: float):
    """The group's description and committed offsets; UnknownGroupError if it has neither."""
    described = _described(client, group, timeout_s)
    committed = _committed(client, group, timeout_s)
    if described.group_state == GroupState.DEAD.value and not committed:
        raise UnknownGroupError(f"consumer group {group!r} does not exist")
    return described, committed


def _assignment(member: Any, protocol_type: str) -> list[tuple[str, int]]:
    if protocol_type != "consumer" or not member.assignment:
        return []
    try:
        decoded = decode_assignment(member.assignment)
    except SchemaError:
        return []
    return sorted((t, p) for t, p in decoded.partitions)


def describe_group(client: Any, group: str, source: Source | None = None,
                   coordinator: dict | None = None, timeout_s: float = REQUEST_TIMEOUT_S) -> dict:
    """A group's state, members (with their assigned partitions) and offsets (with lag when ``source``
    gives log-end offsets). A group that does not exist raises ``UnknownGroupError``."""
    described, committed = _existing(client, group, timeout_s)
    members = []
    owner: dict[tuple[str, int], dict] = {}
    for m in described.members:
        assigned = _assignment(m, described.protocol_type)
        member = {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                  "host": m.client_host, "partitions": [list(tp) for tp in assigned]}
        members.append(member)
        for tp in assigned:
            owner[tp] = member
    offsets = []
    for tp in sorted(set(committed) | set(owner)):
        end = _end_offset(source, *tp)
        current = committed.get(tp)
        m = owner.get(tp)
        offsets.append({"topic": tp[0], "partition": tp[1], "current_offset": current, "log_end_offset": end,
                        "lag": None if end is None or current is None else max(0, end - current),
                        "member_id": m["member_id"] if m else None, "host": m["host"] if m else None,
                        "client_id": m["client_id"] if m else None})
    return {"group": group, "state": described.group_state, "protocol_type": described.protocol_type,
            "assignment_strategy": described.protocol_data, "coordinator": coordinator,
            "members": members, "offsets": offsets}


def _end_offset(source: Source | None, topic: str, partition: int) -> int | None:
    if source is None or topic not in source.topics() or partition >= source.topics()[topic]:
        return None
    return source.end_offset(topic, partition)


def delete_groups(client: Any, groups: list[str], timeout_s: float = REQUEST_TIMEOUT_S) -> dict[str, str]:
    """Kafka's DeleteGroups: each group's error name (``NONE`` when deleted). On a timeout the outcome of
    each group is unknown (the request may have been carried out)."""
    if not groups:
        return {}
    try:
        errors = _result(client.delete_groups(list(groups)), timeout_s)
    except Unreachable as e:
        raise Unreachable(f"{e}: whether the groups were deleted is unknown") from None
    return {g: errors[g].name for g in groups}


# --- offsets -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ResetStrategy:
    """Exactly one of Kafka's reset scenarios (ConsumerGroupCommand.prepareOffsetsToReset): ``earliest``,
    ``latest``, ``current``, ``offset`` (value), ``shift`` (value, may be negative), ``datetime`` and
    ``duration`` (value: the epoch milliseconds to look up; ``duration`` is now minus the duration), or
    ``file`` (``offsets``: the ``(topic, partition, offset)`` of every partition to reset)."""

    kind: str
    value: int | None = None
    offsets: tuple[tuple[str, int, int], ...] = ()


# The option that asks for each strategy, for the messages.
STRATEGY_OPTIONS = {"earliest": "--to-earliest", "latest": "--to-latest", "current": "--to-current",
                    "offset": "--to-offset", "shift": "--shift-by", "datetime": "--to-datetime",
                    "duration": "--by-duration", "file": "--from-file"}
# Those that look the data up: the log end, or the offset of a time.
_NEEDS_SOURCE = ("latest", "datetime", "duration")


def parse_datetime_ms(text: str) -> int:
    """Kafka's ``--to-datetime`` format, ``YYYY-MM-DDTHH:mm:SS.sss`` with an optional zone (``Z``,
    ``+01:00``); without a zone, local time, as Kafka does."""
    try:
        when = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise AdminError(f"--to-datetime {text!r} is not an ISO date-time such as 2026-11-26T12:00:00.000 "
                         f"(optionally with Z or +HH:MM)") from None
    return int(when.timestamp() * 1000)


def _check_partitions(partitions: list[tuple[str, int]], topics: dict[str, int]) -> None:
    """Every partition must be one of the deployment's topic registry: commits to anything else are refused
    per partition (UNKNOWN_TOPIC_OR_PARTITION), so a reset naming it would half-apply."""
    for topic, p in partitions:
        count = topics.get(topic)
        if count is None:
            raise _unregistered(topic)
        if p >= count:
            raise AdminError(f"topic {topic!r} has {count} partition(s) (0..{count - 1}); partition {p} does not "
                             f"exist")


def _unregistered(topic: str) -> AdminError:
    return AdminError(f"topic {topic!r} is not registered in this deployment (cluster.create_topic)")


def _target_partitions(specs: list[TopicSpec], topics: dict[str, int]) -> list[tuple[str, int]]:
    """The partitions ``specs`` name, checked against the deployment's topic registry."""
    out: list[tuple[str, int]] = []
    for spec in specs:
        count = topics.get(spec.topic)
        if count is None:
            raise _unregistered(spec.topic)
        out.extend((spec.topic, p) for p in (range(count) if spec.partitions is None else spec.partitions))
    out = sorted(set(out))
    _check_partitions(out, topics)
    return out


def plan_reset(client: Any, group: str, specs: list[TopicSpec] | None, strategy: ResetStrategy,
               topics: dict[str, int], source: Source | None = None, *, all_topics: bool = False,
               timeout_s: float = REQUEST_TIMEOUT_S) -> list[dict]:
    """The new offset of every partition in scope (Kafka's ConsumerGroupCommand.prepareOffsetsToReset):
    ``specs`` (``--topic``), or with ``all_topics`` every partition the group has committed offsets for, or
    with a ``file`` strategy the file's partitions. Raises ``AdminError`` before anything is written when
    the reset cannot be done."""
    option = STRATEGY_OPTIONS.get(strategy.kind)
    if option is None:
        raise AdminError(f"unknown reset strategy {strategy.kind!r}")
    if strategy.kind == "file":
        if specs or all_topics:
            raise AdminError("--from-file takes its partitions from the file: give neither --topic nor --all-topics")
        if not strategy.offsets:
            raise AdminError("--from-file: the file names no partition")
    elif bool(specs) == all_topics:
        raise AdminError("name the partitions to reset: --topic (at least one) or --all-topics, one of the two")
    if strategy.kind == "offset" and (strategy.value is None or strategy.value < 0):
        raise AdminError(f"--to-offset must be >= 0, got {strategy.value}")
    described, committed = _existing(client, group, timeout_s)
    if described.group_state not in RESETTABLE_STATES:
        raise AdminError(f"assignments can only be reset if the group {group!r} is inactive, but the current state "
                         f"is {described.group_state}")
    if strategy.kind in _NEEDS_SOURCE and source is None:
        raise AdminError(f"{option} needs the topics' data: pass --source MODULE:ATTR")
    requested = {(t, p): offset for t, p, offset in strategy.offsets}
    if strategy.kind == "file":
        partitions = sorted(requested)
        _check_partitions(partitions, topics)
    elif all_topics:
        # Kafka's getPartitionsToReset: --all-topics is every partition with a committed offset.
        partitions = sorted(committed)
        if not partitions:
            raise AdminError(f"group {group!r} has no committed offsets: --all-topics names no partition")
        _check_partitions(partitions, topics)
    else:
        partitions = _target_partitions(specs or [], topics)
    plan = []
    for topic, p in partitions:
        current = committed.get((topic, p))
        low = _start_offset(source, topic, p) if source is not None else 0
        high = _end_offset(source, topic, p)
        if high is None and strategy.kind in _NEEDS_SOURCE:
            raise AdminError(f"{option}: the source has no data for {topic}:{p}")
        match strategy.kind:
            case "earliest":
                new = low
            case "latest":
                new = high
            case "current":
                if current is not None:
                    # Kafka's resetToCurrent: the committed offset itself, not moved into the data's range.
                    plan.append({"topic": topic, "partition": p, "current_offset": current, "new_offset": current})
                    continue
                if high is None:
                    raise AdminError(f"--to-current: the group has no committed offset on {topic}:{p}, and its "
                                     f"log end (Kafka's fallback) needs --source MODULE:ATTR")
                new = high
            case "offset":
                new = strategy.value
            case "shift":
                if current is None:
                    raise AdminError(f"cannot shift the offset of {topic}:{p}: the group has no committed offset "
                                     f"there")
                new = current + strategy.value
            case "datetime" | "duration":
                new = _offset_for_time(source, topic, p, strategy.value, option)
            case "file":
                new = requested[(topic, p)]
        # Kafka's checkOffsetsRange: a target outside the partition's data is moved to its nearest end.
        new = max(new, low)
        if high is not None:
            new = min(new, high)
        plan.append({"topic": topic, "partition": p, "current_offset": current, "new_offset": new})
    return plan


def _offset_for_time(source: Source, topic: str, partition: int, timestamp_ms: int, option: str) -> int:
    lookup = getattr(source, "offset_for_time", None)
    if lookup is None:
        raise AdminError(f"{option} needs a source with offset_for_time(topic, partition, timestamp_ms); "
                         f"{type(source).__name__} has none")
    found = lookup(topic, partition, timestamp_ms)
    # Kafka's offsetsForTimes answers nothing past the last record: the log end then.
    return source.end_offset(topic, partition) if found is None else found


def execute_reset(client: Any, group: str, plan: list[dict],
                  timeout_s: float = REQUEST_TIMEOUT_S) -> dict[tuple[str, int], str]:
    """Commit the plan as an admin (generation -1, no member), as Kafka's alterConsumerGroupOffsets does:
    the coordinator accepts it only while the group has no members. Each partition's error name."""
    offsets = {(row["topic"], row["partition"]): (row["new_offset"], "") for row in plan}
    try:
        response = _result(client.commit_offsets(group_id=group, offsets=offsets), timeout_s)
    except Unreachable as e:
        raise Unreachable(f"{e}: whether the new offsets were committed is unknown (see groups describe)") from None
    return {tp: error.name for tp, error in response.errors.items()}


def delete_offsets(client: Any, group: str, specs: list[TopicSpec], topics: dict[str, int],
                   timeout_s: float = REQUEST_TIMEOUT_S) -> dict:
    """Kafka's OffsetDelete for the named partitions: the request's error and each partition's."""
    _existing(client, group, timeout_s)
    partitions = _target_partitions(specs, topics)
    try:
        response = _result(client.delete_offsets(group_id=group, partitions=partitions), timeout_s)
    except Unreachable as e:
        raise Unreachable(f"{e}: whether the offsets were deleted is unknown (see groups describe)") from None
    # A request that failed as a whole (NON_EMPTY_GROUP, the coordinator unavailable) failed every partition.
    return {"error": response.error.name,
            "partitions": {tp: response.errors.get(tp, response.error).name for tp in partitions}}


# --- deployment health -------------------------------------------------------------------------------
def status(cluster: Any, timeout_s: float = REQUEST_TIMEOUT_S) -> dict:
    """Every partition (leader, epoch, replicas, ISR, the serving shard's state, pid and node), the
    under-replicated (fewer in-sync replicas than assigned or than the replication factor) and offline ones
    (no leader, or no serving shard), and the groups of the serving shards counted by state. Asks each shard
    and the controller once, so it answers while partitions are down: a shard silent for ``timeout_s`` (at
    most 15 s, so that a health check answers) is UNAVAILABLE; a controller silent for ``timeout_s`` raises
    ``TimeoutError``."""
    shards = {s["partition"]: s for s in cluster.shard_status(timeout_s=min(timeout_s, 15.0))}
    meta = cluster.partition_metadata(timeout_s=timeout_s) if cluster.replicated else {}
    partitions = []
    for p in range(cluster.num_partitions):
        shard = shards[p]
        if cluster.replicated:
            m = meta.get(p) or {}
            replicas, isr, leader, epoch = m.get("replicas") or [], m.get("isr") or [], m.get("leader"), \
                m.get("leader_epoch")
        else:
            replicas, isr, leader, epoch = ["local"], ["local"], "local", shard.get("leader_epoch")
        offline = is_offline(leader, shard["state"])
        partitions.append({"partition": p, "leader": leader, "leader_epoch": epoch, "replicas": replicas,
                           "isr": isr, "offline": offline,
                           "under_replicated": cluster.replicated and is_under_replicated(
                               isr, replicas, cluster.config.offsets_topic_replication_factor),
                           "shard_state": shard["state"], "pid": shard.get("pid"), "node": shard.get("node"),
                           "groups": shard.get("groups")})
    groups: Counter = Counter()
    for shard in shards.values():
        groups.update(shard.get("groups_by_state") or {})
    return {"namespace": cluster.namespace, "replicated": cluster.replicated, "num_partitions": cluster.num_partitions,
            "partitions": partitions,
            "offline_partitions": [p["partition"] for p in partitions if p["offline"]],
            "under_replicated_partitions": [p["partition"] for p in partitions if p["under_replicated"]],
            "groups_by_state": dict(sorted(groups.items())),
            "nodes": cluster.nodes(timeout_s=timeout_s) if cluster.replicated else {}}
