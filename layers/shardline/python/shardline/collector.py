"""Collector: packs Kinesis records into PutRecords requests within the count and byte caps."""

from __future__ import annotations

from dataclasses import dataclass, field

from shardline.reducer import KinesisRecord


@dataclass(slots=True, eq=False)
class PutRecordsBatch:
    """The Kinesis records of one PutRecords request, and the shards they were predicted for."""

    max_count: int
    max_size: int
    records: list[KinesisRecord] = field(default_factory=list)
    size: int = 0
    shards: set[str | None] = field(default_factory=set)

    def fits(self, kinesis_record: KinesisRecord) -> bool:
        return len(self.records) < self.max_count and self.size + kinesis_record.size <= self.max_size

    def add(self, kinesis_record: KinesisRecord) -> None:
        self.records.append(kinesis_record)
        self.size += kinesis_record.size
        self.shards.add(kinesis_record.predicted_shard)

    @property
    def full(self) -> bool:
        return len(self.records) >= self.max_count

    @property
    def user_record_count(self) -> int:
        return sum(len(record.members) for record in self.records)
