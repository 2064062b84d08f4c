"""Collector: packs Kinesis records into PutRecords requests within the count and byte caps."""

from __future__ import annotations

from shardline.producer._buffered import KinesisRecord


class PutRecordsBatch:
    """The Kinesis records of one PutRecords request, and the shards they were predicted for."""

    __slots__ = ("max_count", "max_size", "records", "shards", "size")

    def __init__(self, max_count: int, max_size: int) -> None:
        self.max_count = max_count
        self.max_size = max_size
        self.records: list[KinesisRecord] = []
        self.size = 0
        self.shards: set[str | None] = set()

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
