"""SubscribeToShard on the local endpoint: enhanced fan-out's pushed reads, as Kinesis answers them.

`Subscriptions(app)` is WSGI middleware in front of moto (and under the chaos middleware, which
refuses or loses this call as it does any Kinesis read): a SubscribeToShard request is answered
here, anything else passes on. moto registers consumers but has no SubscribeToShard.

A call is checked as Kinesis checks it, then answered 200 with an event stream (`eventstream`):
the `initial-response`, then a `SubscribeToShardEvent` at once, another whenever records arrive,
and an empty one when none has gone for 5 s, for `State.subscription_seconds` (Kinesis: 5 minutes,
changed at `PUT /_shardline/limits`). Then the stream ends, and the client subscribes again from
the last event's ContinuationSequenceNumber.

- Refused, with an HTTP error and nothing streamed: a consumer ARN no stream holds, a shard the
  stream does not have (ResourceNotFoundException); a consumer not ACTIVE (`control`), a stream
  neither ACTIVE nor UPDATING, a call within 5 s of the last successful one for the same consumer
  and shard (ResourceInUseException, "Another active subscription exists for this consumer"); a
  StartingPosition without its SequenceNumber or Timestamp, or with another shard's sequence
  number (InvalidArgumentException).
- A call 5 s or more after the last one takes the subscription over: the older stream ends with a
  ResourceInUseException event. A consumer deregistered or a stream deleted meanwhile ends it with
  ResourceNotFoundException.
- StartingPosition: AT_SEQUENCE_NUMBER, AFTER_SEQUENCE_NUMBER, TRIM_HORIZON, LATEST, AT_TIMESTAMP.
  A ContinuationSequenceNumber is odd (records are even: `fixes`), a position after the last
  record pushed and before the next: AT it and AFTER it both go on with the next record. Kinesis's
  is no record's number either (LocalStack's AWS-validated snapshot of test_subscribe_to_shard).
- A closed shard read to its end: the last event carries ChildShards and no continuation, and the
  stream ends.
- Reads spend the consumer's own 2 MiB a second on the shard (`ShardLimits`, under the key its
  GetRecords named by `CONSUMER_HEADER` spend), never the shard's 5 calls a second: an event holds
  at most 2 MiB (one second of the budget; our choice) and the next waits out the debt it left.
"""

from __future__ import annotations

import bisect
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from moto.core.exceptions import JsonRESTError
from moto.core.utils import unix_time
from moto.kinesis import exceptions as kinesis_errors
from moto.kinesis import models

from ...limits import MiB
from ..metering import USAGE
from ..request_body import json_body
from ..service_metrics import SERVICE_METRICS
from . import eventstream
from .control import consumer_status
from .fixes import MAX_GET_RECORDS, NAMESPACE, STATE, fixed, read_after, shard_index_of
from .responses import child_json, epoch_seconds, record_json

__all__ = ["HEARTBEAT_SECONDS", "TAKEOVER_SECONDS", "TARGET", "Subscriptions"]

TARGET = "Kinesis_20131202.SubscribeToShard"
#: An empty event goes when no other has for this long: AWS sends "*at least* 1 event every 5 seconds"
#: (LocalStack's Kinesis provider, which emulates it every 3). The first event goes at once (ours).
HEARTBEAT_SECONDS = 5.0
#: Another call for the same consumer and shard within this long of a successful one is refused;
#: one later takes the subscription over (the API reference's rule).
TAKEOVER_SECONDS = 5.0
_EVENT_BYTES = 2 * MiB
_POSITIONS = ("AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER", "TRIM_HORIZON", "LATEST", "AT_TIMESTAMP")
#: moto's consumer ARN: arn:aws:kinesis:<region>:<account>:stream/<stream>/consumer/<name> (Kinesis
#: adds ":<creation epoch>"; the ARN is matched whole against the registered ones).
_CONSUMER_ARN = re.compile(
    r"arn:[\w-]+:kinesis:(?P<region>[\w-]+):(?P<account>\d{12}):stream/(?P<stream>[\w.-]+)/consumer/.+"
)

StartResponse = Callable[..., Any]


