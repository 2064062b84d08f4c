"""The producer API on loopback for the HTTP-contract tests: the local API Gateway (`local.apigw`,
SigV4-signed requests) in front of the real producer function (`shardline.cdk`'s
`_producer_handler/app.py`, in this process so a test can put a faulty Kinesis client under it),
Kinesis and DynamoDB on moto server, and both example consumer groups run over the stream to count
what was applied.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import shardline.cdk
from local.apigw.server import ApiServer
from local.app.model import RestApi
from tests.support.apigw import RECORDS, FunctionInvoker, request
from tests.support.integration import create_stream, kinesis_client, unique_stream_name
from tests.support.producer_handler import function_module as load_function

FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"
PRODUCER_HANDLER = Path(shardline.cdk.__file__).resolve().parent / "_producer_handler"
ROUTE = "events"
EVENTS, COUNTS = "events", "counts"


class FakeContext:
    """The parts of a Lambda context the handler reads; its clock really runs."""

    function_name = "shardline-producer"
    function_version = "$LATEST"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:000000000000:function:shardline-producer"

    def __init__(self, remaining_ms: int) -> None:
        self.aws_request_id = str(uuid.uuid4())
        self._ends = time.monotonic() + remaining_ms / 1000.0

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._ends - time.monotonic()) * 1000))


def function_module(name: str) -> ModuleType:
    """functions/<name>/app.py, imported once for these tests (their own warm functions)."""
    return load_function(name, prefix="shardline_api_test")


@dataclass
class LoopbackApi:
    """The API server, the producer function behind it, and the stream it writes."""

    server: ApiServer
    function: Any  # the module's ProducerFunction
    kinesis: Any  # a plain client of the stream's server
    stream: str
    remaining_ms: int = 7_500  # each invocation's time: 1.5 s of flushing after the 6 s margin
    answers: list[tuple[int, dict[str, Any]]] = field(default_factory=list)

    def post(
        self,
        records: list[dict[str, Any]],
        key: str | None = None,
        *,
        route: str = ROUTE,
        content_type: str = "application/json",
        sign: tuple[str, str] = ("test", "test"),
    ) -> tuple[int, dict[str, str], dict]:
        """POST the records (signed with `sign`, an access key and secret the server knows), with
        `Idempotency-Key: key` if given; (status, headers, body)."""
        headers = {"Idempotency-Key": key} if key is not None else {}
        headers["Content-Type"] = content_type
        body = json.dumps({"records": records}).encode()
        status, answer_headers, raw = request(
            self.server, "POST", f"/v1/streams/{route}/records", body, headers, sign=sign
        )
        answer = json.loads(raw)
        self.answers.append((status, answer))
        return status, answer_headers, answer

    def id_items(self) -> list[dict[str, Any]]:
        """Every item of the function's idempotency table."""
        import boto3

        table = self.function_settings().idempotency_table
        endpoint = self.kinesis.meta.endpoint_url
        client = boto3.client(
            "dynamodb", endpoint_url=endpoint, region_name="us-east-1",
            aws_access_key_id="testing", aws_secret_access_key="testing",
        )  # fmt: skip
        return list(client.scan(TableName=table)["Items"])

    def function_settings(self) -> Any:
        """The function's settings, as it reads them from its environment now."""
        from shardline.aws_lambda import settings_from_env

        return settings_from_env()

    def use(self, client: Any | None) -> None:
        """Put `client` (e.g. a `FaultyKinesis`) under the function; None: its own again."""
        self.function.set_kinesis_client(client)


def environment(monkeypatch: pytest.MonkeyPatch, endpoint: str, stream: str) -> None:
    """The producer function's environment: both services at `endpoint`, one route to `stream`."""
    for name, value in {
        "AWS_ENDPOINT_URL_KINESIS": endpoint,
        "AWS_ENDPOINT_URL_DYNAMODB": endpoint,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "POWERTOOLS_METRICS_NAMESPACE": "shardline-test",
        "POWERTOOLS_SERVICE_NAME": "shardline-producer",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "SHARDLINE_STREAMS": json.dumps({ROUTE: {"streamName": stream}}),
        "THROTTLED_GIVE_UP_SECONDS": "1",
    }.items():
        monkeypatch.setenv(name, value)
    for name in (
        "AWS_PROFILE",
        "AWS_SESSION_TOKEN",
        "MAX_RECORDS_PER_REQUEST",
        "MAX_BODY_BYTES",
        "IDEMPOTENCY_TABLE",
        "PER_CALLER_RATE",
    ):
        monkeypatch.delenv(name, raising=False)


