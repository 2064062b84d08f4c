"""Identity carried inside KPL aggregates: which aggregate a record came in, who asked for it to
be written, and the caller's id.

Kinesis has no idempotent producer: a PutRecords whose reply was lost is sent again, and the
stream may then hold two copies. shardline makes copies harmless by identity, not bytes. Both
ids travel in the KPL format's standard per-record `tags` (`Record.tags`, field 4), which the KCL
and aws-kinesis-agg skip, so every other decoder still reads the same user records:

- `sl.a` on an aggregate's first record: the `AggregateId` of the aggregate. The producer resends
  an aggregate whose outcome it does not know with the same id and the same user records, so a
  consumer that already applied that id skips the copy.
- `sl.c` on an aggregate's first record, only when the caller is not "": the caller of every
  record of the aggregate (`UserRecord.caller`; an aggregate holds one caller's records). Through
  the HTTP API it is the authenticated principal the producer function stamped (never what a body
  or header says); a library producer's is `ProducerConfig.caller`. A caller asserts its keys and
  ids; shardline asserts the caller. Whoever can `PutRecord(s)` on the stream directly is inside
  the stream's trust boundary and can write any bytes, this tag included.
- `sl.id` on a record: the caller's own id for that user record (`UserRecord.id`).
- `sl.k` on a record instead of `sl.id`: an id derived from an `Idempotency-Key`, `<key>:<index>`
  (`UserRecord.id_derived`). It is another namespace: an explicit id `k:1` never meets it.

Ids are keyed by `caller_scope(caller)`: a consumer's scoped id is
`<caller_scope>/<i|k>/<id>`, so two callers' equal ids are two identities.

An `AggregateId` is `<producer>.<lane>.<counter>.<floor>`: the producer instance (random, per
process), the lane its aggregates were numbered in (the predicted shard, or a hash lane), the
aggregate's number in that lane (counting from 1), and the lane's floor when it was built — every
aggregate of the lane numbered below the floor is settled: the producer will never send it again.
Counters and floors are lowercase hexadecimal.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from functools import lru_cache
from typing import NamedTuple

from shardline.errors import AggregationError

#: Tag key of an aggregate's id (on its first record).
AGGREGATE_TAG = "sl.a"
#: Tag key of an aggregate's caller (on its first record; absent for the caller "").
CALLER_TAG = "sl.c"
#: Tag key of a user record's own id.
RECORD_ID_TAG = "sl.id"
#: Tag key of a user record's id derived from an `Idempotency-Key` (`<key>:<index>`).
DERIVED_ID_TAG = "sl.k"
#: The scope of records without a caller (None or ""): a library producer left at its default.
NO_CALLER_SCOPE = "-"

_AGGREGATE_ID = re.compile(r"([0-9a-z]{1,32})\.([0-9A-Za-z_-]{1,24})\.([0-9a-f]{1,16})\.([0-9a-f]{1,16})")


class AggregateId(NamedTuple):
    """The identity of one aggregate the producer built: see the module docstring."""

    producer: str
    lane: str
    counter: int
    floor: int

    @property
    def key(self) -> str:
        """The lane this aggregate was numbered in, across producers: `<producer>.<lane>`."""
        return f"{self.producer}.{self.lane}"

    def encode(self) -> str:
        return f"{self.producer}.{self.lane}.{self.counter:x}.{self.floor:x}"

    @classmethod
    def parse(cls, value: str) -> AggregateId:
        """The id in an `sl.a` tag; `AggregationError` if it is not one."""
        match = _AGGREGATE_ID.fullmatch(value)
        if match is None:
            raise AggregationError(f"not a shardline aggregate id: {value[:80]!r}")
        producer, lane, counter, floor = match.groups()
        return cls(producer, lane, int(counter, 16), int(floor, 16))


@lru_cache(maxsize=4096)  # a consumer asks per record; a stream has few callers
def caller_scope(caller: str | None) -> str:
    """The short, key-safe name of `caller` that scopes its ids: "-" for no caller (None or ""),
    else the first 16 characters of the lowercase base32 of sha256(caller as UTF-8) — 80 bits, so
    two callers share a scope only by a collision no one can aim at in practice."""
    if not caller:
        return NO_CALLER_SCOPE
    digest = hashlib.sha256(caller.encode("utf-8")).digest()
    return base64.b32encode(digest[:10]).decode("ascii").lower()


def new_producer_id() -> str:
    """A fresh producer identity: 80 random bits in base 32 (16 characters)."""
    number = int.from_bytes(os.urandom(10), "big")
    return "".join(_BASE32[(number >> shift) & 31] for shift in range(75, -1, -5))


_BASE32 = "0123456789abcdefghijklmnopqrstuv"
