"""The orders pipeline: an API that takes order events keyed by tenant, a stream, and two consumer
groups — one writing each order to a table of its own, one forwarding each order to a FIFO queue.

Built from `shardline.cdk`'s constructs alone; every table, queue and handler here is the team's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from shardline.cdk import ConsumerGroup, Layers, Monitoring, ProducerApi, Sink, Stream

HANDLERS = Path(__file__).resolve().parent / "handlers"


class OrdersStack(Stack):
    """Order events in, orders out: a table keyed by tenant and order id, and a queue."""

    def __init__(self, scope: Construct, construct_id: str, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        layers = Layers(self, "Layers")
        stream = Stream(self, "OrderEvents", stream_name="order-events", shards=2)
        api = ProducerApi(self, "Api", streams={"orders": stream}, layers=layers)

        key = kms.Key(self, "OrdersKey", enable_key_rotation=True, description="orders: table and queue")
        orders = dynamodb.Table(
            self,
            "Orders",
            partition_key=dynamodb.Attribute(name="tenantId", type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name="orderId", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED,
            encryption_key=key,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            removal_policy=RemovalPolicy.DESTROY,
        )
        writer = ConsumerGroup(
            self,
            "OrderWriter",
            name="order-writer",
            stream=stream,
            layers=layers,
            code=HANDLERS / "order_writer",
            sinks=[Sink(orders, holds="records", id_attribute="orderId", writes=("Put",))],
            memory_mb=256,
            log_key=api.log_key,  # one logs key for the app's functions (each construct makes one otherwise)
        )

        queue_props: dict[str, Any] = {
            "fifo": True,
            "encryption": sqs.QueueEncryption.KMS,
            "encryption_master_key": key,
            "enforce_ssl": True,
            "retention_period": Duration.days(14),
        }
        # What its readers fail to handle 5 times waits here, in order, instead of blocking its tenant.
        undelivered = sqs.Queue(self, "OrdersOutUndelivered", **queue_props)
        outbox = sqs.Queue(
            self,
            "OrdersOut",
            dead_letter_queue=sqs.DeadLetterQueue(max_receive_count=5, queue=undelivered),
            **queue_props,
        )
        forwarder = ConsumerGroup(
            self,
            "OrderForwarder",
            name="order-forwarder",
            stream=stream,
            layers=layers,
            code=HANDLERS / "order_forwarder",
            sinks=[],
            log_key=api.log_key,
            access_logs=writer.access_logs,  # one access-log bucket for both groups' dead-letter buckets
        )
        forwarder.function.add_environment("ORDERS_QUEUE_URL", outbox.queue_url)
        # SendMessage only, and the key only as SQS uses it for that (grant_send_messages would add
        # GetQueueAttributes and kms:Encrypt/ReEncrypt*).
        forwarder.function.add_to_role_policy(
            iam.PolicyStatement(actions=["sqs:SendMessage"], resources=[outbox.queue_arn])
        )
        forwarder.function.add_to_role_policy(
            iam.PolicyStatement(
                actions=["kms:GenerateDataKey", "kms:Decrypt"],
                resources=[key.key_arn],
                conditions={"StringEquals": {"kms:ViaService": f"sqs.{self.region}.amazonaws.com"}},
            )
        )

        Monitoring(
            self,
            "Monitoring",
            streams=[stream],
            api=api,
            groups=[writer, forwarder],
            dashboard_name="orders",
        )
