"""Appending as a partition's leader: one operation's records become one batch at the log end, and a
storage failure becomes the ``AppendError`` a Kafka replica manager would return (a stale epoch is
``NOT_LEADER_OR_FOLLOWER``, anything else ``KAFKA_STORAGE_ERROR``)."""

from __future__ import annotations

from raygroups.coordinator.errors import AppendError, Errors
from raygroups.coordinator.records import Record
from raygroups.offsets_log.batch import Batch
from raygroups.offsets_log.errors import LogError, StaleEpochError


def append_as_leader(log, records: list[Record], leader_epoch: int, timestamp_ms: int) -> Batch:
    if log is None:
        raise AppendError(Errors.NOT_LEADER_OR_FOLLOWER, "the partition log is closed")
    batch = Batch(log.log_end_offset, leader_epoch, timestamp_ms, tuple(records))
    try:
        log.append(batch, leader_epoch)
    except StaleEpochError as e:
        raise AppendError(Errors.NOT_LEADER_OR_FOLLOWER, str(e)) from e
    except (LogError, OSError) as e:
        raise AppendError(Errors.KAFKA_STORAGE_ERROR, str(e)) from e
    return batch
