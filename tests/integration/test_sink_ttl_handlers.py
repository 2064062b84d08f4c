"""Issue 25, item 5: the example sinks' items expire. Through the real handlers (functions/event_sink,
functions/key_counter) configured from their environment as in Lambda, against moto server: with
SINK_TTL_DAYS each item carries `expiresAt` = its record's arrival + the TTL (≈ now + the TTL for
records just sent); the counter refreshes it with every count."""

from __future__ import annotations

import time

from tests.support.consumer_handlers import drain

DAY = 24 * 3600


def test_5_an_event_sink_item_expires_its_ttl_after_its_record_arrived(stream):
    sink_fn, _, sink = stream.group("event_sink", key="pk")
    sink_fn.env["SINK_TTL_DAYS"] = "30"
    before = time.time()

    drain(sink_fn, stream.feeds())

    items = stream.scan(sink)
    assert len(items) == len(stream.sent)
    for item in items:
        expires_at = int(item["expiresAt"]["N"])
        assert expires_at == int(float(item["approximateArrival"]["N"])) + 30 * DAY
        assert abs(expires_at - (before + 30 * DAY)) < 600, "≈ now + the TTL for a record just sent"


def test_5_without_a_ttl_an_event_sink_item_is_kept(stream):
    sink_fn, _, sink = stream.group("event_sink", key="pk")

    drain(sink_fn, stream.feeds())

    items = stream.scan(sink)
    assert items and not any("expiresAt" in item for item in items)


def test_5_a_counter_expires_its_ttl_after_its_key_was_last_counted(stream):
    counter_fn, _, counts = stream.group("key_counter", key="partitionKey")
    counter_fn.env["SINK_TTL_DAYS"] = "2"
    before = time.time()

    drain(counter_fn, stream.feeds())

    assert stream.counts(counts) == stream.expected_counts(), "the counts stay exact"
    for item in stream.scan(counts):
        expires_at = int(item["expiresAt"]["N"])
        assert abs(expires_at - (before + 2 * DAY)) < 600, item["partitionKey"]["S"]
