"""The Kinesis event-source mapping, run as Lambda runs it: a poller per shard, invoking a function.

    runner = MappingRunner(mapping, invoker, endpoint_url="http://127.0.0.1:4566",
                           function_role_arn=function.role_arn, retention_hours=stream.retention_hours)
    runner.start()   # ListShards, then one thread per shard (plus one re-listing shards)
    runner.stats()   # {shard id: {state, position, batches, retries, ...}}
    runner.stop()    # prompt; no thread left (an invocation in flight is waited for, up to timeout)

What it keeps of Lambda's (with-kinesis, services-kinesis-batchfailurereporting,
kinesis-on-failure-destination): GetRecords once a second when idle and back to back while behind;
ProvisionedThroughputExceeded answered by backing off; BatchSize, MaximumBatchingWindowInSeconds and
the 6 MB event cut; LATEST / TRIM_HORIZON / AT_TIMESTAMP; one batch in flight per shard, in order;
retries with backoff until success, MaximumRetryAttempts or MaximumRecordAgeInSeconds; bisect;
partial batch responses; the on-failure SQS message; children only after their parents are drained.
ParallelizationFactor above 1 runs as 1 (said at start): order per shard is kept, parallelism is not.
A mapping on a registered consumer (enhanced fan-out) reads with the consumer's own budget and every
100 ms when idle (`local.limits.CONSUMER_HEADER`), in place of SubscribeToShard's push.
The rules that need no I/O are in `local.lambda_.esm.batches`; a shard's poller in `local.lambda_.esm.shard`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict
from typing import Any

import boto3
import botocore.config
from botocore.exceptions import BotoCoreError, ClientError

from ...app import model
from ...cloudwatch.metrics import Publish, no_metrics
from ...iam.principals import mapping_session, session_credentials
from ...limits import CONSUMER_HEADER, SUBSCRIBED_POLL_INTERVAL
from .filters import FilterError, RecordFilter
from .shard import (
    DONE,
    POLLING,
    WAITING_FOR_PARENT,
    MappingSettings,
    ShardPoller,
    ShardStats,
)

__all__ = ["DONE", "POLLING", "WAITING_FOR_PARENT", "MappingRunner", "ShardStats"]

log = logging.getLogger(__name__)


def _record_filter(mapping: model.EventSourceMapping) -> RecordFilter | None:
    """The mapping's filter, or the reason Lambda would refuse the mapping (at start-up, as at deploy)."""
    if mapping.filter_criteria is None:
        return None
    try:
        return RecordFilter.from_criteria(json.loads(mapping.filter_criteria))
    except FilterError as exc:
        raise FilterError(
            f"{mapping.logical_id}: FilterCriteria refused as Lambda refuses it: {exc}"
        ) from exc


