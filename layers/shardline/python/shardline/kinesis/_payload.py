"""What "the same payload" means for a re-used record id: the hash of the record's keys and data.

A client id (`UserRecord.id`) names one record of its caller. Posted again with the same id, the
record must carry the same payload — or the re-use is a conflict, refused (the producer API) or
dead-lettered (the consumers), never dropped or overwritten. The payload is what Kinesis stores
for the record and what routes it: the partition key, the explicit hash key ("" when none) and
the data. `payload_hash` is the hex SHA-256 of the three, each length-prefixed, so no two
different triples share an encoding.
"""

from __future__ import annotations

import hashlib

__all__ = ["payload_hash"]


def payload_hash(partition_key: str, explicit_hash_key: str | None, data: bytes) -> str:
    """The hex SHA-256 of (partition key, explicit hash key or "", data), each length-prefixed."""
    key = partition_key.encode("utf-8")
    hash_key = (explicit_hash_key or "").encode("utf-8")
    digest = hashlib.sha256()
    digest.update(len(key).to_bytes(4, "big") + key + len(hash_key).to_bytes(4, "big") + hash_key)
    digest.update(data)
    return digest.hexdigest()
