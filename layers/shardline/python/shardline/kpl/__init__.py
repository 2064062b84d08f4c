"""The KPL aggregated-record codec: many user records in one Kinesis record, byte for byte as the
Kinesis Producer Library writes them and the KCL reads them.

    from shardline.kpl import encode, decode, is_aggregated, AggregateBuilder

    payload = encode([UserRecord("user-1", b"a"), UserRecord("user-2", b"b")])
    assert is_aggregated(payload) and decode(payload)[1].data == b"b"

`AggregateBuilder` tracks the exact encoded size as records are added, so a reducer fills an
aggregate to a byte cap without going over. Bad input raises `AggregationError`.

`_encode` draws the wire format and builds aggregates; `_decode` reads them. A producer imports
only the first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardline._lazy import lazy_exports

if TYPE_CHECKING:
    from shardline.errors import AggregationError as AggregationError
    from shardline.kpl._decode import decode as decode
    from shardline.kpl._decode import is_aggregated as is_aggregated
    from shardline.kpl._encode import DIGEST_SIZE as DIGEST_SIZE
    from shardline.kpl._encode import FRAMING_SIZE as FRAMING_SIZE
    from shardline.kpl._encode import MAGIC as MAGIC
    from shardline.kpl._encode import AggregateBuilder as AggregateBuilder
    from shardline.kpl._encode import encode as encode

_EXPORTS = {
    "AggregateBuilder": "_encode",
    "encode": "_encode",
    "MAGIC": "_encode",
    "DIGEST_SIZE": "_encode",
    "FRAMING_SIZE": "_encode",
    "decode": "_decode",
    "is_aggregated": "_decode",
    "AggregationError": "shardline.errors",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