@dataclass
class _Claim:
    """The last successful call for a consumer and shard: when, and which (a later one takes over)."""

    called_at: float
    generation: int


#: (consumer ARN, shard id) -> its last successful call; read and written under `STATE.lock`.
_CLAIMS: dict[tuple[str, str], _Claim] = {}


@dataclass
class _Subscription:
    backend: models.KinesisBackend
    stream: models.Stream
    shard: models.Shard
    consumer: models.Consumer
    last: int  # every record up to this sequence number has been pushed (or was before the start)
    generation: int
    budget: tuple[str, ...] = field(init=False)  # the consumer's read budget on the shard

    def __post_init__(self) -> None:
        self.budget = (self.stream.arn, self.shard.shard_id, "consumer", self.consumer.consumer_name)

    @property
    def claim(self) -> tuple[str, str]:
        return self.consumer.consumer_arn, self.shard.shard_id


@dataclass
class _Step:
    """What one look at the shard found: an event to push (or to hold back as a heartbeat), or the end."""

    event: dict[str, Any] = field(default_factory=dict)
    failure: bytes | None = None  # an exception message that ends the stream
    more: bool = False  # records left unread after this event
    wait: float = 0.0  # seconds until the consumer's budget allows the next read


class Subscriptions:
    """WSGI: SubscribeToShard answered here (see the module), every other request passed to `app`."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("HTTP_X_AMZ_TARGET") != TARGET:
            return self.app(environ, start_response)
        try:
            with STATE.lock:
                subscription = _subscribe(_body(environ))
        except JsonRESTError as error:
            payload = error.get_body().encode()
            start_response(f"{error.code} {'Bad Request' if error.code == 400 else 'Error'}", [
                ("Content-Type", "application/x-amz-json-1.1"), ("Content-Length", str(len(payload))),
                ("x-amzn-RequestId", str(uuid.uuid4())),
            ])  # fmt: skip
            return [payload]
        start_response("200 OK", [("Content-Type", eventstream.CONTENT_TYPE),
                                  ("x-amzn-RequestId", str(uuid.uuid4()))])  # fmt: skip
        return _events(subscription)


def _body(environ: dict[str, Any]) -> dict[str, Any]:
    """The JSON request (already read by the chaos middleware when it runs)."""
    body = json_body(environ)
    if body is None:
        raise kinesis_errors.InvalidArgumentError("The request body is not a JSON object.")
    return body


# --- the call -----------------------------------------------------------------------------------


def _subscribe(request: dict[str, Any]) -> _Subscription:
    """Kinesis's checks of a SubscribeToShard call, then the subscription (under `STATE.lock`)."""
    arn, shard_id, position = (request.get(k) for k in ("ConsumerARN", "ShardId", "StartingPosition"))
    if not (isinstance(arn, str) and isinstance(shard_id, str) and isinstance(position, dict)):
        raise kinesis_errors.InvalidArgumentError("ConsumerARN, ShardId and StartingPosition are required.")
    match = _CONSUMER_ARN.fullmatch(arn)
    if match is None:
        raise kinesis_errors.InvalidArgumentError(f"{arn} is not a stream consumer's ARN.")
    account = match["account"]
    backend = models.kinesis_backends[account][match["region"]]
    stream = backend.streams.get(match["stream"])
    consumer = stream.get_consumer_by_arn(arn) if stream is not None else None
    if stream is None or consumer is None:
        raise kinesis_errors.ConsumerNotFound(consumer=arn, account_id=account)
    if consumer_status(consumer) != "ACTIVE":
        raise kinesis_errors.ResourceInUseError(
            f"Consumer {consumer.consumer_name} with creation timestamp {int(unix_time(consumer.created))} "
            f"under stream: {stream.stream_name} , account {account} is not in ACTIVE status."
        )
    if stream.status not in ("ACTIVE", "UPDATING"):
        raise kinesis_errors.ResourceInUseError(
            f"Stream {stream.stream_name} under account {account} not ACTIVE, instead in state "
            f"{stream.status}"
        )
    shard = stream.shards.get(shard_id)
    if shard is None:
        raise kinesis_errors.ResourceNotFoundError(
            f"Shard {shard_id} in stream {stream.stream_name} under account {account} does not exist"
        )
    last = _start(shard, position)
    now = time.monotonic()
    claim = _CLAIMS.get((arn, shard_id))
    if claim is not None and now - claim.called_at < TAKEOVER_SECONDS:
        raise kinesis_errors.ResourceInUseError(_in_use(account, stream, shard, consumer))
    generation = claim.generation + 1 if claim is not None else 1
    _CLAIMS[(arn, shard_id)] = _Claim(now, generation)
    if claim is not None:
        STATE.changed()  # the subscription taken over ends now, not at its next heartbeat
    dims = {"StreamName": stream.stream_name, "ConsumerName": consumer.consumer_name}
    SERVICE_METRICS.add(NAMESPACE, "SubscribeToShard.Success", dims, 1)
    USAGE.add("kinesis_consumers", f"{stream.stream_name}/{consumer.consumer_name}", subscriptions=1)
    return _Subscription(backend, stream, shard, consumer, last, generation)


