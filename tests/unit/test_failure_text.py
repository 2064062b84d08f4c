"""Issue 25, item 5: what shardline writes about a handler's exception is a bounded field
(`shardline.consumer._failure_text`) — its type and a fingerprint, the message only when the group
opts in, cut to 256 characters. Here the function itself, and the consumer on shardline.testing's
in-memory lease table and SQS (the real lease table, SQS and S3 over moto are in
tests/integration/test_failure_text.py)."""

from __future__ import annotations

import logging

import pytest

from shardline.consumer import ConsumedRecord, DeadLetterQueue, KinesisConsumer
from shardline.consumer._failure_text import MAX_MESSAGE_CHARS, FailureText, failure_text
from shardline.errors import ConfigurationError, SinkConflict
from shardline.testing import InMemoryLeaseTable, MappingReplay, kinesis_event
from tests.support.consumer import SHARD, RecordingSQS, record_id, records

SECRET = "zq7XkP-4111-secret-vW9j"


def pieces(text: str, size: int = 6) -> list[str]:
    """Every `size`-character window of `text`: none of them may leak."""
    return [text[at : at + size] for at in range(len(text) - size + 1)]


def leaks(written: str) -> list[str]:
    return [piece for piece in pieces(SECRET) if piece in written]


def test_5_by_default_the_text_is_the_type_and_a_fingerprint_never_the_message() -> None:
    text = failure_text(KeyError(f"card {SECRET}"))

    assert text.error_type == "KeyError" and text.message is None
    assert len(text.fingerprint) == 12 and int(text.fingerprint, 16) >= 0
    assert text.text == f"KeyError [{text.fingerprint}]" and not leaks(text.text)
    assert text.fields() == {"errorType": "KeyError", "errorFingerprint": text.fingerprint}
    # The same failure has the same fingerprint; another message (or type) another one.
    assert failure_text(KeyError(f"card {SECRET}")).fingerprint == text.fingerprint
    assert failure_text(KeyError("card 5500")).fingerprint != text.fingerprint
    assert failure_text(LookupError(f"card {SECRET}")).fingerprint != text.fingerprint
    # A class of one's own is named with its module; the text reads back whole.
    assert failure_text(SinkConflict("x", [0])).error_type == "shardline.errors.SinkConflict"
    assert FailureText.parse(text.text) == text and FailureText.parse("the function died") is None


def test_5_opted_in_the_message_is_cut_to_the_bound_on_one_line() -> None:
    text = failure_text(ValueError(SECRET + "\n" + "x" * 10_000), "message")

    assert text.message is not None and len(text.message) == MAX_MESSAGE_CHARS == 256
    assert text.message.startswith(SECRET + " x") and text.message.endswith("…")
    assert "\n" not in text.text and FailureText.parse(text.text) == text
    assert text.fields()["errorMessage"] == text.message
    short = failure_text(ValueError("bad order"), "message")
    assert short.text == f"ValueError [{short.fingerprint}]: bad order"
    with pytest.raises(ValueError, match="traceback"):
        failure_text(ValueError(), "traceback")
    with pytest.raises(ConfigurationError, match="failure_detail"):
        KinesisConsumer("g", InMemoryLeaseTable(), failure_detail="everything")  # type: ignore[arg-type]


def _consumer(detail: str) -> tuple[KinesisConsumer, InMemoryLeaseTable, RecordingSQS]:
    table, sqs = InMemoryLeaseTable(), RecordingSQS()
    consumer = KinesisConsumer(
        "g", table, dlq=DeadLetterQueue(sqs, "https://sqs/dlq"), max_attempts=2, failure_detail=detail
    )

    @consumer.handler
    def handle(record: ConsumedRecord) -> None:
        if record_id(record) == "r1":
            raise KeyError(f"card {SECRET} " + "y" * 5_000)

    return consumer, table, sqs


def test_5_a_secret_in_a_handler_exception_reaches_no_lease_row_letter_or_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    consumer, table, sqs = _consumer("fingerprint")
    replay = MappingReplay(kinesis_event(records(3))["Records"], 10)
    expected = failure_text(KeyError(f"card {SECRET} " + "y" * 5_000))

    with caplog.at_level(logging.DEBUG, logger="shardline"):
        replay.invoke(consumer.process)
        row = table.row(SHARD)
        assert row is not None and row.last_error == expected.text and row.failed_attempts == 1
        replay.drain(consumer.process)

    [letter] = sqs.bodies()
    assert (letter["error"], letter["errorType"], letter["errorFingerprint"]) == (
        expected.text,
        "KeyError",
        expected.fingerprint,
    )
    assert "errorMessage" not in letter and not leaks(str(letter))
    assert not leaks(caplog.text) and expected.text in caplog.text


def test_5_opted_in_the_lease_row_letter_and_log_hold_at_most_the_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    consumer, table, sqs = _consumer("message")
    replay = MappingReplay(kinesis_event(records(3))["Records"], 10)

    with caplog.at_level(logging.DEBUG, logger="shardline"):
        replay.invoke(consumer.process)
        row = table.row(SHARD)
        assert row is not None and row.last_error is not None
        replay.drain(consumer.process)

    noted = FailureText.parse(row.last_error)
    assert noted is not None and noted.message is not None and len(noted.message) == MAX_MESSAGE_CHARS
    assert noted.message.startswith(f"'card {SECRET} yyy")
    [letter] = sqs.bodies()
    assert letter["errorMessage"] == noted.message and letter["error"] == row.last_error
    assert "y" * MAX_MESSAGE_CHARS not in str(letter) + caplog.text, "more than the bound was written"
