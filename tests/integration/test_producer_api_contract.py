"""Issue 39, property 9: after every answer of the producer API the client knows what to do with each
record, and doing exactly what the README's table says applies every record once.

Each test posts through the local API Gateway on loopback (SigV4-signed) to the real producer
function, with a faulty Kinesis client under it for the first answer only (lost replies, throttling,
an unavailable stream, a refused role), then does what `README.md` ("The HTTP contract") tells a
client to do with that answer — `follow_the_readme` below is that table, row by row — and finally
runs both example consumer groups over the stream and counts what the key counter applied, per
record (every record has a partition key of its own).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from typing import Any

import pytest

from local.chaos.faults import FaultyKinesis
from tests.support.integration import kinesis_client, read_stream
from tests.support.producer_api import LoopbackApi, Sinks, loopback_api

pytestmark = pytest.mark.integration

#: README: the answers after which nothing was written and posting the same request cannot help.
FIX_IT = (400, 404, 413, 415, 422)
#: README, `retry` of a failed entry: what a client resends (never "resend-may-duplicate").
RESENT = ("resend", "resend-same-id")


@pytest.fixture
def api(moto_server: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[LoopbackApi]:
    yield from loopback_api(moto_server, monkeypatch)


def follow_the_readme(
    api: LoopbackApi, records: list[dict[str, Any]], key: str | None, answer: tuple[int, dict, dict]
) -> list[int]:
    """Do what the README's table says after `answer` until it says "nothing"; the statuses seen."""
    status, headers, body = answer
    seen = [status]
    for _ in range(10):
        if status == 200 or status in FIX_IT:
            return seen
        if status == 503:  # nothing written: after Retry-After, post the request again as it was
            time.sleep(int(headers["retry-after"]))
        elif status == 500:  # nothing written: a deployment fault; post again once fixed (it is)
            assert "records" in body, body
        elif status == 207:
            assert len(body["records"]) == len(records)
            if key is None:  # resend exactly the entries marked resend / resend-same-id, as they were
                records = [
                    record
                    for record, entry in zip(records, body["records"], strict=True)
                    if entry.get("retry") in RESENT
                ]
                if not records:
                    return seen
            # with an Idempotency-Key every record has an id: post the request again as it was
        else:
            raise AssertionError(f"the README says nothing about {status}: {body}")
        status, headers, body = api.post(records, key)
        seen.append(status)
    raise AssertionError(f"still told to post after {seen}")


def records_of(name: str, with_ids: int, without: int) -> list[dict[str, Any]]:
    """Records with a partition key each (so the key counter counts applications per record)."""
    return [
        {"json": {"n": i}, "partitionKey": f"{name}-{i}"} | ({"id": f"{name}-id-{i}"} if i < with_ids else {})
        for i in range(with_ids + without)
    ]


def first_answer(
    api: LoopbackApi, faulty: FaultyKinesis, records: list[dict[str, Any]], key: str | None
) -> Any:
    api.use(faulty)
    try:
        return api.post(records, key)
    finally:
        api.use(None)  # the fault is over (or, for a 500, the deployment fixed)


def faulty_client(api: LoopbackApi) -> FaultyKinesis:
    return FaultyKinesis(kinesis_client(api.kinesis.meta.endpoint_url), rng=random.Random(9))


