"""`send` (`local.send`) against a stub producer API: retries, SigV4 signing, pacing, keys and payloads."""
# ruff: noqa: F811 -- pytest fixtures are imported from send_helpers and requested by parameter name

from __future__ import annotations

import time
from collections import Counter

import pytest

from local.send import parse_payload
from tests.local.send_helpers import (  # noqa: F401
    Received,
    StubApi,
    _expected_signature,
    _send,
    _SignedHeadersOnly,
    stub_api,
)

pytestmark = pytest.mark.integration


def test_send_retries_exactly_the_failed_entries_of_a_207_in_order(stub_api: StubApi) -> None:
    stub_api.script = [("207", [1, 3, 4])]
    report = _send(stub_api, 6, batch=6, concurrency=1)
    first, retry = stub_api.received
    sent = [r["data"] for r in first.records]
    assert [r["data"] for r in retry.records] == [sent[1], sent[3], sent[4]]
    assert len(report.accepted) == 6 and not report.failed
    assert report.retried_records == 3 and report.requests == 2


def test_send_retries_a_503_after_its_retry_after(stub_api: StubApi) -> None:
    stub_api.script = [("503", 1)]
    report = _send(stub_api, 5, batch=5, concurrency=1)
    first, retry = stub_api.received
    assert retry.body == first.body  # the same records, nothing was written the first time
    assert retry.at - first.at >= 0.9  # Retry-After: 1 was waited (less the clocks' granularity)
    assert len(report.accepted) == 5 and report.statuses[503] == 1


def test_send_retries_a_429(stub_api: StubApi) -> None:
    stub_api.script = ["429", "429"]
    report = _send(stub_api, 3, batch=3, concurrency=1)
    assert len(stub_api.received) == 3
    assert len({r.body for r in stub_api.received}) == 1
    assert len(report.accepted) == 3 and report.statuses[429] == 2 and report.retried_records == 6


def test_send_does_not_retry_a_refused_request(stub_api: StubApi) -> None:
    stub_api.script = ["400"]
    report = _send(stub_api, 4, batch=4, concurrency=1)
    assert len(stub_api.received) == 1
    assert sorted(report.failed) == [0, 1, 2, 3] and not report.accepted
    assert report.failed[0].startswith("HTTP 400")


def test_send_signs_each_request_with_sigv4(stub_api: StubApi) -> None:
    stub_api.script = [("207", [0])]
    _send(stub_api, 4, batch=2, concurrency=2)
    assert len(stub_api.received) == 3
    for received in stub_api.received:
        authorization = received.headers["authorization"]
        assert authorization.startswith("AWS4-HMAC-SHA256 Credential=test/")
        assert "/us-east-1/execute-api/aws4_request" in authorization
        assert authorization.endswith(f"Signature={_expected_signature(received)}")


def test_send_unsigned_sends_no_authorization(stub_api: StubApi) -> None:
    _send(stub_api, 2, sign=False)
    assert "authorization" not in stub_api.received[0].headers


def test_send_paces_to_the_rate(stub_api: StubApi) -> None:
    report = _send(stub_api, 300, batch=50, concurrency=4, rate=200)
    # The first request goes at once; the other 250 records take 250/200 s at most 200 records/s.
    assert len(report.accepted) == 300
    assert report.elapsed >= 1.2
    assert report.elapsed < 30  # generous: a 2-core shared machine
    # Each record's time is its first POST, after the pacing wait: the batches' times spread as they went.
    times = sorted({parse_payload(w.data)["t"] for w in stub_api.written})
    assert len(times) == 6 and times[-1] - times[0] >= 1.2


def test_send_uses_run_scoped_partition_keys(stub_api: StubApi) -> None:
    report = _send(stub_api, 30, keys=7, run_id="run-keys")
    keys = [(parse_payload(w.data)["seq"], w.key) for w in stub_api.written]
    assert {key for _, key in keys} == {f"run-keys-k{i}" for i in range(7)}
    assert all(key == f"run-keys-k{seq % 7}" for seq, key in keys)
    assert report.expected_counts() == Counter(f"run-keys-k{i % 7}" for i in range(30))


def test_send_payload_carries_run_id_sequence_and_post_time(stub_api: StubApi) -> None:
    before = time.time()
    report = _send(stub_api, 40, size=120, batch=10)
    after = time.time()
    fields = [parse_payload(w.data) for w in stub_api.written]
    assert all(len(w.data) == 120 for w in stub_api.written)
    assert sorted(f["seq"] for f in fields) == list(range(40))
    assert {f["run"] for f in fields} == {report.run_id}
    assert all(before <= f["t"] <= after for f in fields)
    assert all(report.accepted[f["seq"]].post_time == pytest.approx(f["t"], abs=1e-5) for f in fields)


def test_send_marks_every_nth_record_poison(stub_api: StubApi) -> None:
    report = _send(stub_api, 20, poison_every=5)
    poison = sorted(
        parse_payload(w.data)["seq"] for w in stub_api.written if parse_payload(w.data).get("poison")
    )
    assert poison == [4, 9, 14, 19]
    assert sorted(seq for seq, record in report.accepted.items() if record.poison) == poison


def test_send_records_where_each_record_was_written(stub_api: StubApi) -> None:
    report = _send(stub_api, 10, batch=3)
    by_seq = {parse_payload(w.data)["seq"]: w for w in stub_api.written}
    assert {seq: (r.shard_id, r.sequence_number) for seq, r in report.accepted.items()} == {
        seq: (w.shard_id, w.sequence_number) for seq, w in by_seq.items()
    }


# --- the verdict, against moto server -------------------------------------------------------------------
