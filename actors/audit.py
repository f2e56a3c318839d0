"""What a chaos run's checker (and the replication tests) read from a partition's leader once the workload
stopped: its records, and an audit comparing its live state with a fresh replay of its log."""

from __future__ import annotations

from raygroups.coordinator.state import DurableState
from raygroups.offsets_log import replay
from raygroups.offsets_log.batch import epoch_runs, records_below
from raygroups.offsets_log.loader import state_digest
from raygroups.offsets_log.membership import membership_changes

AUDIT_ATTEMPTS = 5


async def replica_records(served, up_to_offset: int | None = None) -> list:
    """The leader's records below ``up_to_offset``."""
    return await served.run_io(records_below, served.ctx.log, up_to_offset)


async def audit(served, up_to_offset: int | None = None, from_offset: int = 0) -> dict:
    """The digest of the live state and of a fresh replay of this leader's log (equal unless an applied
    record was not logged, or a logged one not applied), the log's batches per leader epoch from
    ``from_offset`` and below ``up_to_offset``, its compacted prefix's end (``cleaned_offset``), and the membership changes its whole log shows (``offsets_log.membership``: a lower
    bound once compaction ran). Taken between appends; again (a few times) if something was applied
    meanwhile."""
    ctx = served.ctx
    for _ in range(AUDIT_ATTEMPTS):
        async with served.writer.between_appends():
            live = state_digest(ctx.shard.state)
            replayed, runs, membership = await served.run_io(_replay_and_runs, ctx.log, up_to_offset, from_offset)
            if live == state_digest(ctx.shard.state):  # nothing was applied meanwhile
                break
    return {"partition": served.partition, "node": served.node, "leader_epoch": ctx.epoch, "live": live,
            "replay": replayed, "log_end_offset": ctx.log.log_end_offset, "runs": runs,
            "membership": membership, "cleaned_offset": ctx.log.cleaned_offset}


def _replay_and_runs(plog, up_to_offset: int | None, from_offset: int = 0) -> tuple[str, list, list]:
    state = DurableState()
    replay(plog, state)
    membership = membership_changes(plog.batches(0), getattr(plog, "cleaned_offset", 0))
    return state_digest(state), epoch_runs(plog, up_to_offset, from_offset), membership
