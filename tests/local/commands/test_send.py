"""`send` (`local.commands.send`) against a stub producer API: ids and keys, re-posts, retries, SigV4 signing,
pacing, keys and payloads."""

from __future__ import annotations

import time
from collections import Counter

import pytest

import local.commands.send
from local.commands.send import MAX_ATTEMPTS, SendReport, entry_outcome, parse_payload, record_id
from tests.support.send import StubApi, _expected_signature, _send

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
    assert retry.headers["idempotency-key"] == first.headers["idempotency-key"]
    assert retry.at - first.at >= 0.9  # Retry-After: 1 was waited (less the clocks' granularity)
    assert len(report.accepted) == 5 and report.statuses[503] == 1


# --- identity: ids, keys and re-posts ---------------------------------------------------------------


def test_every_record_carries_its_id_and_every_request_an_idempotency_key(stub_api: StubApi) -> None:
    report = _send(stub_api, 12, batch=5, concurrency=1, run_id="run-ids")
    assert len(stub_api.received) == 3
    ids = [record["id"] for received in stub_api.received for record in received.records]
    assert ids == [f"run-ids-{seq}" for seq in range(12)] == [record_id("run-ids", seq) for seq in range(12)]
    keys = [received.headers["idempotency-key"] for received in stub_api.received]
    assert len(set(keys)) == 3 and all(key.startswith("run-ids-b") for key in keys)
    assert {seq: r.id for seq, r in report.accepted.items()} == {seq: f"run-ids-{seq}" for seq in range(12)}


def test_without_ids_records_carry_no_id_and_requests_no_key(stub_api: StubApi) -> None:
    report = _send(stub_api, 6, batch=6, ids=False)
    [received] = stub_api.received
    assert all("id" not in record for record in received.records)
    assert "idempotency-key" not in received.headers
    assert len(report.accepted) == 6 and report.as_dict()["ids"] is False


@pytest.mark.parametrize("failure", ["500", "502", "504", "drop", "drop-before", ("503", 0)])
def test_2_a_request_that_failed_as_a_whole_is_posted_again_as_it_was(stub_api: StubApi, failure) -> None:
    stub_api.script = [failure]
    report = _send(stub_api, 8, batch=8, concurrency=1)
    first, again = stub_api.received
    assert again.body == first.body  # the same records, in the same order, with the same ids
    assert again.headers["idempotency-key"] == first.headers["idempotency-key"]
    assert len(report.accepted) == 8 and not report.failed
    assert sorted(report.reposted) == list(range(8)) and sum(report.whole_failures.values()) == 1
    assert all(report.accepted[seq].posts == 2 for seq in range(8))
    if failure == "drop":  # written, the reply lost: the stream took every record twice
        assert len(stub_api.written) == 16 and len({w.id for w in stub_api.written}) == 8


@pytest.mark.parametrize("kind", ["207?", "207m"])
def test_entries_that_may_have_been_written_are_posted_again_and_marked_reposted(
    stub_api: StubApi, kind
) -> None:
    stub_api.script = [(kind, [1, 3])]
    report = _send(stub_api, 5, batch=5, concurrency=1)
    first, again = stub_api.received
    assert [r["id"] for r in again.records] == [first.records[1]["id"], first.records[3]["id"]]
    assert again.headers["idempotency-key"] != first.headers["idempotency-key"]  # other records
    assert len(report.accepted) == 5 and sorted(report.reposted) == [1, 3]
    assert sum(report.unconfirmed_entries.values()) == 2


def test_entries_answered_not_written_are_retried_but_not_reposted(stub_api: StubApi) -> None:
    stub_api.script = [("207w", [0, 2])]
    report = _send(stub_api, 4, batch=4, concurrency=1)
    assert len(stub_api.received) == 2 and len(report.accepted) == 4
    assert not report.reposted and report.throttled_entries == 2


