"""Hot standbys (``actors.standby``) against the real ``LogServer`` and real file logs, in-process (no
Ray): a standby that read a follower's log in pieces, promoted when the log is released to this node,
continues it to the end (``continue_standby``, the promoted shard's code) and gives the state a full
replay gives; a truncation or a compaction swap makes it start over; a batch bigger than a read's share
still comes; a rewrite it did not see, a restarted log server, another opener of the log since the
release, another leader epoch at its position or a rest that cannot be replayed refuse it (the shard
then replays the whole log)."""

from __future__ import annotations

import asyncio

import pytest
from raygroups.actors.log_compaction import accepted_versions
from raygroups.actors.log_server import LogServer
from raygroups.actors.standby import (
    Follow,
    Standby,
    StandbyRefused,
    continue_standby,
    epoch_at,
    standby_matches,
)
from raygroups.coordinator.records import (
    new_empty_group_metadata_record,
    new_group_metadata_tombstone_record,
    new_offset_commit_record,
    new_offset_commit_tombstone_record,
)
from raygroups.coordinator.state import DurableState
from raygroups.offsets_log import Batch, open_log, replay
from raygroups.offsets_log.loader import Replayer
from raygroups.offsets_log.replica_state import partition_dir

from raygroups.compaction.job import staging_dir
from tests.unit.test_follower_compaction import _compact_leader, _setup

SEGMENT_BYTES = 2048


def _state(leader: str, epoch: int, partition_epoch: int) -> dict:
    return {"replicas": ["L", "F"], "leader": leader, "leader_epoch": epoch, "isr": ["L", "F"],
            "partition_epoch": partition_epoch}


def _records(i: int) -> tuple:
    """Commits of three groups, with now and then a deleted offset, an empty group's metadata and a
    deleted group."""
    group = f"g{i % 3}"
    recs = [new_offset_commit_record(group, "t", i % 4, i, -1, "m", 1_000 + i)]
    if i % 5 == 4:
        recs.append(new_offset_commit_tombstone_record(group, "t", (i + 1) % 4))
    if i % 7 == 0:
        recs.append(new_empty_group_metadata_record(group, 1_000 + i))
    if i % 11 == 10:
        recs.append(new_group_metadata_tombstone_record(f"g{(i + 1) % 3}"))
    return tuple(recs)


class FollowerNode:
    """Node F: its LogServer following partition 0 (leader L), and a standby reading through ``tail``."""

    def __init__(self, server: LogServer, loop) -> None:
        self.server = server
        self.standby = Standby(
            lambda positions, max_bytes: asyncio.run_coroutine_threadsafe(
                server.tail(positions, max_bytes), loop).result(10))

    async def poll(self) -> int:
        return await asyncio.to_thread(self.standby.poll)

    async def append(self, first: int, n: int, epoch: int) -> None:
        end = (await self.server.state(0))["log_end_offset"]
        for i in range(first, first + n):
            batch = Batch(end, epoch, 1_000 + i, _records(i))
            assert (await self.server.append(0, [batch], epoch))["ok"]
            end = batch.next_offset

    async def promote(self, epoch: int, partition_epoch: int):
        """Leadership moves to F, in the promoted shard's order: the server releases the log, the shard
        opens it, takes the standby and asks under which token the log was released. Returns
        ``(follow, released token, log)``."""
        assert (await self.server.update_partition(0, _state("F", epoch, partition_epoch)))["ok"]
        plog = open_log(partition_dir(self.server.node_dir, 0), segment_bytes=SEGMENT_BYTES)
        follow = self.standby.take(0)
        released = await self.server.released_token(0)
        return follow, released, plog


def _finish(follow: Follow, released, plog) -> tuple[DurableState, int]:
    state = DurableState()
    tailed = continue_standby(follow, released, plog, state)
    return state, tailed


def _full_replay(plog) -> DurableState:
    state = DurableState()
    replay(plog, state)
    return state


async def _node(tmp_path, segment_bytes: int = SEGMENT_BYTES) -> FollowerNode:
    server = LogServer("F", str(tmp_path / "F"), segment_bytes, None)
    assert (await server.update_partition(0, _state("L", 1, 1)))["ok"]
    return FollowerNode(server, asyncio.get_running_loop())


