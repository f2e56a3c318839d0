"""Shared hypothesis strategies and helpers for the offsets-log tests."""

from __future__ import annotations

from hypothesis import strategies as st
from raygroups.coordinator.consumer_records import (
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
)
from raygroups.coordinator.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
)
from raygroups.coordinator.state import DurableState
from raygroups.offsets_log.batch import Batch

GROUPS = st.sampled_from(["g0", "g1", "g2", "grüße-😀"])
TOPICS = st.sampled_from(["t0", "t1"])
PARTITIONS = st.integers(0, 2)
SMALL_TEXT = st.text(max_size=6)
INT64 = st.integers(-(2**63), 2**63 - 1)

offset_commit_values = st.builds(
    OffsetCommitValue,
    offset=st.integers(0, 2**40),
    leader_epoch=st.integers(-1, 100),
    metadata=SMALL_TEXT,
    commit_timestamp_ms=st.integers(0, 2**45),
    expire_timestamp_ms=st.none() | st.integers(0, 2**45),
)
members = st.builds(
    MemberMetadata,
    member_id=SMALL_TEXT,
    group_instance_id=st.none() | SMALL_TEXT,
    client_id=SMALL_TEXT,
    client_host=SMALL_TEXT,
    rebalance_timeout_ms=st.integers(0, 2**31 - 1),
    session_timeout_ms=st.integers(0, 2**31 - 1),
    subscription=st.binary(max_size=8),
    assignment=st.binary(max_size=8),
)
group_metadata_values = st.builds(
    GroupMetadataValue,
    protocol_type=st.sampled_from(["", "consumer"]),
    generation=st.integers(0, 1000),
    protocol=st.none() | st.sampled_from(["range", "roundrobin"]),
    leader=st.none() | SMALL_TEXT,
    current_state_timestamp_ms=st.integers(-1, 2**45),
    members=st.lists(members, max_size=3).map(tuple),
)

offset_commit_records = st.tuples(
    st.builds(OffsetCommitKey, GROUPS, TOPICS, PARTITIONS), st.none() | offset_commit_values
)
group_metadata_records = st.tuples(st.builds(GroupMetadataKey, GROUPS), st.none() | group_metadata_values)
records = st.one_of(offset_commit_records, offset_commit_records, group_metadata_records)
record_lists = st.lists(st.lists(records, min_size=1, max_size=6), min_size=0, max_size=25)


def make_batches(record_lists, epochs=None, start_offset: int = 0, timestamp_ms: int = 1_000) -> list[Batch]:
    """Contiguous batches from a list of record lists; ``epochs`` (non-decreasing) defaults to all 0."""
    out = []
    offset = start_offset
    for i, recs in enumerate(record_lists):
        epoch = epochs[i] if epochs is not None else 0
        b = Batch(offset, epoch, timestamp_ms + i, tuple(recs))
        out.append(b)
        offset = b.next_offset
    return out


def append_all(log, batches) -> None:
    for b in batches:
        log.append(b, b.leader_epoch)


def sequential_state(batches) -> DurableState:
    state = DurableState()
    for b in batches:
        for key, value in b.records:
            state.replay(key, value)
    return state


def simple_batches(n: int, per_batch: int = 1, epoch: int = 0) -> list[Batch]:
    recs = [
        [(OffsetCommitKey(f"g{i % 3}", "t", j), OffsetCommitValue(i * 10 + j, 1, "m", 1000 + i)) for j in range(per_batch)]
        for i in range(n)
    ]
    return make_batches(recs, [epoch] * n)


_WIDE_GROUPS = st.sampled_from([f"g{i}" for i in range(8)])
_oc_keys = st.builds(OffsetCommitKey, _WIDE_GROUPS, TOPICS, st.integers(0, 1))
_gm_keys = st.builds(GroupMetadataKey, _WIDE_GROUPS)
# Mostly values, some tombstones: many batches take the loader's tombstone-free fast path.
records_rare_tombstones = st.one_of(
    st.tuples(_oc_keys, offset_commit_values),
    st.tuples(_oc_keys, offset_commit_values),
    st.tuples(_oc_keys, offset_commit_values),
    st.tuples(_gm_keys, group_metadata_values),
    st.tuples(_oc_keys, st.none()),
    st.tuples(_gm_keys, st.none()),
)
histories = st.lists(st.lists(records_rare_tombstones, min_size=1, max_size=4), max_size=30)

