"""The membership changes a partition's coordinator decided, read back from its log (pure: batches in,
changes out). A chaos run's audit asks each leader for them at the end, so that the checker knows about the
changes no client saw: a session expiry, a member fenced for not revoking in time.

* Classic groups: one ``GroupMetadata`` record per completed generation lists the generation's members; a
  member in one record and not in the group's previous one was added, and the reverse removed (at the new
  generation). Kafka writes nothing when a classic member's session expires: its removal shows in the next
  generation's record.
* KIP-848 consumer groups: a ``ConsumerGroupMemberMetadata`` record of a member that was absent adds it, its
  tombstone removes it; the change carries the group epoch the group has once the change's batch is applied
  (Kafka writes the member's records and the new group epoch in one batch).

Each change is timed by its batch's timestamp (the leader's wall clock, in ms, when it wrote the batch).

What is guaranteed: every change reported happened, at the offset and batch time reported. What is not: that
every change is reported. Compaction keeps the last record per key below the cleaner's checkpoint
(``cleaned_offset``) and merges batches (a merged batch's timestamp is the latest of theirs), so the records
there only set where each group and member stood; the changes before them are gone. The changes reported
are therefore a lower bound, exact from ``cleaned_offset`` on.
"""

from __future__ import annotations

from collections.abc import Iterable

from raygroups.coordinator.consumer_records import (
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
)
from raygroups.coordinator.records import GroupMetadataKey, GroupMetadataValue
from raygroups.offsets_log.batch import Batch


def membership_changes(batches: Iterable[Batch], cleaned_offset: int = 0) -> list[dict]:
    """The membership changes the records of ``batches`` (a partition's log, in log order) show, in log
    order, those at offsets from ``cleaned_offset`` on only (see the module docstring). Each is a dict:
    ``group``, ``protocol`` (``classic`` or ``consumer``), ``change`` (``added`` or ``removed``), ``member``
    (the member id), ``client_id``, ``group_instance_id``, ``generation`` (classic: the generation whose
    record shows the change) or ``epoch`` (consumer: the group epoch after it; None if no epoch record was
    seen), ``offset`` and ``timestamp_ms`` (its batch's)."""
    classic: dict[str, dict[str, tuple[str, str | None]]] = {}  # group -> member id -> (client id, instance id)
    consumer: dict[tuple[str, str], ConsumerGroupMemberMetadataValue] = {}
    epochs: dict[str, int] = {}
    out: list[dict] = []
    for batch in batches:
        pending: list[dict] = []  # this batch's consumer-group changes: their epoch is the batch's last
        for offset, (key, value) in zip(batch.record_offsets(), batch.records, strict=True):
            reported = offset >= cleaned_offset
            where = {"offset": offset, "timestamp_ms": batch.timestamp_ms}
            if isinstance(key, GroupMetadataKey):
                members = {m.member_id: (m.client_id, m.group_instance_id)
                           for m in (value.members if isinstance(value, GroupMetadataValue) else ())}
                before = classic.get(key.group, {})
                if reported:
                    generation = value.generation if value is not None else None
                    for change, ids, facts in (("removed", before.keys() - members.keys(), before),
                                               ("added", members.keys() - before.keys(), members)):
                        for member in sorted(ids):
                            out.append({"group": key.group, "protocol": "classic", "change": change,
                                        "member": member, "client_id": facts[member][0],
                                        "group_instance_id": facts[member][1], "generation": generation,
                                        **where})
                classic[key.group] = members
            elif isinstance(key, ConsumerGroupMemberMetadataKey):
                known = consumer.get((key.group, key.member_id))
                if reported and (known is None) != (value is None):
                    facts = value if value is not None else known
                    pending.append({"group": key.group, "protocol": "consumer",
                                    "change": "added" if value is not None else "removed",
                                    "member": key.member_id, "client_id": facts.client_id,
                                    "group_instance_id": facts.instance_id, **where})
                if value is None:
                    consumer.pop((key.group, key.member_id), None)
                else:
                    consumer[(key.group, key.member_id)] = value
            elif isinstance(key, ConsumerGroupMetadataKey) and value is not None:
                epochs[key.group] = value.epoch
        out.extend({**change, "epoch": epochs.get(change["group"])} for change in pending)
    out.sort(key=lambda c: c["offset"])
    return out
