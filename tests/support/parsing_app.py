"""A small app of the tests' own whose consumer parses its records: a stream, a producer API and one
consumer group (`order-writer`) whose handler reads each record's data as JSON and writes an item
keyed by the record's id — and raises `ValueError` on an order whose `"tenant"` is `BAD_TENANT`,
so those records are dead-lettered with that cause (the group's failure detail is "message"), and
drops an order whose tenant is `DROPPED_TENANT` without a word (a handler's bug: the record is
neither applied nor dead-lettered, missing).

    cdk_out = parsing_assembly(tmp_path)      # synthesized in process, offline
    runtime = start_runtime(cdk_out, logs)    # tests.support.runtime
"""

from __future__ import annotations

from pathlib import Path

#: The tenant the handler refuses: its records end in the group's DLQ.
BAD_TENANT = 3
#: The tenant whose records the handler drops: missing from the sink and the DLQ.
DROPPED_TENANT = 4
GROUP = "order-writer"
ROUTE = "orders"

HANDLER = f'''
"""Each order (JSON) once, as an item keyed by its record id; tenant {BAD_TENANT} is refused."""
import json
from functools import partial

from shardline.aws_lambda import ConsumerFunction


def order_item(table, record):
    order = json.loads(record.data)  # send's own payload would fail here too, on "order"
    if order["tenant"] == {BAD_TENANT}:
        raise ValueError(f"tenant {{order['tenant']}} is closed")
    if order["tenant"] == {DROPPED_TENANT}:
        return []
    item = {{"orderId": {{"S": record.id}}, "order": {{"S": str(order["order"])}}}}
    return [{{"Put": {{"TableName": table, "Item": item}}}}]


handler = ConsumerFunction(lambda table: partial(order_item, table)).handler
'''


def parsing_assembly(folder: Path) -> Path:
    """The app synthesized into `folder`/cdk.out (its handler written into `folder`/handler)."""
    import aws_cdk as cdk
    from aws_cdk import RemovalPolicy
    from aws_cdk import aws_dynamodb as dynamodb

    from shardline.cdk import ConsumerGroup, Layers, ProducerApi, Sink, Stream

    code = folder / "handler"
    code.mkdir(parents=True)
    (code / "app.py").write_text(HANDLER)
    outdir = folder / "cdk.out"
    app = cdk.App(outdir=str(outdir))
    stack = cdk.Stack(app, "parsing")
    layers = Layers(stack, "Layers")
    stream = Stream(
        stack, "Orders", stream_name="parsed-orders", shards=1, removal_policy=RemovalPolicy.DESTROY
    )
    ProducerApi(stack, "Api", streams={ROUTE: stream}, layers=layers)
    orders = dynamodb.Table(
        stack,
        "OrdersTable",
        partition_key=dynamodb.Attribute(name="orderId", type=dynamodb.AttributeType.STRING),
        billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
        removal_policy=RemovalPolicy.DESTROY,
    )
    ConsumerGroup(
        stack, GROUP, name=GROUP, stream=stream, layers=layers, code=code,
        sinks=[Sink(orders, holds="records", id_attribute="orderId", writes=("Put",))],
        max_attempts=2, failure_detail="message", batch_size=50,
    )  # fmt: skip
    app.synth()
    return outdir
