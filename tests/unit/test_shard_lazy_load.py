"""The shard actor's lazy load, driven in-process (the actor class needs no Ray outside a deployment): a
record that passes its CRC but cannot be decoded is met by the background materialization after the
shard began serving, and the partition fails as a failed load would, with the log named."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgpack
from raygroups.actors.shard_actor import CoordinatorShard
from raygroups.coordinator.records import OffsetCommitKey, new_offset_commit_record
from raygroups.offsets_log import Batch, open_log
from raygroups.offsets_log.codec import FORMAT, encode_key, frame
from raygroups.offsets_log.replica_state import partition_dir


def test_a_record_the_background_cannot_decode_fails_the_partition(tmp_path):
    directory = Path(partition_dir(str(tmp_path), 0))
    with open_log(directory) as log:
        log.append(Batch(0, 0, 1, (new_offset_commit_record("g", "t", 0, 1, -1, "", 1),)), 0)
    # A newer writer's value (version 7) for another partition of the group, CRC-framed at the log end.
    payload = (FORMAT, 1, 0, 1, 1, 0, ["g"], [encode_key(OffsetCommitKey("g", "t", 1)), (7, "from", "a", "newer")])
    segment = sorted(directory.glob("*.log"))[-1]
    with open(segment, "ab") as f:
        f.write(frame(msgpack.packb(payload, use_bin_type=True)))

    async def scenario() -> dict:
        shard = CoordinatorShard(0, 1, {}, str(tmp_path))
        await shard.ping()  # starts the load
        for _ in range(500):
            status = await shard.status()
            if status["state"] == "FAILED":
                return status
            await asyncio.sleep(0.01)
        raise AssertionError(f"the shard went on serving: {status}")

    status = asyncio.run(scenario())
    assert status["load_records"] == 2  # the load itself passed: the shard served until the record was met
    assert "OffsetCommit value version 7" in status["load_error"] and str(directory) in status["load_error"]
    assert "offsets_materialized" not in status["start_timeline"]