def create_idempotency_table(endpoint: str, name: str) -> Any:
    """The producer's idempotency table as the construct makes it (key `scopedId`); its client."""
    import boto3

    from shardline.aws_lambda._http_idempotency import KEY_ATTRIBUTE

    client = boto3.client(
        "dynamodb", endpoint_url=endpoint, region_name="us-east-1",
        aws_access_key_id="testing", aws_secret_access_key="testing",
    )  # fmt: skip
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": KEY_ATTRIBUTE, "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": KEY_ATTRIBUTE, "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return client


def loopback_api(
    moto_server: str,
    monkeypatch: pytest.MonkeyPatch,
    *,
    idempotency: bool = True,
    credentials: dict[str, str] | None = None,
) -> Iterator[LoopbackApi]:
    """A fresh 2-shard stream, the producer function writing it (with its idempotency table unless
    `idempotency=False`), the local API in front; it knows `credentials` (access key -> secret:
    each key another IAM user) beside the local `test`/`test`."""
    client = kinesis_client(moto_server)
    name = unique_stream_name("api-contract")
    create_stream(client, name, shard_count=2)
    environment(monkeypatch, moto_server, name)
    if idempotency:
        create_idempotency_table(moto_server, f"{name}-ids")
        monkeypatch.setenv("IDEMPOTENCY_TABLE", f"{name}-ids")
    function = function_module("producer").function
    function.set_kinesis_client(None)
    api = LoopbackApi(None, function, client, name)  # type: ignore[arg-type]

    def invoke(event: dict[str, Any]) -> Any:
        return function.handler(event, FakeContext(api.remaining_ms))

    rest = RestApi("Api", "shardline-producer", "a1b2c3d4e5", "v1", (RECORDS,))
    known = {"test": "test", **(credentials or {})}
    server = ApiServer(rest, FunctionInvoker({"producer": invoke}), port=0, credentials=known)
    server.start()
    api.server = server
    try:
        yield api
    finally:
        server.stop()
        function.set_kinesis_client(None)
        client.delete_stream(StreamName=name, EnforceConsumerDeletion=True)


class Sinks:
    """Both example consumer groups run over the whole stream (the testing kit's ESM replay and
    in-memory lease table, whose sink tables apply the handlers' transactions as DynamoDB does):
    what a real deployment's sinks would hold."""

    def __init__(self, client: Any, name: str) -> None:
        from shardline.consumer import KinesisConsumer
        from shardline.testing import InMemoryLeaseTable, MappingReplay, read_shard

        self.events = function_module("event_sink")
        self.counter = function_module("key_counter")
        self.tables: dict[str, Any] = {}
        self.metrics: dict[str, dict[str, Any]] = {}
        groups = ((EVENTS, ["pk", "sk"], self.events.to_sink), (COUNTS, ["partitionKey"], self.counter.count))
        for table, key, handler in groups:
            leases = InMemoryLeaseTable(key_schema={table: key})
            consumer = KinesisConsumer(f"group-{table}", leases, kinesis=client)
            if table == COUNTS:  # as the function registers it
                consumer.batch_handler(partial(handler, table))
            else:
                consumer.handler(partial(handler, table))
            for shard in client.list_shards(StreamName=name)["Shards"]:
                replay = MappingReplay(read_shard(client, name, shard["ShardId"]), batch_size=7)
                replay.drain(consumer.process)
            self.tables[table] = leases
            self.metrics[table] = consumer.metrics.snapshot()

    def event_items(self) -> list[dict[str, Any]]:
        return list(self.tables[EVENTS].items(EVENTS))

    def counts(self) -> dict[str, int]:
        items = self.tables[COUNTS].items(COUNTS)
        return {i["partitionKey"]["S"]: int(i["count"]["N"]) for i in items if not self.counter.is_guard(i)}

    def counter_guards(self) -> list[dict[str, Any]]:
        return [item for item in self.tables[COUNTS].items(COUNTS) if self.counter.is_guard(item)]
