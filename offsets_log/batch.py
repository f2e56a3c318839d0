"""A record batch: the unit of append, replication and fsync."""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.records import Record


@dataclass(frozen=True, slots=True)
class Batch:
    base_offset: int
    leader_epoch: int
    timestamp_ms: int
    records: tuple[Record, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.records, tuple):
            object.__setattr__(self, "records", tuple(self.records))

    @property
    def last_offset(self) -> int:
        return self.base_offset + len(self.records) - 1

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.records)
