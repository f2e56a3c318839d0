"""A source's records as Kafka RecordBatch v2 (magic 2), encoded by ``kio.records``: record i of a partition
at offset i, key and value as the source gives them, no compression, no transactions."""

from __future__ import annotations

import datetime
import io

from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_new_batch

from raygroups.sources import SourceRecord

# A record's bytes on the wire beyond its key and value: attributes, timestamp and offset deltas, the
# varint lengths and the header count (at most ~20 bytes); used to cut a fetch to its byte budget.
RECORD_OVERHEAD_BYTES = 20
BATCH_OVERHEAD_BYTES = 61  # a RecordBatch v2 header
LOG_APPEND_TIME = 0x08  # a batch's timestamp type bit (Kafka's RecordBatch.TIMESTAMP_TYPE_MASK): LogAppendTime


def record_size(record: SourceRecord) -> int:
    return len(record.key or b"") + len(record.value or b"") + RECORD_OVERHEAD_BYTES


def encode_batch(records: list[SourceRecord], timestamp_ms: int) -> bytes:
    """One RecordBatch holding ``records`` (consecutive offsets of one partition), all stamped
    ``timestamp_ms`` (a source has no timestamps: the time they were served, Kafka's LogAppendTime)."""
    when = datetime.datetime.fromtimestamp(timestamp_ms / 1000, tz=datetime.UTC)
    buffer = io.BytesIO()
    write_new_batch(buffer, NewRecordBatch(
        producer_id=-1, producer_epoch=-1, base_sequence=-1, attributes=LOG_APPEND_TIME,
        records=tuple(Record(attributes=0, timestamp=when, offset=r.offset, key=r.key, value=r.value, headers=())
                      for r in records),
    ))
    return buffer.getvalue()
