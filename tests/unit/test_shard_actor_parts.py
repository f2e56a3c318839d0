"""The shard actor's wiring, driven in-process (the actor class needs no Ray outside a deployment): a spare
without a partition, its adoption, a commit through group commit into the log, a step-down, a close."""

from __future__ import annotations

import asyncio

import pytest
from raygroups.actors.shard_actor import CoordinatorShard
from raygroups.coordinator.errors import Errors
from raygroups.coordinator.messages import OffsetCommitRequest, OffsetFetchRequest


def test_a_spare_serves_nothing_until_it_adopts_a_partition(tmp_path):
    async def scenario() -> None:
        shard = CoordinatorShard(None, 2, {}, str(tmp_path))
        assert await shard.standby_status() is None  # no deployment: no standby
        with pytest.raises(RuntimeError, match="serves no partition"):
            await shard.ping()
        assert await shard.adopt(1) is True
        assert await shard.adopt(1) is True and await shard.adopt(0) is False
        status = await shard.ready()
        assert (status["partition"], status["state"]) == (1, "ACTIVE")
        assert "adopted" in status["start_timeline"] and "active" in status["start_timeline"]
        await shard.close()
        assert await shard.ping() == "CLOSED"

    asyncio.run(scenario())


def test_a_commit_is_appended_as_one_batch_and_survives_a_new_instance(tmp_path):
    commit = OffsetCommitRequest("g", {("t", 0): (5, "", -1), ("t", 9): (1, "", -1)})

    async def first() -> None:
        shard = CoordinatorShard(0, 1, {}, str(tmp_path), topics={"t": 1})
        await shard.ready()
        response = await shard.handle(commit)
        assert response.errors == {("t", 0): Errors.NONE, ("t", 9): Errors.UNKNOWN_TOPIC_OR_PARTITION}
        status = await shard.status()
        assert (status["batches"], status["records"], status["append_failures"]) == (1, 1, 0)
        assert (await shard.audit())["live"] == (await shard.audit())["replay"]
        await shard.close()

    async def second() -> None:
        shard = CoordinatorShard(0, 1, {}, str(tmp_path))
        status = await shard.ready()
        assert status["load_records"] == 1 and status["leader_epoch"] == 1  # above the epoch in the log
        fetched = await shard.handle(OffsetFetchRequest("g", (("t", 0),)))
        assert fetched.offsets[("t", 0)][0] == 5
        await shard.close()

    asyncio.run(first())
    asyncio.run(second())


def test_a_step_down_leaves_the_partition_failed_and_answers_not_coordinator(tmp_path):
    async def scenario() -> None:
        shard = CoordinatorShard(0, 1, {}, str(tmp_path), topics={"t": 1})
        await shard.ready()
        shard._served.step_down("a newer leader exists")
        shard._served.step_down("again: nothing more happens")
        assert await shard.ping() == "FAILED"
        response = await shard.handle(OffsetCommitRequest("g", {("t", 0): (5, "", -1)}))
        assert response.errors == {("t", 0): Errors.NOT_COORDINATOR}
        await shard.close()

    asyncio.run(scenario())