def test_property_9_every_answer_followed_as_the_readme_says_applies_each_record_once(api):
    """Lost replies, throttling, unavailability, a refused role, a lost reply then a refused role —
    each with and without an Idempotency-Key: every record is applied exactly once after the client
    did what the README says, and an answer says "nothing written" only when nothing was."""
    scenarios: dict[str, Any] = {}

    def lost_replies(faulty: FaultyKinesis) -> None:
        faulty.lose_replies(10_000, landed=True)

    def throttled(faulty: FaultyKinesis) -> None:
        faulty.throttle_fraction = 1.0

    def half_throttled(faulty: FaultyKinesis) -> None:
        faulty.throttle_fraction = 0.5

    def unavailable(faulty: FaultyKinesis) -> None:
        faulty.fail_requests("ServiceUnavailable", 10_000)

    def refused(faulty: FaultyKinesis) -> None:
        faulty.fail_requests("AccessDeniedException", 10_000)

    def lost_before_landing(faulty: FaultyKinesis) -> None:  # records with ids only (below)
        faulty.lose_replies(10_000, landed=False)

    def lost_then_refused(faulty: FaultyKinesis) -> None:
        faulty.lose_replies(1, landed=True)
        faulty.fail_requests("AccessDeniedException", 10_000)

    def none(faulty: FaultyKinesis) -> None:
        pass

    faults = (
        none, lost_replies, lost_before_landing, throttled, half_throttled, unavailable, refused,
        lost_then_refused,
    )  # fmt: skip
    for fault in faults:
        for key in (None, f"key-{fault.__name__}"):
            name = f"{fault.__name__}-{'k' if key else 'n'}"
            # A record without an id whose request never landed, yet went unanswered, is the one
            # the README cannot save: `resend-may-duplicate`, not resent (give records ids).
            records = records_of(name, with_ids=3, without=0 if fault is lost_before_landing else 3)
            faulty = faulty_client(api)
            fault(faulty)
            answer = first_answer(api, faulty, records, key)
            status = answer[0]
            if status in (503, 500, 404):
                before = stream_keys(api)
                assert not any(key.startswith(f"{name}-") for key in before), (name, "said nothing written")
            scenarios[name] = (records, follow_the_readme(api, records, key, answer))

    counts = Sinks(api.kinesis, api.stream).counts()
    wrong = {
        name: ({r["partitionKey"]: counts.get(r["partitionKey"], 0) for r in records}, statuses)
        for name, (records, statuses) in scenarios.items()
        if any(counts.get(r["partitionKey"], 0) != 1 for r in records)
    }
    assert not wrong, f"records not applied exactly once (applications per record, answers): {wrong}"
    firsts = {name: statuses[0] for name, (_, statuses) in scenarios.items()}
    assert firsts["throttled-n"] == firsts["unavailable-n"] == 503, firsts
    assert firsts["refused-n"] == 500, firsts
    assert firsts["lost_replies-n"] == firsts["lost_then_refused-n"] == 207, firsts


def stream_keys(api: LoopbackApi) -> set[str]:
    """The partition keys of every user record in the stream."""
    stream = read_stream(api.kinesis, api.stream)
    return {user.partition_key for entries in stream.values() for *_, user in entries}


def test_property_9_an_unconfirmed_record_without_an_id_is_flagged_and_never_reposted(api):
    """Every reply lost after the write: the answer is not "nothing written" — each entry says
    `written: "unconfirmed"`, with an id `resend-same-id`, without one `resend-may-duplicate`
    (which the README says not to resend blindly); the client's one action resends the ids."""
    records = records_of("lost", with_ids=2, without=2)
    faulty = faulty_client(api)
    faulty.lose_replies(10_000, landed=True)
    status, headers, body = first_answer(api, faulty, records, None)
    assert status == 207, body
    assert "retry-after" not in headers
    assert [(e.get("written"), e.get("retry")) for e in body["records"]] == [
        ("unconfirmed", "resend-same-id")
    ] * 2 + [("unconfirmed", "resend-may-duplicate")] * 2
    assert follow_the_readme(api, records, None, (status, headers, body)) == [207, 200]
    counts = Sinks(api.kinesis, api.stream).counts()
    assert [counts.get(r["partitionKey"], 0) for r in records] == [1, 1, 1, 1]


def test_property_9_an_answer_that_says_fix_it_wrote_nothing(api, monkeypatch):
    """400, 404, 413 and 415 (and 422: tests/integration/test_producer_api_reused_ids.py): nothing of
    the request is in the stream, so fixing it and posting the fixed request applies each record
    once."""
    monkeypatch.setenv("MAX_RECORDS_PER_REQUEST", "3")
    good = records_of("fixed", with_ids=1, without=1)
    bad = [{"partitionKey": "fixed-bad", "data": "%%%"}, *good]
    answers = {
        400: api.post(bad),
        404: api.post(good, route="no-such-route"),
        413: api.post(good * 2),
        415: api.post(good, content_type="text/plain"),
    }
    assert {status: answer[0] for status, answer in answers.items()} == {
        400: 400,
        404: 404,
        413: 413,
        415: 415,
    }
    assert not {key for key in stream_keys(api) if key.startswith("fixed")}, "a refused request wrote"
    assert follow_the_readme(api, good, None, api.post(good)) == [200]
    counts = Sinks(api.kinesis, api.stream).counts()
    assert [counts.get(r["partitionKey"], 0) for r in good] == [1, 1]
