"""KIP-848 consumer groups on a shard: ConsumerGroupHeartbeat, ConsumerGroupDescribe and their timers (Kafka's
``GroupMetadataManager.consumerGroupHeartbeat`` and the code around it).

A heartbeat does three things, in order: (1) it creates or updates the member, bumping the group epoch when
the member joins, its subscription changes or the partition counts of the subscribed topics change;
(2) when the group epoch is ahead of the assignment epoch it computes the target assignment with the
server assignor and writes the members whose target changed; (3) it reconciles this member towards its
target (``reconcile``). Session timers fence a member that stops heartbeating; a rebalance timer fences a
member that keeps partitions it must revoke beyond its rebalance timeout. Fencing or leaving removes the
member and bumps the group epoch; the others' targets are recomputed on their next heartbeat.

Everything is computed from the replayed state and returned as records: the state changes only when the
runtime replays them (``consumer_group.replay_consumer_record``).

Not covered yet: classic members in a consumer group (Kafka's interop), the downgrade of a consumer group
to a classic one when its last consumer-protocol member leaves, per-group configs.
"""

from __future__ import annotations

import re
from collections import Counter

from raygroups.coordinator.consumer_group import (
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroupData,
    ConsumerGroupState,
    MemberState,
)
from raygroups.coordinator.consumer_messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    DescribedConsumerGroup,
    DescribedConsumerGroupMember,
    as_dict,
)
from raygroups.coordinator.consumer_records import (
    EMPTY_ASSIGNMENT,
    Assignment,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    from_assignment,
    to_assignment,
)
from raygroups.coordinator.errors import CoordinatorError, Errors
from raygroups.coordinator.reconcile import next_assignment
from raygroups.coordinator.records import GroupMetadataKey, Record
from raygroups.coordinator.result import Result
from raygroups.coordinator.server_assignors import ASSIGNORS, MemberSubscription, PartitionAssignorError

_GROUP_OPENINGS_NOT_RE2 = ("(?=", "(?!", "(?<=", "(?<!", "(?P=", "(?(", "(?>")


def _not_re2(pattern: str) -> str | None:
    """The first construct of ``pattern`` that Python's ``re`` reads but RE2/J (Kafka's regex engine for
    KIP-848 subscriptions) refuses or reads otherwise -- lookaround, a backreference, a conditional, an
    atomic group or a possessive quantifier -- or None. Escapes and character classes are skipped as the
    engines skip them, so ``a\\++`` (an escaped plus, repeated) and ``x\\\\1`` are fine."""
    i, n = 0, len(pattern)
    in_class = False
    after_quantifier = False
    while i < n:
        c = pattern[i]
        if c == "\\":
            if not in_class and i + 1 < n and pattern[i + 1] in "123456789":
                return pattern[i:i + 2]
            i += 2
            after_quantifier = False
            continue
        if in_class:
            in_class = c != "]"
            i += 1
            continue
        if c == "[":
            in_class = True
            i += 1
            if i < n and pattern[i] == "^":
                i += 1
            if i < n and pattern[i] == "]":  # a leading ] is a literal
                i += 1
            after_quantifier = False
            continue
        if c == "(":
            bad = next((g for g in _GROUP_OPENINGS_NOT_RE2 if pattern.startswith(g, i)), None)
            if bad is not None:
                return bad
        if c == "+" and after_quantifier:
            return pattern[i - 1:i + 1]
        if c in "*+?":
            # A quantifier; "??", "*?" and "+?" are lazy forms both engines read alike.
            after_quantifier = not (c == "?" and after_quantifier)
        elif c == "}":
            after_quantifier = True
        else:
            after_quantifier = False
        i += 1
    return None


TIMER_RETRY_BACKOFF_MS = 500  # a timer whose write failed runs again after this


def session_key(group_id: str, member_id: str) -> tuple:
    return ("consumer-session", group_id, member_id)


def rebalance_key(group_id: str, member_id: str) -> tuple:
    return ("consumer-rebalance", group_id, member_id)