# One offset key per group: every interleaving of commit/tombstone/metadata per group shows up quickly.
_narrow_oc_keys = st.builds(OffsetCommitKey, _WIDE_GROUPS, st.just("t"), st.just(0))
narrow_histories = st.lists(
    st.lists(
        st.one_of(
            st.tuples(_narrow_oc_keys, offset_commit_values),
            st.tuples(_narrow_oc_keys, offset_commit_values),
            st.tuples(_narrow_oc_keys, st.none()),
            st.tuples(_gm_keys, group_metadata_values),
            st.tuples(_gm_keys, st.none()),
        ),
        min_size=1,
        max_size=3,
    ),
    max_size=20,
)
offsets_only_histories = st.lists(
    st.lists(
        st.one_of(st.tuples(_narrow_oc_keys, offset_commit_values), st.tuples(_narrow_oc_keys, st.none())),
        min_size=1,
        max_size=3,
    ),
    max_size=20,
)


def stage_compacted(store, partition: int, run_id: str, closed: list[str], out_dir, *,
                    max_batch_records: int = 1000) -> list[dict]:
    """Compact ``closed`` with the reference compactor and leave its segments in ``store`` where a
    compaction run's Spark job leaves them (its bytes are the same); the run's output descriptions."""
    import os

    from raygroups.offsets_log.compactor import compact_segments
    from raygroups.offsets_log.segment import index_name
    from raygroups.offsets_log.store import file_crc32

    from raygroups.compaction.job import staging_dir

    compact_segments(closed, out_dir, delete_retention_ms=0, now_ms=10_000, max_batch_records=max_batch_records)
    outputs = []
    for path in closed:
        name = os.path.basename(path)
        base = int(name[:20])
        store.put(f"{staging_dir(partition, run_id)}/{name}", (out_dir / name).read_bytes())
        store.put(f"{staging_dir(partition, run_id)}/{index_name(base)}", (out_dir / index_name(base)).read_bytes())
        crc, size = file_crc32(str(out_dir / name))
        outputs.append({"name": name, "base_offset": base, "bytes_out": size, "crc32_out": crc})
    return outputs


# KIP-848 consumer groups, as the coordinator writes them (``shard_consumer``): a group is created by its
# first member's records with the epoch record; a member leaves by the tombstones of its three keys and
# an epoch bump; an empty group is deleted by the tombstones of its keys, its metadata's last; an empty
# consumer group gives way to a classic one (and a classic or simple one to a consumer group) by tombstones
# first. Offsets are committed and deleted at any time.
@st.composite
def consumer_histories(draw):
    groups = ["g0", "g1"]
    model = {g: {"cg": False, "members": [], "classic": False, "epoch": 0} for g in groups}
    batches: list[list] = []
    counter = 0
    for _ in range(draw(st.integers(0, 24))):
        g = draw(st.sampled_from(groups))
        s = model[g]
        op = draw(st.sampled_from(["commit", "commit", "uncommit", "join", "join", "update", "leave", "delete",
                                   "classic", "unclassic"]))
        batch: list = []

        def cg_tombstones(g=g, s=s, batch=batch):
            batch.append((ConsumerGroupTargetAssignmentMetadataKey(g), None))
            batch.append((ConsumerGroupMetadataKey(g), None))
            s["cg"], s["epoch"] = False, 0

        if op == "commit":
            batch.append((OffsetCommitKey(g, "t", draw(st.integers(0, 1))), draw(offset_commit_values)))
        elif op == "uncommit":
            batch.append((OffsetCommitKey(g, "t", draw(st.integers(0, 1))), None))
        elif op == "join" and not (s["classic"] and not draw(st.booleans())):
            if s["classic"]:
                batch.append((GroupMetadataKey(g), None))  # an empty classic group gives way
                s["classic"] = False
            counter += 1
            member = f"m{counter}"
            s["members"].append(member)
            s["epoch"] += 1
            s["cg"] = True
            batch.append((ConsumerGroupMemberMetadataKey(g, member), ConsumerGroupMemberMetadataValue(
                draw(st.none() | st.just("i")), None, "c", "/h", ("t",), None, None, 1_000)))
            batch.append((ConsumerGroupMetadataKey(g), ConsumerGroupMetadataValue(s["epoch"], (("t", 2),))))
            batch.append((ConsumerGroupTargetAssignmentMemberKey(g, member),
                          ConsumerGroupTargetAssignmentMemberValue((("t", (0,)),))))
            batch.append((ConsumerGroupTargetAssignmentMetadataKey(g),
                          ConsumerGroupTargetAssignmentMetadataValue(s["epoch"])))
            batch.append((ConsumerGroupCurrentMemberAssignmentKey(g, member), ConsumerGroupCurrentMemberAssignmentValue(
                s["epoch"], s["epoch"] - 1, "stable", (("t", (0,)),) if draw(st.booleans()) else (), ())))
        elif op == "update" and s["members"]:
            member = draw(st.sampled_from(s["members"]))
            batch.append((ConsumerGroupCurrentMemberAssignmentKey(g, member), ConsumerGroupCurrentMemberAssignmentValue(
                s["epoch"], s["epoch"], draw(st.sampled_from(["stable", "unrevoked_partitions"])), (),
                (("t", (1,)),))))
        elif op == "leave" and s["members"]:
            member = s["members"].pop(draw(st.integers(0, len(s["members"]) - 1)))
            batch.extend([(ConsumerGroupCurrentMemberAssignmentKey(g, member), None),
                          (ConsumerGroupTargetAssignmentMemberKey(g, member), None),
                          (ConsumerGroupMemberMetadataKey(g, member), None)])
            s["epoch"] += 1
            batch.append((ConsumerGroupMetadataKey(g), ConsumerGroupMetadataValue(s["epoch"], ())))
        elif op == "delete" and s["cg"] and not s["members"]:
            cg_tombstones()
        elif op == "classic" and not s["members"]:
            if s["cg"]:
                cg_tombstones()  # an empty consumer group gives way to a classic one
            batch.append((GroupMetadataKey(g), GroupMetadataValue("consumer", 1, "range", None, 0, ())))
            s["classic"] = True
        elif op == "unclassic" and s["classic"]:
            batch.append((GroupMetadataKey(g), None))
            s["classic"] = False
        if batch:
            cut = draw(st.integers(0, len(batch)))  # a write may span two batches (as appends coalesce)
            batches.extend(b for b in (batch[:cut], batch[cut:]) if b)
    return batches


