"""Issue 40, security review: a per-caller rate limit in IAM mode (each caller's share, not only the
stage's).

Through the local API Gateway on loopback (SigV4-signed by two IAM users, as `local.apigw` puts the
signing principal in `requestContext.identity.userArn`) to the real producer function, its
idempotency table and the stream on moto server: a caller over `PER_CALLER_RATE` in a window gets
429 with `Retry-After` and API Gateway's throttle body, nothing of that request reaches the stream
(read back), while another caller is served in the same window; the window is the function's
injected clock's (no sleeping); a request retried after its 429 lands once.
"""

from __future__ import annotations

import base64
import json
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from shardline.aws_lambda._http_rate import RATE_KEY_PREFIX, rate_key
from tests.support.integration import read_stream
from tests.support.producer_api import FakeContext, LoopbackApi, loopback_api
from tests.support.producer_handler import rest_event

pytestmark = pytest.mark.integration

ALICE = ("alice", "alice-secret")
BOB = ("bob", "bob-secret")
#: The injected clock's start: a quarter into a window, so the window's end is 0.75 s away.
START = 1_800_000_000.25


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock(START)


@pytest.fixture
def api(moto_server: str, monkeypatch: pytest.MonkeyPatch, clock: Clock) -> Iterator[LoopbackApi]:
    """The loopback API knowing Alice and Bob, each caller's share 2 requests a second."""
    for loopback in loopback_api(moto_server, monkeypatch, credentials=dict([ALICE, BOB])):
        monkeypatch.setenv("PER_CALLER_RATE", "2")
        loopback.function.rate_clock = clock
        try:
            yield loopback
        finally:
            loopback.function.rate_clock = time.time


def record(data: bytes, key: str, record_id: str | None = None) -> dict[str, Any]:
    return {"data": base64.b64encode(data).decode(), "partitionKey": key} | (
        {"id": record_id} if record_id else {}
    )


def in_stream(api: LoopbackApi) -> Counter[bytes]:
    """Copies in the stream of each payload."""
    return Counter(
        user.data for entries in read_stream(api.kinesis, api.stream).values() for *_, user in entries
    )


def emf_metric(printed: str, name: str) -> float:
    """The sum of `name` over the EMF blobs the function printed."""
    total = 0.0
    for line in printed.splitlines():
        if '"_aws"' in line and name in line:
            value = json.loads(line)[name]
            total += sum(value) if isinstance(value, list) else value
    return total


def test_per_caller_rate_limit_in_iam_mode_a_caller_over_its_share_gets_429_and_the_other_is_served(
    api, capsys
):
    capsys.readouterr()
    for n in range(2):
        status, _, body = api.post([record(f"alice-{n}".encode(), "pk-a")], sign=ALICE)
        assert status == 200, body

    status, headers, body = api.post(
        [record(b"alice-over", "pk-a"), record(b"alice-over-2", "pk-b")], sign=ALICE
    )

    assert status == 429, body
    assert body == {"message": "Too Many Requests"}  # API Gateway's own throttle body
    assert headers["retry-after"] == "1"
    assert headers["x-amzn-errortype"] == "TooManyRequestsException"
    # Bob's share is his own: served in the very window Alice is refused in.
    for n in range(2):
        status, _, body = api.post([record(f"bob-{n}".encode(), "pk-b")], sign=BOB)
        assert status == 200, body
    assert api.post([record(b"bob-over", "pk-b")], sign=BOB)[0] == 429
    landed = in_stream(api)
    assert landed == Counter({b"alice-0": 1, b"alice-1": 1, b"bob-0": 1, b"bob-1": 1}), landed
    assert emf_metric(capsys.readouterr().out, "PerCallerThrottled") == 2
    counters = sorted(
        item["scopedId"]["S"] for item in api.id_items() if item["scopedId"]["S"].startswith(RATE_KEY_PREFIX)
    )
    window = int(START)
    assert counters == [
        f"{RATE_KEY_PREFIX}arn:aws:iam::000000000000:user/alice/{window}",
        f"{RATE_KEY_PREFIX}arn:aws:iam::000000000000:user/bob/{window}",
    ]
    assert all(
        item["requests"]["N"] == "2" and int(item["expiresAt"]["N"]) > window + 1
        for item in api.id_items()
        if item["scopedId"]["S"].startswith(RATE_KEY_PREFIX)
    ), "a refused request is not counted; each window's item expires"


def test_per_caller_rate_limit_in_iam_mode_the_window_resets_with_the_clock(api, clock):
    assert [api.post([record(b"a", "pk")], sign=ALICE)[0] for _ in range(3)] == [200, 200, 429]
    clock.now += 0.5  # still the same window
    assert api.post([record(b"a", "pk")], sign=ALICE)[0] == 429
    clock.now += 0.25  # the next second: a new window
    assert [api.post([record(b"b", "pk")], sign=ALICE)[0] for _ in range(3)] == [200, 200, 429]
    assert in_stream(api) == Counter({b"a": 2, b"b": 2})


def test_per_caller_rate_limit_in_iam_mode_a_request_retried_after_429_is_accepted_once(api, clock):
    assert [api.post([record(b"warm", "pk")], sign=ALICE)[0] for _ in range(2)] == [200, 200]
    batch = [record(b"order-1", "pk-1"), record(b"order-2", "pk-2", "order-2"), record(b"order-3", "pk-3")]

    status, headers, _ = api.post(batch, "req-42", sign=ALICE)
    assert status == 429
    clock.now += int(headers["retry-after"])  # as a client honouring Retry-After does
    status, _, body = api.post(batch, "req-42", sign=ALICE)
    assert status == 200, body
    assert [entry["id"] for entry in body["records"]] == ["req-42:0", "order-2", "req-42:2"]
    # Nothing of the refused attempt reached the stream: the retry's copy is the only one.
    assert in_stream(api) == Counter({b"warm": 2, b"order-1": 1, b"order-2": 1, b"order-3": 1})


