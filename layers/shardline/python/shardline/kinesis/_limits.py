"""Every Kinesis Data Streams limit that shardline checks, in one place.

Validation, aggregation, collection and rate limiting all read their numbers from a
`Limits` value; nothing else in the library spells a Kinesis limit. The defaults are the
service defaults. AWS lets a stream raise its maximum record size (1 MiB up to 10 MiB,
`UpdateMaxRecordSize`), so that one — and the request size that follows it — is configurable.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardline.errors import ConfigurationError

KiB = 1024
MiB = 1024 * KiB

#: Smallest and largest hash key a record can map to (the 128-bit MD5 space).
MIN_HASH_KEY = 0
MAX_HASH_KEY = 2**128 - 1

#: A partition key is 1..256 UTF-16 code units: the service counts a Java String's length, so a
#: character beyond U+FFFF (an emoji) counts 2 and 128 emoji is the most a key can hold.
MIN_PARTITION_KEY_LENGTH = 1
MAX_PARTITION_KEY_LENGTH = 256

#: A record id (the caller's, or an `Idempotency-Key` with the record's index) is 1..128 characters.
MAX_RECORD_ID_LENGTH = 128

#: A caller (the authenticated principal the producer stamps: an IAM ARN, `apikey:<id>`, or a
#: library producer's configured name) is at most 512 visible ASCII characters.
MAX_CALLER_LENGTH = 512

#: `MaxRecordSizeInKiB` accepts 1024..10240 KiB.
MIN_MAX_RECORD_SIZE = 1 * MiB
MAX_MAX_RECORD_SIZE = 10 * MiB

#: Kinesis bills and meters PUTs in 25 KiB payload units (data + partition key, rounded up).
PUT_PAYLOAD_UNIT = 25 * KiB


@dataclass(frozen=True)  # no slots: a few instances, and slots=True builds the class twice (cold starts)
class Limits:
    """The limits one stream enforces.

    `max_record_size` counts the data blob plus the UTF-8 partition key, as the service does.
    `max_request_size` is the PutRecords request total (data + partition keys of every record).
    """

    max_record_size: int = 1 * MiB
    max_records_per_request: int = 500
    max_request_size: int = 5 * MiB
    shard_write_records_per_second: int = 1000
    shard_write_bytes_per_second: int = 1 * MiB

    def __post_init__(self) -> None:
        if not MIN_MAX_RECORD_SIZE <= self.max_record_size <= MAX_MAX_RECORD_SIZE:
            raise ConfigurationError(
                f"max_record_size must be within {MIN_MAX_RECORD_SIZE}..{MAX_MAX_RECORD_SIZE} bytes, "
                f"got {self.max_record_size}"
            )
        if not 1 <= self.max_records_per_request <= 500:
            raise ConfigurationError(
                f"max_records_per_request must be within 1..500, got {self.max_records_per_request}"
            )
        if not self.max_record_size <= self.max_request_size <= max(5 * MiB, self.max_record_size):
            raise ConfigurationError(
                "max_request_size must hold at least one record and stay within the service's request "
                f"limit, got {self.max_request_size}"
            )
        if self.shard_write_records_per_second <= 0 or self.shard_write_bytes_per_second <= 0:
            raise ConfigurationError("per-shard write rates must be positive")

    @classmethod
    def for_max_record_size(cls, max_record_size: int) -> Limits:
        """Limits for a stream whose `MaxRecordSizeInKiB` was raised; the request cap grows with it."""
        return cls(max_record_size=max_record_size, max_request_size=max(5 * MiB, max_record_size))


DEFAULT_LIMITS = Limits()


#: The envelope every Kinesis record the producer sends carries around its user records (a KPL
#: aggregate, even of one record): the magic and the MD5, the aggregate's id tag (key, producer id,
#: lane, counter and floor: at most 80 bytes), the 39-digit explicit hash key it is routed by, and
#: the protobuf framing of one record. An upper bound: the exact size is the codec's.
ENVELOPE_OVERHEAD = 4 + 16 + 80 + 39 + 40


def envelope_size(data_bytes: int, key_bytes: int, id_bytes: int = 0, caller_bytes: int = 0) -> int:
    """At most the bytes Kinesis counts for one user record sent alone in the producer's envelope:
    its data, its partition key twice (the aggregate's and the record's), its id, its caller's tag
    (`sl.c`: the caller and 12 bytes of framing at most) and the overhead."""
    return (
        data_bytes
        + 2 * key_bytes
        + (id_bytes + 8 if id_bytes else 0)
        + (caller_bytes + 12 if caller_bytes else 0)
        + ENVELOPE_OVERHEAD
    )


def put_payload_units(record_size: int) -> int:
    """The 25 KiB PUT payload units one Kinesis record of `record_size` bytes consumes."""
    return max(1, -(-record_size // PUT_PAYLOAD_UNIT))
