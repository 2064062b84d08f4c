"""The KPL aggregated-record codec: many user records in one Kinesis record, byte for byte as the
Kinesis Producer Library writes them and the KCL reads them.

    from shardline.kpl import encode, decode, is_aggregated, AggregateBuilder

    payload = encode([UserRecord("user-1", b"a"), UserRecord("user-2", b"b")])
    assert is_aggregated(payload) and decode(payload)[1].data == b"b"

`AggregateBuilder` tracks the exact encoded size as records are added, so a reducer fills an
aggregate to a byte cap without going over. Bad input raises `AggregationError`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardline._lazy import lazy_exports

if TYPE_CHECKING:
    from shardline.kpl._codec import DIGEST_SIZE as DIGEST_SIZE
    from shardline.kpl._codec import FRAMING_SIZE as FRAMING_SIZE
    from shardline.kpl._codec import MAGIC as MAGIC
    from shardline.kpl._codec import AggregateBuilder as AggregateBuilder
    from shardline.kpl._codec import AggregationError as AggregationError
    from shardline.kpl._codec import decode as decode
    from shardline.kpl._codec import encode as encode
    from shardline.kpl._codec import is_aggregated as is_aggregated

_EXPORTS = {
    "AggregateBuilder": "_codec",
    "AggregationError": "_codec",
    "DIGEST_SIZE": "_codec",
    "FRAMING_SIZE": "_codec",
    "MAGIC": "_codec",
    "decode": "_codec",
    "encode": "_codec",
    "is_aggregated": "_codec",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
