"""The event-stream encoder of the local endpoint's SubscribeToShard (`local.endpoint.kinesis.eventstream`):
byte for byte against the event-stream test vectors AWS ships with botocore, and read back by
botocore's own parser with Kinesis's service model, as `kinesis.subscribe_to_shard` reads it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from botocore.eventstream import EventStream
from botocore.exceptions import EventStreamError
from botocore.parsers import EventStreamJSONParser
from botocore.session import get_session

from local.endpoint.kinesis import eventstream

#: (headers, payload, the message's bytes): the event-stream test vectors of botocore's
#: tests/unit/test_eventstream.py at 04d1fae4 (EMPTY_MESSAGE, PAYLOAD_NO_HEADERS, PAYLOAD_ONE_STR_HEADER,
#: ERROR_EVENT_MESSAGE; AWS's, Apache-2.0), those with string headers only, as the endpoint writes.
VECTORS = [
    ({}, b"", b"\x00\x00\x00\x10\x00\x00\x00\x00\x05\xc2H\xeb}\x98\xc8\xff"),
    ({}, b"{'foo':'bar'}", b"\x00\x00\x00\x1d\x00\x00\x00\x00\xfdR\x8cZ{'foo':'bar'}\xc3e96"),
    (
        {"content-type": "application/json"},
        b"{'foo':'bar'}",
        b"\x00\x00\x00=\x00\x00\x00 \x07\xfd\x83\x96\x0ccontent-type\x07\x00\x10application/json"
        b"{'foo':'bar'}\x8d\x9c\x08\xb1",
    ),
    (
        {":message-type": "error", ":error-code": "code", ":error-message": "message"},
        b"",
        b"\x00\x00\x00\x52\x00\x00\x00\x42\xbf\x23\x63\x7e\x0d:message-type\x07\x00\x05error"
        b"\x0b:error-code\x07\x00\x04code\x0e:error-message\x07\x00\x07message\x6b\x6c\xea\x3d",
    ),
]


@pytest.mark.parametrize(("headers", "payload", "encoded"), VECTORS)
def test_the_encoder_writes_the_event_stream_test_vectors_byte_for_byte(headers, payload, encoded):
    assert eventstream.message(headers, payload) == encoded


class _Chunks:
    """A raw body that hands botocore the bytes in small pieces, as a socket may."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def stream(self) -> Iterator[bytes]:
        for start in range(0, len(self.data), 7):
            yield self.data[start : start + 7]


def test_botocores_parser_reads_the_encoders_initial_response_events_and_exceptions():
    operation = get_session().get_service_model("kinesis").operation_model("SubscribeToShard")
    record = {
        "SequenceNumber": "2",
        "ApproximateArrivalTimestamp": 1545084650.987,
        "Data": "aGk=",
        "PartitionKey": "k",
    }
    body = (
        eventstream.event("initial-response", {})
        + eventstream.event(
            "SubscribeToShardEvent",
            {"Records": [record], "ContinuationSequenceNumber": "3", "MillisBehindLatest": 0},
        )
        + eventstream.exception("ResourceInUseException", "taken over")
    )
    shape = operation.output_shape.members["EventStream"]
    stream = EventStream(_Chunks(body), shape, EventStreamJSONParser(), "SubscribeToShard")
    assert stream.get_initial_response().payload == b"{}"
    events = iter(stream)
    event = next(events)["SubscribeToShardEvent"]
    assert event["Records"][0]["Data"] == b"hi" and event["ContinuationSequenceNumber"] == "3"
    assert event["Records"][0]["ApproximateArrivalTimestamp"].timestamp() == 1545084650.987
    with pytest.raises(EventStreamError) as raised:
        next(events)
    assert raised.value.response["Error"] == {"Code": "ResourceInUseException", "Message": "taken over"}