def test_an_entry_echoing_another_id_is_not_taken_as_the_records_answer(stub_api: StubApi) -> None:
    stub_api.script = [("echo", [2])]
    report = _send(stub_api, 4, batch=4, concurrency=1)
    assert report.echo_mismatches == 1 and sorted(report.reposted) == [2]
    assert [r["id"] for r in stub_api.received[1].records] == [stub_api.received[0].records[2]["id"]]
    assert len(report.accepted) == 4


def test_posts_are_bounded_and_a_record_never_accepted_is_refused_or_unconfirmed_saying_why(
    stub_api: StubApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local.commands.send, "MAX_ATTEMPTS", 3)
    stub_api.script = ["500", "500", "500", "429", "429", "429"]
    report = _send(stub_api, 6, batch=3, concurrency=1)
    assert len(stub_api.received) == 6 and not report.accepted
    # a 500 may have written the batch: unconfirmed (post it again as it was); a 429 wrote nothing
    assert sorted(report.unconfirmed) == [0, 1, 2] and sorted(report.failed) == [3, 4, 5]
    assert report.unconfirmed[0] == "HTTP 500 (after 3 posts); an earlier post may have been written"
    assert report.failed[3] == "HTTP 429 (after 3 posts)"
    assert MAX_ATTEMPTS == 20


def test_lost_replies_are_re_posted_until_accepted(stub_api: StubApi) -> None:
    report = _send(stub_api, 200, batch=10, concurrency=2, lose_replies=0.3, seed=3)
    assert len(report.accepted) == 200 and not report.failed
    assert report.replies_lost >= 3 and report.statuses[0] == report.replies_lost
    assert sum(report.reposted.values()) == 10 * report.replies_lost  # every lost batch, posted again whole
    copies = Counter(w.id for w in stub_api.written)
    assert sum(n - 1 for n in copies.values()) == sum(report.reposted.values())  # each lost post had landed


@pytest.mark.parametrize(
    ("entry", "outcome"),
    [
        ({"shardId": "shardId-000000000000", "sequenceNumber": "1", "id": "a"}, "accepted"),
        ({"shardId": "shardId-000000000000", "sequenceNumber": "1"}, "accepted"),
        ({"shardId": "shardId-000000000000", "sequenceNumber": "1", "id": "b"}, "maybe"),
        ({"shardId": "shardId-000000000000"}, "maybe"),
        ({"errorCode": "ProvisionedThroughputExceededException"}, "not_written"),
        ({"errorCode": "InternalFailure", "written": False}, "not_written"),
        ({"errorCode": "InternalFailure", "written": None}, "maybe"),
        ({"errorCode": "OutcomeUnknown"}, "maybe"),
        ({"errorCode": "MalformedResponse"}, "maybe"),
        ({"errorCode": "RecordCountMismatch", "written": False}, "not_written"),
        ("nonsense", "maybe"),
    ],
)
def test_each_entry_is_accepted_not_written_or_maybe_written(entry, outcome) -> None:
    assert entry_outcome(entry, "a") == outcome


def test_every_record_ends_accepted_refused_or_unconfirmed(stub_api: StubApi) -> None:
    stub_api.script = ["drop", ("207?", [0]), "200", "400", "drop", "400"]
    report = _send(stub_api, 12, batch=4, concurrency=1)
    assert not hasattr(report, "unknown") and "unknown" not in SendReport.__dataclass_fields__
    assert not any("unknown" in key for key in report.as_dict())
    # a lost reply and an unknown entry, re-posted as they were until accepted; a 400 refused;
    # a 400 after a lost reply: the lost post may have landed, so unconfirmed, not refused
    assert sorted(report.accepted) == [0, 1, 2, 3] and sorted(report.failed) == [4, 5, 6, 7]
    assert sorted(report.unconfirmed) == [8, 9, 10, 11]
    why = report.unconfirmed[8]
    assert why.startswith("HTTP 400") and why.endswith("may have been written")


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
