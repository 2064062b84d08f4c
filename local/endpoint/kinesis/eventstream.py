"""The AWS event-stream wire format, written: how SubscribeToShard's answer reaches its client.

An answer of `application/vnd.amazon.eventstream` is a sequence of messages, each:

- a 12-byte prelude: the message's total length and its headers' length (4 bytes each, big-endian),
  then the CRC32 of those 8 bytes;
- the headers: each its name's length (1 byte), the name (UTF-8), a type byte, then the value; the
  endpoint writes strings only (type 7: a 2-byte length, then UTF-8);
- the payload (here a JSON document);
- the CRC32 of everything before it.

`:message-type` says what a message is: an `event` (its `:event-type` names the member of the
operation's event-stream union: `initial-response` first, then `SubscribeToShardEvent`s) or an
`exception` (its `:exception-type` names a modeled error, which the client raises mid-stream).
botocore reads it with `botocore.eventstream` (the tests decode with it).
"""

from __future__ import annotations

import binascii
import json
import struct
from collections.abc import Mapping
from typing import Any

__all__ = ["CONTENT_TYPE", "event", "exception", "message"]

CONTENT_TYPE = "application/vnd.amazon.eventstream"
_STRING = 7
_PRELUDE = struct.Struct(">II")
_CRC = struct.Struct(">I")
#: The payloads' own type (each message says it; botocore reads the payload as JSON whatever it says).
_PAYLOAD_TYPE = "application/json"


def message(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One message: prelude, headers (strings), payload, CRCs."""
    encoded = b"".join(_header(name, value) for name, value in headers.items())
    prelude = _PRELUDE.pack(_PRELUDE.size + _CRC.size + len(encoded) + len(payload) + _CRC.size, len(encoded))
    front = prelude + _CRC.pack(binascii.crc32(prelude)) + encoded + payload
    return front + _CRC.pack(binascii.crc32(front))


def _header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    if len(raw_name) > 255 or len(raw_value) > 32767:
        raise ValueError(f"event-stream header {name!r} too long")
    return bytes([len(raw_name)]) + raw_name + struct.pack(">BH", _STRING, len(raw_value)) + raw_value


def event(event_type: str, body: Mapping[str, Any]) -> bytes:
    """An event of the operation's event stream (`initial-response`, `SubscribeToShardEvent`)."""
    headers = {":message-type": "event", ":event-type": event_type, ":content-type": _PAYLOAD_TYPE}
    return message(headers, json.dumps(body, separators=(",", ":")).encode())


def exception(exception_type: str, text: str) -> bytes:
    """A modeled error mid-stream (e.g. `ResourceInUseException`): the client raises it; the stream ends."""
    headers = {":message-type": "exception", ":exception-type": exception_type}
    headers[":content-type"] = _PAYLOAD_TYPE
    return message(headers, json.dumps({"message": text}).encode())