def test_the_log_server_measures_each_standbys_lag_and_a_standby_that_stops_reading_falls_behind(
        tmp_path, monkeypatch):
    """``raygroups_standby_lag_records``' values: the replica's records past where its standby last read from;
    one that reads no more (a stalled spare) shows a lag that grows; a promotion ends it at 0."""
    import raygroups.actors.log_server as log_server
    import raygroups.actors.standby as standby

    monkeypatch.setattr(standby, "STANDBY_READ_BYTES", 1)  # one batch a read
    monkeypatch.setattr(log_server, "MIN_TAIL_BYTES", 1)

    async def scenario():
        node = await _node(tmp_path)
        assert node.server.standby_lags() == {}  # no standby read yet
        await node.poll()
        assert node.server.standby_lags() == {0: 0}
        await node.append(0, 3, 1)
        end = (await node.server.state(0))["log_end_offset"]
        assert node.server.standby_lags() == {0: end}  # read from 0: behind by all of it
        for _ in range(3):
            assert await node.poll() == 1
        # the third read started after the first two batches: the lag counts from there
        assert node.server.standby_lags() == {0: end - len(_records(0)) - len(_records(1))}
        await node.poll()
        assert node.server.standby_lags() == {0: 0}
        await node.append(3, 4, 1)  # the standby stops reading (its spare stalled)
        assert node.server.standby_lags() == {0: sum(len(_records(i)) for i in range(3, 7))}
        follow, _released, plog = await node.promote(2, 2)
        with plog:
            assert follow is not None
            assert node.server.standby_lags() == {0: 0}  # led here now: behind nothing, and forgotten
            assert node.server.standby_lags() == {}

    asyncio.run(scenario())


def test_a_promoted_standby_continues_the_log_and_equals_a_full_replay(tmp_path):
    async def scenario():
        node = await _node(tmp_path)
        await node.append(0, 40, 1)
        assert await node.poll() > 0
        await node.append(40, 40, 1)
        await node.poll()
        await node.poll()  # nothing new: nothing fed
        assert await node.poll() == 0
        read_to = node.standby.status()[0]["next_offset"]
        await node.append(80, 25, 1)  # never read by the standby: the promotion replays it
        follow, released, plog = await node.promote(2, 2)
        with plog:
            assert released == follow.token and standby_matches(follow, released, plog) is None
            assert follow.replayer.next_offset == read_to < plog.log_end_offset
            state, tailed = _finish(follow, released, plog)
            assert tailed == sum(len(_records(i)) for i in range(80, 105))
            assert state.pending_offsets > 0  # lazily installed, as a load
            assert state == _full_replay(plog)
        assert node.standby.status() == {}  # taken: the spare keeps nothing else

    asyncio.run(scenario())


def test_a_truncation_makes_the_standby_start_over_and_a_rewrite_it_missed_refuses_it(tmp_path):
    async def scenario():
        node = await _node(tmp_path)
        await node.append(0, 30, 1)
        await node.poll()
        token = node.standby._follows[0].token
        # Leader-epoch truncation (a new leader whose log ends earlier), then that leader's batches.
        cut = sum(len(_records(i)) for i in range(20))  # the end of the 20th batch
        assert (await node.server.truncate_to(0, cut, 2))["ok"]
        await node.append(100, 10, 2)
        await node.poll()
        follow = node.standby._follows[0]
        assert follow.token != token and follow.replayer.next_offset == (await node.server.state(0))["log_end_offset"]
        # A second truncation the standby does not read before the promotion: the shard replays the log.
        assert (await node.server.truncate_to(0, cut, 3))["ok"]
        await node.append(200, 5, 3)
        follow, released, plog = await node.promote(4, 4)
        with plog:
            assert "rewritten" in standby_matches(follow, released, plog)
            with pytest.raises(StandbyRefused, match="rewritten"):
                continue_standby(follow, released, plog, DurableState())

    asyncio.run(scenario())