def _in_use(account: str, stream: models.Stream, shard: models.Shard, consumer: models.Consumer) -> str:
    return (
        f"Another active subscription exists for this consumer: "
        f"{account}:{stream.stream_name}:{shard.shard_id}:{consumer.consumer_name}"
    )


def _start(shard: models.Shard, position: dict[str, Any]) -> int:
    """The sequence number a subscription reads after, from its StartingPosition."""
    kind = position.get("Type")
    if kind not in _POSITIONS:
        raise kinesis_errors.InvalidArgumentError(
            f"StartingPosition Type {kind} is not one of {', '.join(_POSITIONS)}."
        )
    if kind == "TRIM_HORIZON":
        return fixed(shard)._start  # below every record (moto keeps them all: nothing is trimmed)
    if kind == "LATEST":
        return fixed(shard)._last
    if kind == "AT_TIMESTAMP":
        if position.get("Timestamp") is None:
            raise kinesis_errors.InvalidArgumentError("StartingPosition AT_TIMESTAMP needs a Timestamp.")
        moment = epoch_seconds(position["Timestamp"])
        sequences = fixed(shard)._sequences
        first = bisect.bisect_left(sequences, moment, key=lambda number: shard.records[number].created_at)
        return sequences[first - 1] if first else fixed(shard)._start
    raw = position.get("SequenceNumber")
    if not isinstance(raw, str) or not raw.isdigit():
        raise kinesis_errors.InvalidArgumentError(f"StartingPosition {kind} needs a SequenceNumber.")
    number = int(raw)
    index = shard_index_of(number)
    if index != shard._shard_id:
        encoded = f"shardId-{index:012d}" if index is not None else "no shard"
        raise kinesis_errors.InvalidArgumentError(
            f"Invalid StartingSequenceNumber. It encodes {encoded}, while it was used in a call to a shard "
            f"with {shard.shard_id}"
        )
    return number - 1 if kind == "AT_SEQUENCE_NUMBER" else number


# --- the stream ---------------------------------------------------------------------------------


def _events(subscription: _Subscription) -> Iterator[bytes]:
    """The answer's messages, pushed as the shard fills, until the subscription's time is up."""
    yield eventstream.event("initial-response", {})
    began = time.monotonic()
    deadline, heartbeat_at = began + STATE.subscription_seconds, began  # the first event goes at once
    while True:
        with STATE.arrivals:
            seen = STATE.changes  # before the look: a record landing after it wakes the wait below
        with STATE.lock:
            step = _look(subscription)
        if step.failure is not None:
            yield step.failure
            return
        now = time.monotonic()
        event = step.event
        if event["Records"] or "ChildShards" in event or now >= heartbeat_at:
            yield eventstream.event("SubscribeToShardEvent", event)
            heartbeat_at = now + HEARTBEAT_SECONDS
            if "ChildShards" in event:
                return  # the shard's end: nothing follows, no continuation
        now = time.monotonic()
        if now >= deadline:
            return
        timeout = min(heartbeat_at, deadline) - now
        if step.more:
            if step.wait > 0:  # records wait for the consumer's budget, whatever else lands meanwhile
                time.sleep(min(step.wait, timeout))
            continue
        _await_change(seen, timeout)