def test_per_caller_rate_limit_in_iam_mode_sessions_of_one_role_share_its_share(api):
    """An assumed role's sessions are one caller: a session name is the caller's to choose, so keyed
    by session a caller would draw a fresh share with every AssumeRole. Another role is another caller."""

    def post(user_arn: str) -> int:
        event = rest_event(json.dumps({"records": [record(b"r", "pk")]}), stream="events")
        event["requestContext"]["identity"]["userArn"] = user_arn
        return api.function.handler(event, FakeContext(api.remaining_ms))["statusCode"]

    role = "arn:aws:sts::123456789012:assumed-role/ingest/"
    assert [post(role + session) for session in ("s1", "s2", "s3")] == [200, 200, 429]
    assert post("arn:aws:sts::123456789012:assumed-role/other/s1") == 200
    assert rate_key(role + "i-0abc") == "arn:aws:sts::123456789012:assumed-role/ingest"
    assert rate_key("arn:aws:iam::123456789012:user/tester") == "arn:aws:iam::123456789012:user/tester"


def test_per_caller_rate_limit_in_iam_mode_is_off_at_zero_and_for_api_key_callers(api, monkeypatch):
    monkeypatch.setenv("PER_CALLER_RATE", "0")
    assert [api.post([record(b"x", "pk")], sign=ALICE)[0] for _ in range(4)] == [200] * 4
    monkeypatch.setenv("PER_CALLER_RATE", "1")
    event = rest_event(json.dumps({"records": [record(b"k", "pk")]}), stream="events")
    identity = event["requestContext"]["identity"]
    identity["userArn"], identity["apiKeyId"] = None, "key-1"  # auth "api-key": its usage plan limits it
    assert [api.function.handler(event, FakeContext(api.remaining_ms))["statusCode"] for _ in range(3)] == [
        200
    ] * 3


class ThrottledCounters:
    """The function's DynamoDB client, but every UpdateItem (a counter) is throttled, as DynamoDB
    answers a hot partition; the idempotency calls go through."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.refused = 0

    def batch_get_item(self, **kwargs: Any) -> Any:
        return self.client.batch_get_item(**kwargs)

    def batch_write_item(self, **kwargs: Any) -> Any:
        return self.client.batch_write_item(**kwargs)

    def update_item(self, **kwargs: Any) -> Any:
        from botocore.exceptions import ClientError

        self.refused += 1
        error = {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "injected"}}
        raise ClientError(error, "UpdateItem")


def test_per_caller_rate_limit_in_iam_mode_a_throttled_counter_lets_requests_through_counted(api, capsys):
    """Fairness, not protection: the stage's throttle still bounds the API, and a table that cannot
    take the counters for a while must not stop every caller. The skipped count is a metric."""
    real = api.function._dynamodb_client()
    throttled = ThrottledCounters(real)
    api.function._dynamodb = throttled
    try:
        capsys.readouterr()
        assert [api.post([record(b"t", "pk")], sign=ALICE)[0] for _ in range(3)] == [200] * 3
    finally:
        api.function._dynamodb = real
    assert throttled.refused == 3
    assert emf_metric(capsys.readouterr().out, "PerCallerLimitUnavailable") == 3
    assert in_stream(api) == Counter({b"t": 3})


def test_per_caller_rate_limit_in_iam_mode_a_table_it_cannot_write_is_a_500_with_nothing_written(
    api, monkeypatch, capsys
):
    """A refusal no retry cures (no such table; AccessDenied when the role lacks UpdateItem) is a
    deployment fault, never a limit silently off: 500, nothing sent."""
    monkeypatch.setenv("IDEMPOTENCY_TABLE", "no-such-table")
    capsys.readouterr()
    status, _, body = api.post([record(b"lost", "pk")], sign=ALICE)
    assert status == 500 and body["message"].startswith("internal error; request id "), body
    assert (
        emf_metric(capsys.readouterr().out, "InternalErrors") == 1
    )  # logged with the reason (RateLimitMisconfigured)
    assert in_stream(api) == Counter()


class CountedUpdates(ThrottledCounters):
    """The function's DynamoDB client, counting the UpdateItem calls it passes on (`writes`)."""

    def __init__(self, client: Any) -> None:
        super().__init__(client)
        self.writes = 0

    def update_item(self, **kwargs: Any) -> Any:
        self.writes += 1
        return self.client.update_item(**kwargs)


def test_per_caller_rate_limit_in_iam_mode_a_caller_hammering_past_its_share_costs_one_write_a_window(
    api, clock
):
    """Refused once in a window, an environment refuses the rest of it without writing: a caller past
    its share cannot push its counter's item to DynamoDB's per-item write limit (where the counter
    would be throttled and let requests through), nor raise the table's bill."""
    real = api.function._dynamodb_client()
    counted = CountedUpdates(real)
    api.function._dynamodb = counted
    try:
        assert [api.post([record(b"h", "pk")], sign=ALICE)[0] for _ in range(6)] == [200, 200] + [429] * 4
        assert counted.writes == 3  # two admitted, one refused; the other three refused in memory
        assert api.post([record(b"bob", "pk")], sign=BOB)[0] == 200  # Bob's window is not Alice's
        clock.now += 1
        assert api.post([record(b"h2", "pk")], sign=ALICE)[0] == 200  # a new window is counted again
        assert counted.writes == 5
    finally:
        api.function._dynamodb = real
    assert in_stream(api) == Counter({b"h": 2, b"bob": 1, b"h2": 1})