def test_a_restarted_log_server_or_another_epoch_at_the_position_refuses_the_standby(tmp_path):
    async def scenario():
        node = await _node(tmp_path)
        await node.append(0, 12, 1)
        await node.poll()
        await node.server.close()
        # Another instance of the server (a restart) releases a log it never opened: no token to match.
        node.server = LogServer("F", str(tmp_path / "F"), SEGMENT_BYTES, None)
        follow, released, plog = await node.promote(2, 2)
        with plog:
            assert released is None and "no token" in standby_matches(follow, released, plog)
            # The same offsets under another leader epoch (Kafka's log matching says: another log).
            other = Replayer("x", 0, lazy=True, standby=True)
            other.feed(plog.raw_payloads(0))
            other.last_epoch = 7
            assert "leader epoch 7" in standby_matches(Follow(0, "t", plog.open_generation - 1, other), "t", plog)
            assert epoch_at(plog.epoch_entries, plog.log_end_offset - 1) == 1
            assert epoch_at([(1, 0), (3, 10)], 9) == 1 and epoch_at([(1, 0), (3, 10)], 10) == 3
            assert epoch_at([(1, 5)], 4) is None

    asyncio.run(scenario())


def test_a_compaction_swap_makes_the_standby_start_over_from_the_compacted_log(tmp_path):
    async def scenario():
        leader_log, follower, rep, store = await _setup(tmp_path, 120)
        node = FollowerNode(follower, asyncio.get_running_loop())
        await node.poll()
        token = node.standby._follows[0].token
        up, outputs = _compact_leader(leader_log, store, "A", tmp_path / "a")
        answers = await rep.swap_followers(store.uri, staging_dir(0, "A"), outputs,
                                           accepted_versions(up["segments"]), 10)
        assert answers["F"]["ok"] and answers["F"]["swapped"] > 0
        while await node.poll():
            pass
        follow = node.standby._follows[0]
        assert follow.token != token
        assert follow.replayer.records < 120  # it read the compacted log from its start
        assert (await follower.update_partition(0, {"replicas": ["L", "F"], "leader": "F",
                                                    "leader_epoch": rep.epoch + 1, "isr": ["L", "F"],
                                                    "partition_epoch": 2}))["ok"]
        with open_log(partition_dir(follower.node_dir, 0), segment_bytes=1024) as plog:
            follow = node.standby.take(0)
            released = await follower.released_token(0)
            assert standby_matches(follow, released, plog) is None
            state, tailed = _finish(follow, released, plog)
            assert tailed == 0 and state == _full_replay(plog) == _full_replay(leader_log)

    asyncio.run(scenario())


def test_a_batch_the_standby_cannot_decode_stops_it_until_the_log_is_rewritten():
    """A payload that passes its CRC but is no batch: the standby stops on that log (the promotion would
    replay the log, and fail there as a load does) and asks its log server for nothing more of it until
    the log's token changes; a rewritten log is read again from its start."""
    import msgpack
    from raygroups.offsets_log.codec import encode_payload

    good = [encode_payload(Batch(0, 1, 1_000, _records(0)))]
    answers = [{"token": "t1", "from": 0, "payloads": [msgpack.packb([9, 9])], "end": 1, "generation": 1},
               {"token": "t1", "from": None, "payloads": [], "end": 1, "generation": 1},
               {"token": "t2", "from": 0, "payloads": good, "end": 1, "generation": 2}]
    asked = []

    def tail(positions, max_bytes):
        asked.append(dict(positions))
        return {"partitions": {0: answers[len(asked) - 1]}, "released": {}}

    standby = Standby(tail)
    assert standby.poll() == 0  # nothing applied: the standby thread waits before it asks again
    follow = standby._follows[0]
    assert follow.broken and "cannot be decoded" in follow.broken
    assert "stopped" in standby_matches(follow, "t1", None)
    with pytest.raises(StandbyRefused, match="stopped"):
        continue_standby(follow, "t1", None, DurableState())
    assert standby.poll() == 0 and asked[1] == {0: ("t1", None)}  # nothing asked of the broken log
    assert standby.poll() == 1 and asked[2] == {0: ("t1", None)}
    follow = standby._follows[0]
    assert follow.broken is None and follow.token == "t2" and follow.replayer.records == len(_records(0))