def consumer_group_lifecycle() -> list[list]:
    """One concrete history of the consumer-group records (batches), for tests that cannot draw many: a
    simple group's offsets, a consumer group that replaces it, two members, one leaving, the group emptied
    and deleted with its offsets left behind, a simple group made again by a commit, and a second consumer
    group still alive at the end (converted from an empty classic group)."""
    def join(g, member, epoch, partitions):
        return [(ConsumerGroupMemberMetadataKey(g, member), ConsumerGroupMemberMetadataValue(
                    None, None, "c", "/h", ("t",), None, None, 1_000)),
                (ConsumerGroupMetadataKey(g), ConsumerGroupMetadataValue(epoch, (("t", 2),))),
                (ConsumerGroupTargetAssignmentMemberKey(g, member), ConsumerGroupTargetAssignmentMemberValue(
                    (("t", tuple(partitions)),))),
                (ConsumerGroupTargetAssignmentMetadataKey(g), ConsumerGroupTargetAssignmentMetadataValue(epoch)),
                (ConsumerGroupCurrentMemberAssignmentKey(g, member), ConsumerGroupCurrentMemberAssignmentValue(
                    epoch, epoch - 1, "stable", (("t", tuple(partitions)),), ()))]

    def leave(g, member, epoch):
        return [(ConsumerGroupCurrentMemberAssignmentKey(g, member), None),
                (ConsumerGroupTargetAssignmentMemberKey(g, member), None),
                (ConsumerGroupMemberMetadataKey(g, member), None),
                (ConsumerGroupMetadataKey(g), ConsumerGroupMetadataValue(epoch, ()))]

    def commit(g, p, offset):
        return [(OffsetCommitKey(g, "t", p), OffsetCommitValue(offset, -1, "m", 1_000 + offset))]

    history = [commit("g0", 0, 1), commit("g0", 1, 2), join("g0", "a", 1, [0, 1]), commit("g0", 0, 3),
               join("g0", "b", 2, [1]), commit("g0", 1, 4), leave("g0", "a", 3), commit("g0", 0, 5),
               leave("g0", "b", 4),
               [(ConsumerGroupTargetAssignmentMetadataKey("g0"), None), (ConsumerGroupMetadataKey("g0"), None)],
               commit("g1", 0, 6), [(GroupMetadataKey("g1"), GroupMetadataValue("consumer", 1, "range", None, 0, ()))],
               [(GroupMetadataKey("g1"), None)], join("g1", "c", 1, [0, 1]), commit("g1", 1, 7)]
    history += [commit("g0", 0, 8 + i) for i in range(12)]  # closes segments after the group's records
    return history
