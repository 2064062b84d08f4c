"""Transient DynamoDB failures (the chaos campaign's) are the infrastructure's, not a record's:
a cancelled transaction is tried again in place, a delivery that fails on DynamoDB blames no
record, and a lease claim retried by the SDK after a lost reply is no crash."""

from __future__ import annotations

from botocore.exceptions import ClientError

from shardline.consumer import DeadLetterQueue, KinesisConsumer
from shardline.consumer._leases import TRANSIENT_ATTEMPTS
from tests.support.integration import CONSUMER_RECORDS as RECORDS
from tests.support.integration import Pipeline, count_once


def canceled(*codes: str) -> ClientError:
    reasons = [{"Code": code} for code in codes]
    error = {"Code": "TransactionCanceledException", "Message": "injected"}
    return ClientError({"Error": error, "CancellationReasons": reasons}, "TransactWriteItems")


class FailingTransactions:
    """Wraps a DynamoDB client: the next `times` TransactWriteItems raise `error` (nothing sent)."""

    def __init__(self, client, error: ClientError, times: int) -> None:
        self._client, self.error, self.left, self.calls = client, error, times, 0

    def __getattr__(self, name):
        return getattr(self._client, name)

    def transact_write_items(self, **kwargs):
        self.calls += 1
        if self.left > 0:
            self.left -= 1
            raise self.error
        return self._client.transact_write_items(**kwargs)


def consumer_over(pipeline: Pipeline, dynamodb, **options) -> KinesisConsumer:
    table = pipeline.lease_table(dynamodb)
    consumer = KinesisConsumer("test-group", table, kinesis=pipeline.kinesis, **options)
    consumer.handler(count_once(pipeline.sink))
    return consumer


def applied(pipeline: Pipeline) -> dict[int, int]:
    return {int(item["id"]["S"]): int(item["applied"]["N"]) for item in pipeline.sink_items()}


def test_a_transaction_cancelled_by_a_conflict_is_tried_again_in_the_same_invocation(moto_server):
    pipeline = Pipeline(moto_server)
    dynamodb = FailingTransactions(pipeline.dynamodb, canceled("None", "TransactionConflict"), 2)
    consumer = consumer_over(pipeline, dynamodb)
    replay = pipeline.feed(batch_size=RECORDS)

    replay.drain(consumer.process)

    assert replay.crashes == 0 and replay.invocations == 1  # no failed delivery
    assert applied(pipeline) == dict.fromkeys(range(RECORDS), 1)
    assert dynamodb.left == 0


def test_a_cancellation_that_keeps_coming_stalls_the_delivery_and_nothing_is_applied_twice(moto_server):
    pipeline = Pipeline(moto_server)
    dynamodb = FailingTransactions(pipeline.dynamodb, canceled("None", "ThrottlingError"), TRANSIENT_ATTEMPTS)
    consumer = consumer_over(pipeline, dynamodb)
    replay = pipeline.feed(batch_size=RECORDS)

    replay.drain(consumer.process)

    # The bound was reached: the delivery stalled (no function error) and the mapping delivered
    # the batch again from its first record.
    assert replay.crashes == 0 and replay.invocations == 2
    assert consumer.metrics.snapshot()["ShardStalls"] == 1
    assert applied(pipeline) == dict.fromkeys(range(RECORDS), 1)


def test_deliveries_failing_on_dynamodb_send_no_healthy_record_to_the_dlq(moto_server):
    pipeline = Pipeline(moto_server)
    error = {"Code": "ServiceUnavailable", "Message": "injected"}
    metadata = {"HTTPStatusCode": 503}
    unavailable = ClientError({"Error": error, "ResponseMetadata": metadata}, "TransactWriteItems")
    dynamodb = FailingTransactions(pipeline.dynamodb, unavailable, 5)  # more deliveries than max_attempts
    dlq = DeadLetterQueue(pipeline.sqs, pipeline.queue_url)
    consumer = consumer_over(pipeline, dynamodb, dlq=dlq, max_attempts=3)
    replay = pipeline.feed(batch_size=RECORDS)

    replay.drain(consumer.process)

    snapshot = consumer.metrics.snapshot()
    assert replay.crashes == 0 and snapshot["ShardStalls"] == 5  # each failed delivery stalled, loudly
    assert pipeline.dead_letters() == [] and snapshot["RecordsFailed"] == 0  # no record was blamed
    assert applied(pipeline) == dict.fromkeys(range(RECORDS), 1)
    assert snapshot["CrashesDetected"] == 0


def test_a_lease_claim_retried_after_a_lost_reply_is_not_a_crash(moto_server):
    pipeline = Pipeline(moto_server)
    table = pipeline.leases
    _, crashed = table.begin("shard-a", "request-1", "100")
    _, crashed_again = table.begin("shard-a", "request-1", "100")  # the SDK's retry of the same call
    assert not crashed and not crashed_again
    _, crashed_other = table.begin("shard-a", "request-2", "100")  # the next delivery: the first died
    assert crashed_other