def test_another_opener_of_the_released_log_or_a_rest_that_cannot_be_replayed_refuses_the_standby(tmp_path):
    """Opened by another shard after the release (which could have compacted or truncated it): refused
    by the open generation. A batch past the standby's position that passes its CRC but is no batch:
    the continuation is refused (the shard then fails as a full load of that log does, rather than
    serving the standby's state)."""
    import msgpack
    from raygroups.offsets_log.codec import frame

    async def scenario():
        node = await _node(tmp_path)
        await node.append(0, 10, 1)
        await node.poll()
        assert (await node.server.update_partition(0, _state("F", 2, 2)))["ok"]
        directory = partition_dir(node.server.node_dir, 0)
        open_log(directory, segment_bytes=SEGMENT_BYTES).close()  # a shard that led here and went
        with open_log(directory, segment_bytes=SEGMENT_BYTES) as plog:
            follow = node.standby.take(0)
            released = await node.server.released_token(0)
            assert released == follow.token
            assert "opened 1 more time" in standby_matches(follow, released, plog)
        # Another standby, then a frame with a valid CRC but no batch in it after its position.
        server = LogServer("F", str(tmp_path / "G"), SEGMENT_BYTES, None)
        assert (await server.update_partition(0, _state("L", 1, 1)))["ok"]
        other = FollowerNode(server, asyncio.get_running_loop())
        await other.append(0, 5, 1)
        await other.poll()
        end = (await server.state(0))["log_end_offset"]
        assert (await server.update_partition(0, _state("F", 2, 2)))["ok"]
        with open_log(partition_dir(server.node_dir, 0), segment_bytes=SEGMENT_BYTES) as plog:
            path = plog.segment_paths()[-1]
            follow = other.standby.take(0)
            released = await server.released_token(0)
            assert standby_matches(follow, released, plog) is None and follow.replayer.next_offset == end
        with open(path, "ab") as f:
            f.write(frame(msgpack.packb([1, end, 1, 0, 1, 0, ["g"], ["not a key's bytes", [1, 2]]])))
        with open_log(partition_dir(server.node_dir, 0), segment_bytes=SEGMENT_BYTES) as plog:
            follow.generation = plog.open_generation - 1  # as if this were the promotion's open
            with pytest.raises(StandbyRefused, match="continuing it failed"):
                continue_standby(follow, released, plog, DurableState())

    asyncio.run(scenario())


def test_a_batch_bigger_than_a_reads_share_still_reaches_the_standby(tmp_path):
    """A read starts at the sparse index entry before the standby's position: the batches before the
    position are not sent again (they would use up the share and the big batch would never come)."""
    async def scenario():
        node = await _node(tmp_path, segment_bytes=1 << 20)
        await node.append(0, 3, 1)  # a few small batches, in one segment and one index interval
        await node.poll()
        end = (await node.server.state(0))["log_end_offset"]
        big = tuple(new_offset_commit_record(f"g{i}", "t", i, i, -1, "x" * 40, 1_000) for i in range(2_000))
        batch = Batch(end, 1, 1_000, big)
        assert (await node.server.append(0, [batch], 1))["ok"]
        answer = await node.server.tail({0: (node.standby._follows[0].token, end)}, 1)
        assert len(answer["partitions"][0]["payloads"]) == 1  # the big one alone, nothing read before
        assert await node.poll() == 1
        assert node.standby.status()[0]["next_offset"] == batch.next_offset
        assert await node.poll() == 0  # and then nothing: no busy loop

    asyncio.run(scenario())


def test_a_standby_for_one_partition_reads_that_partition_only(tmp_path):
    """``shard.standby.per.partition``: a spare's standby asks the LogServer for its one partition
    (``tail(..., only=p)``), and gets nothing for a partition the node does not follow."""

    async def scenario():
        server = LogServer("F", str(tmp_path / "F"), SEGMENT_BYTES, None)
        for p in (0, 1):
            assert (await server.update_partition(p, _state("L", 1, 1)))["ok"]
            assert (await server.append(p, [Batch(0, 1, 1_000, _records(p))], 1))["ok"]
        assert (await server.update_partition(2, _state("F", 1, 1)))["ok"]  # led here: not followed
        assert set((await server.tail({}, 1 << 20))["partitions"]) == {0, 1}
        assert set((await server.tail({}, 1 << 20, 1))["partitions"]) == {1}
        assert (await server.tail({}, 1 << 20, 2))["partitions"] == {}
        loop = asyncio.get_running_loop()
        standby = Standby(lambda positions, max_bytes: asyncio.run_coroutine_threadsafe(
            server.tail(positions, max_bytes, 1), loop).result(10))
        assert await asyncio.to_thread(standby.poll) == 1
        assert list(standby.status()) == [1] and standby.status()[1]["next_offset"] == 1

    asyncio.run(scenario())