def compile_subscription_regex(pattern: str) -> re.Pattern:
    """Kafka's ``throwIfRegularExpressionIsInvalid``: a pattern RE2/J and Python's ``re`` read alike, or
    INVALID_REGULAR_EXPRESSION naming what is wrong."""
    bad = _not_re2(pattern)
    if bad is not None:
        raise CoordinatorError(Errors.INVALID_REGULAR_EXPRESSION,
                               f"SubscribedTopicRegex `{pattern}` uses {bad!r}, which RE2/J does not support.")
    try:
        return re.compile(pattern)
    except re.error as e:
        raise CoordinatorError(Errors.INVALID_REGULAR_EXPRESSION,
                               f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: {e}.") from None


def _invalid(message: str) -> CoordinatorError:
    return CoordinatorError(Errors.INVALID_REQUEST, message)


class ConsumerGroupMixin:
    # ------------------------------------------------------------------------------------------
    # ConsumerGroupHeartbeat
    # ------------------------------------------------------------------------------------------
    def consumer_group_heartbeat(self, req: ConsumerGroupHeartbeatRequest) -> Result[ConsumerGroupHeartbeatResponse]:
        try:
            self._validate_consumer_heartbeat(req)
            if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._consumer_group_leave(req)
            return self._consumer_group_heartbeat(req)
        except CoordinatorError as e:
            return Result(response=ConsumerGroupHeartbeatResponse(e.error, e.message or None))

    def _validate_consumer_heartbeat(self, req: ConsumerGroupHeartbeatRequest) -> None:
        """Kafka's ``throwIfConsumerGroupHeartbeatRequestIsInvalid`` (v0 and v1)."""
        if not req.group_id.strip():
            raise _invalid("GroupId can't be empty.")
        if req.instance_id is not None and not req.instance_id.strip():
            raise _invalid("InstanceId can't be empty.")
        if req.rack_id is not None and not req.rack_id.strip():
            raise _invalid("RackId can't be empty.")
        if req.member_epoch != JOIN_GROUP_MEMBER_EPOCH and not req.member_id.strip():
            raise _invalid("MemberId can't be empty.")
        if req.member_epoch == JOIN_GROUP_MEMBER_EPOCH:
            if req.rebalance_timeout_ms == -1:
                raise _invalid("RebalanceTimeoutMs must be provided in first request.")
            if req.topic_partitions is None or req.topic_partitions:
                raise _invalid("TopicPartitions must be empty when (re-)joining.")
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                raise _invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.")
        elif req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if req.instance_id is None:
                raise _invalid("InstanceId can't be null.")
        elif req.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise _invalid("MemberEpoch is invalid.")
        if req.subscribed_topic_regex:  # "" subscribes to nothing (Kafka accepts it, as an empty list of names)
            compile_subscription_regex(req.subscribed_topic_regex)
        assignors = self.config.consumer_assignors
        if req.server_assignor is not None and req.server_assignor not in assignors:
            raise CoordinatorError(Errors.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {req.server_assignor} is not "
                                   f"supported. Supported assignors: {', '.join(assignors)}.")

    def _consumer_group_heartbeat(self, req: ConsumerGroupHeartbeatRequest) -> Result[ConsumerGroupHeartbeatResponse]:
        records: list[Record] = []
        joining = req.member_epoch == JOIN_GROUP_MEMBER_EPOCH
        group, classic = self._consumer_group_for(req.group_id, joining, records)
        member_id = req.member_id or self._new_member_id(req.client_id or "consumer")
        if (len(group.members) >= self.config.group_consumer_max_size
                and (not req.member_id or req.member_id not in group.members)):
            raise CoordinatorError(Errors.GROUP_MAX_SIZE_REACHED, "The consumer group has reached its maximum "
                                   f"capacity of {self.config.group_consumer_max_size} members.")
        # The member as it stands (a new one: empty), and the one its static predecessor leaves to replace.
        replaced = None
        if req.instance_id is None:
            member, current = self._dynamic_member(group, member_id, req, joining)
        else:
            member, current, replaced = self._static_member(group, member_id, req, joining, records)
        updated = ConsumerGroupMemberMetadataValue(
            instance_id=req.instance_id if req.instance_id is not None else (member.instance_id if member else None),
            rack_id=req.rack_id if req.rack_id is not None else (member.rack_id if member else None),
            client_id=req.client_id, client_host=req.client_host,
            subscribed_topic_names=(req.subscribed_topic_names if req.subscribed_topic_names is not None
                                    else (member.subscribed_topic_names if member else ())),
            subscribed_topic_regex=((req.subscribed_topic_regex or None) if req.subscribed_topic_regex is not None
                                    else (member.subscribed_topic_regex if member else None)),
            server_assignor=req.server_assignor if req.server_assignor is not None else (
                member.server_assignor if member else None),
            rebalance_timeout_ms=(req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
                                  else (member.rebalance_timeout_ms if member else -1)),
        )
        # 1. The member, and the group epoch.
        bump = group.group_epoch == 0
        resubscribed = False
        if updated != member:
            records.append((ConsumerGroupMemberMetadataKey(group.group_id, member_id), updated))
            if member is None or (updated.subscribed_topic_names, updated.subscribed_topic_regex) != (
                    member.subscribed_topic_names, member.subscribed_topic_regex):
                bump = True
                resubscribed = member is not None
        members = group.members  # read only below: copied only when this heartbeat changes it
        if replaced is not None or updated != member:
            members = dict(members)
            if replaced is not None:
                del members[replaced]
            members[member_id] = updated
        metadata = self._subscription_metadata(group, [group.members.get(member_id), group.members.get(replaced)],
                                               [updated])
        group_epoch = group.group_epoch
        if bump or metadata != group.subscription_metadata:
            group_epoch += 1
            records.append((ConsumerGroupMetadataKey(group.group_id), ConsumerGroupMetadataValue(group_epoch, metadata)))
        # 2. The target assignment.
        targets = group.targets  # likewise
        if replaced is not None:
            targets = dict(targets)
            targets[member_id] = targets.pop(replaced, EMPTY_ASSIGNMENT)
        if group_epoch > group.assignment_epoch and (resubscribed or self._assignment_due(group)):
            targets = self._new_target_assignment(group, group_epoch, members, targets, dict(metadata), records)
            target_epoch = group_epoch
            self.consumer_assigned_at[group.group_id] = self.now_ms()
        else:
            target_epoch = group.assignment_epoch
        # 3. This member's reconciliation.
        reconciled = current
        if not (current.member_epoch == target_epoch and current.state == MemberState.STABLE.value):
            reconciled = next_assignment(member_id, current, target_epoch, targets.get(member_id, EMPTY_ASSIGNMENT),
                                         group.partition_owner, req.topic_partitions)
        if reconciled != current or (replaced is not None):
            records.append((ConsumerGroupCurrentMemberAssignmentKey(group.group_id, member_id), reconciled))
            if reconciled.state == MemberState.UNREVOKED_PARTITIONS.value:
                self._schedule_rebalance_timeout(group.group_id, member_id, reconciled.member_epoch,
                                                 updated.rebalance_timeout_ms)
            # Otherwise a rebalance timer still armed finds the member past that epoch and does nothing
            # (kept rather than cancelled: should this append fail, it still guards the member).
        self._schedule_session_timeout(group.group_id, member_id)
        full = joining or (req.rebalance_timeout_ms != -1 and req.subscribed_topic_names is not None
                           and req.topic_partitions is not None)
        changed = reconciled.assigned != current.assigned or replaced is not None
        result = Result(records, ConsumerGroupHeartbeatResponse(
            Errors.NONE, member_id=member_id, member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self.config.group_consumer_heartbeat_interval_ms,
            assignment=as_dict(reconciled.assigned) if full or changed else None))
        if classic is not None:
            self._give_way(classic, result)
        return result

    def _consumer_group_for(self, group_id: str, create: bool, records: list[Record]):
        """Kafka's ``getOrMaybeCreateConsumerGroup``: ``(the group, the empty classic group that gives way
        to it or None)``. An empty classic group (or a simple one) gives way to a new consumer group, its
        offsets kept; a classic group with members does not."""
        group = self.state.consumer_groups.get(group_id)
        if group is not None:
            return group, None
        if not create:
            raise CoordinatorError(Errors.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
        classic = self.groups.get(group_id)
        if classic is not None and (classic.members or classic.pending_members):
            raise CoordinatorError(Errors.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        if self.state.groups.get(group_id) is not None:
            records.append((GroupMetadataKey(group_id), None))  # the empty classic group's tombstone
        return ConsumerGroupData(group_id), classic

    def _give_way(self, classic, result: Result) -> None:
        """The empty classic group's object leaves the shard with this operation; kept aside so that a
        failed append brings the very same one back (``revert``), let go once the records are durable."""
        self._remove_group(classic)

        def on_done(error: Errors) -> None:
            removed = self._groups_removed_by_operation()
            if error is Errors.NONE and removed.get(classic.group_id) is classic:
                del removed[classic.group_id]

        result.on_done.append(on_done)

    @staticmethod
    def _dynamic_member(group: ConsumerGroupData, member_id: str, req: ConsumerGroupHeartbeatRequest, joining: bool):
        """Kafka's ``getOrMaybeSubscribeDynamicConsumerGroupMember``."""
        member = group.members.get(member_id)
        if member is None and not joining:
            raise CoordinatorError(Errors.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group "
                                   f"{group.group_id}.")
        current = group.member_assignment(member_id)
        if member is not None:
            _check_member_epoch(current, req.member_epoch, req.topic_partitions)
        return member, current

    def _static_member(self, group: ConsumerGroupData, member_id: str, req: ConsumerGroupHeartbeatRequest,
                       joining: bool, records: list[Record]):
        """Kafka's ``getOrMaybeSubscribeStaticConsumerGroupMember``: a static member rejoining after its
        temporary leave (epoch -2) takes its predecessor's place, assignment and epoch."""
        existing_id = group.static_members.get(req.instance_id)
        if joining:
            if existing_id is None:
                return group.members.get(member_id), group.member_assignment(member_id), None
            existing = group.member_assignment(existing_id)
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise CoordinatorError(Errors.UNRELEASED_INSTANCE_ID, f"Static member {member_id} with instance id "
                                       f"{req.instance_id} cannot join the group because the instance id is owned "
                                       f"by {existing_id} member.")
            member = group.members[existing_id]
            records.extend(_member_tombstones(group.group_id, existing_id))
            records.append((ConsumerGroupMemberMetadataKey(group.group_id, member_id), member))
            records.append((ConsumerGroupTargetAssignmentMemberKey(group.group_id, member_id),
                            ConsumerGroupTargetAssignmentMemberValue(group.target_of(existing_id))))
            current = ConsumerGroupCurrentMemberAssignmentValue(0, 0, existing.state, existing.assigned,
                                                                existing.pending_revocation)
            # The old member's timers stay (Kafka's replaceMember): they guard it should this append fail.
            return member, current, existing_id
        if existing_id is None:
            raise CoordinatorError(Errors.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
        if existing_id != member_id:
            raise CoordinatorError(Errors.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id "
                                   f"{req.instance_id} was fenced by member {existing_id}.")
        current = group.member_assignment(member_id)
        _check_member_epoch(current, req.member_epoch, req.topic_partitions)
        return group.members[member_id], current, None

    def _subscription_metadata(self, group: ConsumerGroupData, gone, added) -> tuple[tuple[str, int], ...]:
        """``(topic, partition count)`` of every existing topic the group's members subscribe to, by name or
        regex, once the members ``gone`` (None entries ignored) are replaced by ``added``: read from the
        group's subscriber counts, not from every member (Kafka's ``computeSubscribedTopicNames``)."""
        names, regexes = dict(group.topic_subscribers), dict(group.regex_subscribers)
        for sign, members in ((-1, gone), (1, added)):
            for m in members:
                if m is None:
                    continue
                for t in m.subscribed_topic_names:
                    names[t] = names.get(t, 0) + sign
                if m.subscribed_topic_regex is not None:
                    regexes[m.subscribed_topic_regex] = regexes.get(m.subscribed_topic_regex, 0) + sign
        topics = self.topics()
        subscribed = {t for t, n in names.items() if n > 0 and t in topics}
        for pattern, n in regexes.items():
            if n > 0:
                rx = re.compile(pattern)
                subscribed.update(t for t in topics if rx.fullmatch(t))
        return tuple(sorted((t, topics[t]) for t in subscribed))

    def _member_topics(self, member: ConsumerGroupMemberMetadataValue, metadata: dict[str, int]) -> frozenset[str]:
        topics = {t for t in member.subscribed_topic_names if t in metadata}
        if member.subscribed_topic_regex is not None:
            rx = re.compile(member.subscribed_topic_regex)
            topics.update(t for t in metadata if rx.fullmatch(t))
        return frozenset(topics)

    def _new_target_assignment(self, group: ConsumerGroupData, group_epoch: int, members: dict, targets: dict,
                               metadata: dict[str, int], records: list[Record]) -> dict[str, Assignment]:
        """Kafka's ``TargetAssignmentBuilder``: the server assignor over every member, then a record for each
        member whose target changed and one for the new assignment epoch."""
        name = self._preferred_assignor(members.values())
        # The assignor's input of a member whose subscription and target did not change since the last
        # computation is the one built then (``assignor_inputs``: soft state, never written).
        cache = group.assignor_inputs
        topics_of: dict[tuple, frozenset[str]] = {}
        subscriptions = {}
        for mid, m in members.items():
            target = targets.get(mid, ())
            key = (m.subscribed_topic_names, m.subscribed_topic_regex)
            topics = topics_of.get(key)
            if topics is None:
                topics = topics_of[key] = self._member_topics(m, metadata)
            cached = cache.get(mid)
            if cached is None or cached[0] is not target or cached[1].subscribed_topics != topics or \
                    cached[1].rack_id != m.rack_id:
                cached = cache[mid] = (target, MemberSubscription(topics, m.rack_id, from_assignment(target)))
            subscriptions[mid] = cached[1]
        for mid in [mid for mid in cache if mid not in members]:
            del cache[mid]
        try:
            computed = ASSIGNORS[name].assign(subscriptions, metadata)
        except PartitionAssignorError as e:
            raise CoordinatorError(Errors.UNKNOWN_SERVER_ERROR, f"Failed to compute a new target assignment for "
                                   f"epoch {group_epoch}: {e}.") from None
        new_targets = {}
        for mid in members:
            result = computed.get(mid, {})
            old = targets.get(mid, ())
            # Unchanged (the common case for most members): the old target as it is, no conversion.
            new_targets[mid] = old if result == subscriptions[mid].assignment else to_assignment(result)
        for mid in sorted(new_targets):
            if new_targets[mid] != targets.get(mid):
                records.append((ConsumerGroupTargetAssignmentMemberKey(group.group_id, mid),
                                ConsumerGroupTargetAssignmentMemberValue(new_targets[mid])))
        records.append((ConsumerGroupTargetAssignmentMetadataKey(group.group_id),
                        ConsumerGroupTargetAssignmentMetadataValue(group_epoch)))
        return new_targets

    def _assignment_due(self, group: ConsumerGroupData) -> bool:
        """KIP-1263 (Kafka 4.3's ``group.consumer.assignment.interval.ms``): a group's target is computed at
        most once per interval, so that the epochs a burst of joins, leaves and topic changes moves through
        are batched into one computation, made by the first heartbeat after the interval (a group's first
        computation, and its first after this shard loaded it, at once). Meanwhile members reconcile towards
        the target of the assignment epoch, and a member that joins does so at that epoch, with nothing
        assigned yet. A member's own subscription change is not deferred: Kafka revokes the partitions of
        topics it left while its target lags; here its target is recomputed at once, so that no member ever
        holds, or is given, a topic it no longer subscribes to."""
        last = self.consumer_assigned_at.get(group.group_id) if group.group_epoch else None
        now = self.now_ms()
        # A wall clock stepped back (now < last) must not defer the computation by the step.
        return last is None or now < last or now - last >= self.config.group_consumer_assignment_interval_ms

    def _preferred_assignor(self, members) -> str:
        """The server assignor most members name (ties: the first in ``group.consumer.assignors``), else the
        default (Kafka's ``computePreferredServerAssignor``)."""
        counts = Counter(m.server_assignor for m in members if m.server_assignor is not None)
        assignors = self.config.consumer_assignors
        if not counts:
            return assignors[0]
        return max(counts, key=lambda n: (counts[n], -assignors.index(n)))

    # ------------------------------------------------------------------------------------------
    # Leaving and fencing
    # ------------------------------------------------------------------------------------------
    def _consumer_group_leave(self, req: ConsumerGroupHeartbeatRequest) -> Result[ConsumerGroupHeartbeatResponse]:
        """Kafka's ``consumerGroupLeave``: epoch -1 removes the member; -2 (a static member's temporary
        leave) keeps it and its assignment, at epoch -2, until its session expires."""
        group, _ = self._consumer_group_for(req.group_id, False, [])
        response = ConsumerGroupHeartbeatResponse(Errors.NONE, member_id=req.member_id, member_epoch=req.member_epoch)
        if req.instance_id is None:
            if req.member_id not in group.members:
                raise CoordinatorError(Errors.UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group "
                                       f"{group.group_id}.")
            return Result(self._fence_member(group, req.member_id), response)
        existing_id = group.static_members.get(req.instance_id)
        if existing_id is None:
            raise CoordinatorError(Errors.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
        if existing_id != req.member_id:
            raise CoordinatorError(Errors.FENCED_INSTANCE_ID, f"Static member {req.member_id} with instance id "
                                   f"{req.instance_id} was fenced by member {existing_id}.")
        if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            current = group.member_assignment(existing_id)
            leaving = ConsumerGroupCurrentMemberAssignmentValue(
                LEAVE_GROUP_STATIC_MEMBER_EPOCH, current.previous_member_epoch, current.state, current.assigned, ())
            return Result([(ConsumerGroupCurrentMemberAssignmentKey(group.group_id, existing_id), leaving)], response)
        return Result(self._fence_member(group, existing_id), response)

    def _fence_member(self, group: ConsumerGroupData, member_id: str) -> list[Record]:
        """Kafka's ``consumerGroupFenceMember``: the member's records go, the group epoch moves on (with the
        subscription metadata the remaining members need)."""
        records = _member_tombstones(group.group_id, member_id)
        if set(group.members) <= {member_id}:
            # The last member: an empty group's next member is assigned at once (and a deleted group's
            # entry does not linger).
            self.consumer_assigned_at.pop(group.group_id, None)
        metadata = self._subscription_metadata(group, [group.members.get(member_id)], [])
        records.append((ConsumerGroupMetadataKey(group.group_id), ConsumerGroupMetadataValue(group.group_epoch + 1,
                                                                                             metadata)))
        # Its timers stay: should this append fail, the member is back and they still guard it (Kafka's
        # replaceMember); once it is gone they find nothing to do.
        return records

    def _schedule_session_timeout(self, group_id: str, member_id: str) -> None:
        self._schedule(session_key(group_id, member_id), self.config.group_consumer_session_timeout_ms,
                       lambda: self._on_session_timeout(group_id, member_id))

    def _schedule_rebalance_timeout(self, group_id: str, member_id: str, member_epoch: int, timeout_ms: int) -> None:
        self._schedule(rebalance_key(group_id, member_id), max(timeout_ms, 0),
                       lambda: self._on_rebalance_timeout(group_id, member_id, member_epoch))

    def _on_session_timeout(self, group_id: str, member_id: str) -> Result:
        group = self.state.consumer_groups.get(group_id)
        if group is None or member_id not in group.members:
            return Result()
        return self._fence_or_retry(group, member_id, lambda: self._on_session_timeout(group_id, member_id),
                                    session_key(group_id, member_id))

    def _on_rebalance_timeout(self, group_id: str, member_id: str, member_epoch: int) -> Result:
        """Fences a member still revoking at the epoch it had to revoke partitions in (Kafka's
        ``consumerGroupRebalanceTimeout``)."""
        group = self.state.consumer_groups.get(group_id)
        if group is None or member_id not in group.members:
            return Result()
        current = group.member_assignment(member_id)
        if current.member_epoch != member_epoch or current.state != MemberState.UNREVOKED_PARTITIONS.value:
            return Result()
        return self._fence_or_retry(group, member_id,
                                    lambda: self._on_rebalance_timeout(group_id, member_id, member_epoch),
                                    rebalance_key(group_id, member_id))

    def _fence_or_retry(self, group: ConsumerGroupData, member_id: str, again, key: tuple) -> Result:
        """A timer's fence; if its append fails, the timer runs again after a backoff (Kafka schedules these
        timers with retry, CoordinatorRuntime's ``retryBackoff``)."""
        def on_done(error: Errors) -> None:
            if error is not Errors.NONE:
                self._schedule(key, TIMER_RETRY_BACKOFF_MS, again)

        return Result().write(self._fence_member(group, member_id), on_done)

    def on_consumer_groups_loaded(self) -> None:
        """After a load: every member's session starts anew (Kafka's ``onLoaded``), and a member still
        revoking gets its rebalance timeout again."""
        for group in self.state.consumer_groups.values():
            for member_id, member in group.members.items():
                self._schedule_session_timeout(group.group_id, member_id)
                current = group.member_assignment(member_id)
                if current.state == MemberState.UNREVOKED_PARTITIONS.value:
                    self._schedule_rebalance_timeout(group.group_id, member_id, current.member_epoch,
                                                     member.rebalance_timeout_ms)

    # ------------------------------------------------------------------------------------------
    # ConsumerGroupDescribe
    # ------------------------------------------------------------------------------------------
    def consumer_group_describe(self, req: ConsumerGroupDescribeRequest) -> list[DescribedConsumerGroup]:
        return [self._describe_consumer_group(g) for g in req.group_ids]

    def _describe_consumer_group(self, group_id: str) -> DescribedConsumerGroup:
        group = self.state.consumer_groups.get(group_id)
        if group is None:
            if group_id in self.state.groups or group_id in self.groups:
                return DescribedConsumerGroup(group_id, Errors.GROUP_ID_NOT_FOUND,
                                              f"Group {group_id} is not a consumer group.",
                                              group_state=ConsumerGroupState.DEAD.value)
            return DescribedConsumerGroup(group_id, Errors.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.",
                                          group_state=ConsumerGroupState.DEAD.value)
        members = []
        for mid in sorted(group.members):
            m, current = group.members[mid], group.member_assignment(mid)
            members.append(DescribedConsumerGroupMember(
                mid, m.instance_id, m.rack_id, current.member_epoch, m.client_id, m.client_host,
                list(m.subscribed_topic_names), m.subscribed_topic_regex, as_dict(current.assigned),
                as_dict(group.target_of(mid))))
        return DescribedConsumerGroup(
            group_id, Errors.NONE, None, group.state().value, group.group_epoch, group.assignment_epoch,
            self._preferred_assignor(group.members.values()), members)


def _check_member_epoch(current: ConsumerGroupCurrentMemberAssignmentValue, epoch: int, owned: Assignment | None) -> None:
    """Kafka's ``throwIfConsumerGroupMemberEpochIsInvalid``: a lower epoch is accepted only when it is the
    previous one and the member owns no more than it is assigned (the response that moved it on was lost)."""
    if epoch == JOIN_GROUP_MEMBER_EPOCH:
        return  # a member rejoins after being fenced, keeping its member id (KAFKA-19233, Kafka 4.2)
    if epoch > current.member_epoch:
        raise CoordinatorError(Errors.FENCED_MEMBER_EPOCH, f"The consumer group member has a greater member epoch "
                               f"({epoch}) than the one known by the group coordinator ({current.member_epoch}). "
                               f"The member must abandon all its partitions and rejoin.")
    if epoch < current.member_epoch:
        assigned = {t: set(ps) for t, ps in current.assigned}
        # Kafka's isSubset: owned partitions not sent are not a subset.
        subset = owned is not None and all(set(ps) <= assigned.get(t, set()) for t, ps in owned)
        if epoch != current.previous_member_epoch or not subset:
            raise CoordinatorError(Errors.FENCED_MEMBER_EPOCH, f"The consumer group member has a smaller member "
                                   f"epoch ({epoch}) than the one known by the group coordinator "
                                   f"({current.member_epoch}). The member must abandon all its partitions and "
                                   f"rejoin.")


def _member_tombstones(group_id: str, member_id: str) -> list[Record]:
    """Kafka's ``removeMember``: current assignment, target assignment, then subscription."""
    return [(ConsumerGroupCurrentMemberAssignmentKey(group_id, member_id), None),
            (ConsumerGroupTargetAssignmentMemberKey(group_id, member_id), None),
            (ConsumerGroupMemberMetadataKey(group_id, member_id), None)]


__all__ = ["ConsumerGroupMixin", "compile_subscription_regex"]
