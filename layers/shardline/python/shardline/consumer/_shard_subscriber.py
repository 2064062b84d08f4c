"""Reading one shard for a worker with enhanced fan-out: SubscribeToShard, re-subscribed where it ended.

    reader = ShardSubscriber(kinesis, consumer_arn, "orders", "shardId-000000000001", key, start,
                             out, generation=1)

A stream consumer registered for the group (RegisterStreamConsumer; `shardline.cdk` does it with
`enhancedFanOut`) has 2 MiB a second per shard of its own, pushed to it as records arrive, instead
of sharing the shard's 5 GetRecords calls and 2 MiB a second with every other reader. A
subscription lasts 5 minutes; each event carries a continuation sequence number, and the reader
subscribes again after it, so nothing is skipped or read twice across subscriptions. A closed
shard's last event names its children and no continuation: `End` follows the last batch, as for
`ShardReader`, whose queue, flow control and start position this reader shares. A refused
subscription (ResourceInUseException: the consumer's previous subscription to the shard is less
than 5 seconds old, e.g. right after a lease changed hands; throttling; a lost connection) is tried
again with jittered backoff, without end.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, cast

from botocore.exceptions import BotoCoreError, ClientError

from shardline.consumer._shard_reader import Batch, End, ShardReader, error_code
from shardline.kinesis._positions import LATEST, TRIM_HORIZON

if TYPE_CHECKING:
    import queue

    from shardline.kinesis._positions import Position
    from shardline.protocols import KinesisReadClient

__all__ = ["ShardSubscriber"]


class _SubscribingClient(Protocol):
    def subscribe_to_shard(self, **kwargs: Any) -> Mapping[str, Any]: ...


logger = logging.getLogger(__name__)


class ShardSubscriber(ShardReader):
    """One shard's records pushed by SubscribeToShard to a registered consumer (module docstring)."""

    def __init__(
        self,
        kinesis: KinesisReadClient,
        consumer_arn: str,
        stream: str,
        shard_id: str,
        key: str,
        start: Position,
        out: queue.Queue[Batch | End],
        *,
        generation: int,
        max_pending: int = 2,
        max_backoff: float = 5.0,
    ) -> None:
        super().__init__(
            kinesis,
            stream,
            shard_id,
            key,
            start,
            out,
            generation=generation,
            max_pending=max_pending,
            max_backoff=max_backoff,
        )
        self.consumer_arn = consumer_arn
        self.continuation: str | None = None  # where the last event says the next one starts
        self._events: Any = None  # the open subscription's event stream, closed by `stop`

    def stop(self) -> None:
        super().stop()
        events = self._events
        if events is not None:
            events.close()  # the thread blocked reading it wakes up

    def run(self) -> None:
        failures = 0
        while not self.stopped.is_set():
            try:
                answer = cast(_SubscribingClient, self.kinesis).subscribe_to_shard(
                    ConsumerARN=self.consumer_arn,
                    ShardId=self.shard_id,
                    StartingPosition=self._starting_position(),
                )
                self._events = answer["EventStream"]
                self.calls += 1
                for event in self._events:  # an exception event raises (botocore's EventStreamError)
                    if self.stopped.is_set():
                        return
                    failures = 0
                    if not self._deliver(event["SubscribeToShardEvent"]):
                        return
            except (ClientError, BotoCoreError) as error:
                if self.stopped.is_set():
                    return
                failures += 1
                wait = min(self.max_backoff, self.min_interval * 2**failures)
                logger.warning(
                    "shard %s: subscription refused (%s), again in %.1fs",
                    self.shard_id,
                    error_code(error),
                    wait,
                )
                self.stopped.wait(wait * random.uniform(0.5, 1.0))
            finally:
                self._events = None

    def _deliver(self, event: dict[str, Any]) -> bool:
        """Hand on one event's records (and `End` at the shard's end); False when the reader stops."""
        records = [self._record(raw) for raw in event.get("Records", ())]
        behind = int(event.get("MillisBehindLatest", 0))
        if records:
            if not self._hand_on(Batch(self.key, self.generation, records, behind)):
                return False
            self.last_read = records[-1].sequence_number
        continuation = event.get("ContinuationSequenceNumber")
        if continuation is None:  # closed, and read to its end: the children are listed
            self._hand_on(End(self.key, self.generation))
            self.stopped.set()
            return False
        self.continuation = continuation
        return True

    def _starting_position(self) -> dict[str, str]:
        continuation = self.continuation or self.last_read
        if continuation is not None:
            return {"Type": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": continuation}
        if self.start_at.sequence in (TRIM_HORIZON, LATEST):
            return {"Type": self.start_at.sequence}
        return {"Type": "AT_SEQUENCE_NUMBER", "SequenceNumber": self.start_at.sequence}
