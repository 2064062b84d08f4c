"""The Kinesis event-source mapping, as Lambda runs it.

- `runner`: `MappingRunner`, one mapping: a poller per shard, parents before children.
- `shard`: one shard's poller thread, its batches and retries (it sees its mapping through `Runner`).
- `batches`: the pure parts: records, batches, what an answer means, on-failure messages.
- `filters`: `FilterCriteria`, refused where Lambda refuses it, applied as Lambda applies it.
"""