def _await_change(seen: int, timeout: float) -> None:
    """Wait until records land, a shard closes or a stream goes after change `seen`, or `timeout`."""
    with STATE.arrivals:
        STATE.arrivals.wait_for(lambda: STATE.changes != seen, timeout)


def _look(subscription: _Subscription) -> _Step:
    """Read what the budget allows after the subscription's position (under `STATE.lock`)."""
    failure = _ended(subscription)
    if failure is not None:
        return _Step(failure=failure)
    shard = subscription.shard
    limits = STATE.limits if STATE.reads_limited else None
    wait = limits.read_free_in(subscription.budget) if limits is not None else 0.0
    sequences = fixed(shard)._sequences
    records: list[models.Record] = []
    total = 0
    if wait > 0:
        more = bisect.bisect_right(sequences, subscription.last) < len(sequences)
    else:
        records, total, more = read_after(shard, subscription.last, MAX_GET_RECORDS, _EVENT_BYTES)
    if records:
        if limits is not None:
            limits.charge_read(subscription.budget, total)
        subscription.last = records[-1].sequence_number
    event: dict[str, Any] = {
        "Records": [record_json(record) for record in records],
        "MillisBehindLatest": _behind(shard, subscription.last),
    }
    if not shard.is_open and not more:
        stream = subscription.stream
        event["ChildShards"] = [child_json(child) for child in stream.shards.values()
                                if shard.shard_id in (child.parent, child.adjacent_parent)]  # fmt: skip
    else:
        # odd: past the last record pushed, short of the next (records are even), whichever way it is read
        event["ContinuationSequenceNumber"] = str(subscription.last | 1)
    _meter(subscription, records, total, event["MillisBehindLatest"])
    return _Step(event=event, more=more, wait=wait)


def _ended(subscription: _Subscription) -> bytes | None:
    """The exception that ends a subscription taken over, or whose stream or consumer is gone; else None."""
    stream, consumer, account = subscription.stream, subscription.consumer, subscription.backend.account_id
    if subscription.backend.streams.get(stream.stream_name) is not stream:
        return eventstream.exception(
            "ResourceNotFoundException", f"Stream {stream.stream_name} under account {account} not found."
        )
    if consumer not in stream.consumers:
        return eventstream.exception(
            "ResourceNotFoundException", f"Consumer {consumer.consumer_arn}, account {account} not found."
        )
    if _CLAIMS[subscription.claim].generation != subscription.generation:
        return eventstream.exception(
            "ResourceInUseException", _in_use(account, stream, subscription.shard, consumer)
        )
    return None


def _behind(shard: models.Shard, last: int) -> int:
    """Milliseconds since the first record not yet pushed arrived; 0 when none waits."""
    sequences = fixed(shard)._sequences
    index = bisect.bisect_right(sequences, last)
    if index == len(sequences):
        return 0
    return max(0, int((time.time() - shard.records[sequences[index]].created_at) * 1000))


def _meter(subscription: _Subscription, records: list[models.Record], total: int, behind: int) -> None:
    """What Kinesis publishes for an event pushed, and what it bills (enhanced fan-out: bytes retrieved)."""
    if not records:
        return
    stream, consumer = subscription.stream.stream_name, subscription.consumer.consumer_name
    dims = {"StreamName": stream, "ConsumerName": consumer}
    SERVICE_METRICS.add(NAMESPACE, "SubscribeToShardEvent.Records", dims, len(records))
    SERVICE_METRICS.add(NAMESPACE, "SubscribeToShardEvent.Bytes", dims, total)
    SERVICE_METRICS.add(NAMESPACE, "SubscribeToShardEvent.MillisBehindLatest", dims, behind)
    SERVICE_METRICS.add(NAMESPACE, "SubscribeToShardEvent.Success", dims, 1)
    USAGE.add("kinesis_consumers", f"{stream}/{consumer}", records_read=len(records), bytes_read=total)