class MappingRunner:
    """One `EventSourceMapping` running against the Kinesis (and SQS) endpoint at `endpoint_url`."""

    def __init__(
        self,
        mapping: model.EventSourceMapping,
        invoker: model.Invoker,
        *,
        endpoint_url: str,
        function_role_arn: str,
        retention_hours: int = 24,
        clock: Callable[[], float] = time.time,
        poll_interval: float = 1.0,
        shard_refresh_interval: float = 10.0,
        retry_base_delay: float = 1.0,
        retry_max_delay: float = 8.0,
        publish: Publish = no_metrics,
    ) -> None:
        self.mapping = mapping
        self.invoker = invoker
        self.shard_refresh_interval = shard_refresh_interval
        max_age = mapping.maximum_record_age_seconds
        if mapping.consumer_name is not None:  # records are pushed to a subscriber as they arrive
            poll_interval = min(poll_interval, SUBSCRIBED_POLL_INTERVAL)
        self.settings = MappingSettings(
            poll_interval=poll_interval,
            retry_base_delay=retry_base_delay,
            retry_max_delay=retry_max_delay,
            max_record_age=float(max_age if max_age != -1 else retention_hours * 3600),
            clock=clock,
            stream_arn=model.stream_arn(mapping.stream_name),
            function_arn=model.function_arn(mapping.function_name),
            role_arn=function_role_arn,
            publish=publish,
            record_filter=_record_filter(mapping),
        )
        config = botocore.config.Config(
            retries={"total_max_attempts": 1},  # throttles are ours to answer, as Lambda's poller does
            connect_timeout=2,
            read_timeout=10,
            max_pool_connections=64,
        )
        # Lambda polls the stream and sends on-failure records with the function's role.
        access_key, secret = session_credentials(function_role_arn, mapping_session(mapping.function_name))
        session = boto3.session.Session(
            aws_access_key_id=access_key,
            aws_secret_access_key=secret,
            region_name=model.REGION,
        )
        self.kinesis = session.client("kinesis", endpoint_url=endpoint_url, config=config)
        if mapping.consumer_name is not None:  # enhanced fan-out: the consumer's reads, its own budget
            consumer = mapping.consumer_name

            def name_the_consumer(request: Any, **_: Any) -> None:
                request.headers[CONSUMER_HEADER] = consumer

            self.kinesis.meta.events.register("before-sign.kinesis.GetRecords", name_the_consumer)
        self.sqs = session.client("sqs", endpoint_url=endpoint_url, config=config)
        self.notices = tuple(self._notices())
        self.last_discovery_error: str | None = None
        self._queue_url: str | None = None
        self._lock = threading.Lock()
        self._pollers: dict[str, ShardPoller] = {}
        self._done: set[str] = set()
        self._discovery: threading.Thread | None = None

    def _notices(self) -> Iterable[str]:
        mapping = self.mapping
        if not mapping.enabled:
            yield f"{mapping.logical_id}: disabled (Enabled: false); not polling"
        if mapping.parallelization_factor > 1:
            yield (
                f"{mapping.logical_id}: ParallelizationFactor {mapping.parallelization_factor} is not "
                "supported locally; each shard runs one batch at a time (order kept, less parallel)"
            )
        if mapping.on_failure_arn and not mapping.on_failure_arn.startswith("arn:aws:sqs:"):
            yield (
                f"{mapping.logical_id}: on-failure destination {mapping.on_failure_arn} is not an SQS queue; "
                "ignored"
            )

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Lists the shards (their starting iterators taken now, so LATEST means "from now") and polls."""
        if self._discovery is not None:
            raise RuntimeError("already started")
        for notice in self.notices:
            log.warning(notice)
        if not self.mapping.enabled:
            return
        self._refresh_shards(initial=True)
        self._discovery = threading.Thread(
            target=self._discover, name=f"esm-{self.mapping.logical_id}", daemon=True
        )
        self._discovery.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stops every poller at once (each waits on one event); only an invocation in flight is awaited."""
        self.settings.stop.set()
        deadline = time.monotonic() + timeout
        threads = [self._discovery] if self._discovery else []
        with self._lock:
            threads += list(self._pollers.values())
        for thread in threads:
            if thread.ident is None:
                continue
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive() and timeout > 0:
                log.warning("%s still running after stop (an invocation in flight?)", thread.name)

    def stats(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            pollers = list(self._pollers.values())
        return {poller.shard_id: asdict(poller.stats) for poller in pollers}

    # -- shards ----------------------------------------------------------------------------------

    def _discover(self) -> None:
        while not self.settings.stop.wait(self.shard_refresh_interval):
            self._refresh_shards(initial=False)

    def _refresh_shards(self, *, initial: bool) -> None:
        try:
            shards, token = [], None
            while True:
                page = (
                    self.kinesis.list_shards(NextToken=token)
                    if token
                    else self.kinesis.list_shards(StreamName=self.mapping.stream_name)
                )
                shards += page["Shards"]
                token = page.get("NextToken")
                if not token:
                    break
        except (ClientError, BotoCoreError) as exc:
            self.last_discovery_error = f"ListShards: {exc}"
            log.warning("%s: %s", self.mapping.logical_id, self.last_discovery_error)
            return
        self.last_discovery_error = None
        position = self.mapping.starting_position if initial else "TRIM_HORIZON"
        for shard in shards:
            parents = tuple(
                shard[key] for key in ("ParentShardId", "AdjacentParentShardId") if shard.get(key)
            )
            self._add_shard(shard["ShardId"], parents, position, take_iterator=initial)

    def add_children(self, child_shards: list[dict[str, Any]]) -> None:
        """Shards a closed shard's last GetRecords named: read from their start after their parents."""
        for child in child_shards:
            self._add_shard(child["ShardId"], tuple(child.get("ParentShards", ())), "TRIM_HORIZON")

    def _add_shard(
        self, shard_id: str, parents: tuple[str, ...], position: str, take_iterator: bool = False
    ) -> None:
        with self._lock:
            if shard_id in self._pollers or self.settings.stop.is_set():
                return
            poller = ShardPoller(self, shard_id, parents, position)
            self._pollers[shard_id] = poller
        if take_iterator:
            poller.take_starting_iterator()
        with self._lock:
            if not self.settings.stop.is_set():  # stop() skips a poller it finds unstarted
                poller.start()

    def parents_done(self, parents: tuple[str, ...]) -> bool:
        """A parent we never saw (trimmed, older than retention) does not hold its children back."""
        with self._lock:
            return all(p in self._done or p not in self._pollers for p in parents)

    def shard_done(self, shard_id: str) -> None:
        with self._lock:
            self._done.add(shard_id)

    def queue_url(self) -> str:
        if self._queue_url is None:
            name = (self.mapping.on_failure_arn or "").rsplit(":", 1)[-1]
            self._queue_url = self.sqs.get_queue_url(QueueName=name)["QueueUrl"]
        return self._queue_url
