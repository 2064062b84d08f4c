"""Issue 39, property 3, through `make local`'s runtime: the producer function reads and records ids
in the idempotency table the template creates, under the grants the template gives it (the local
endpoint authorizes every call against them), and refuses an id re-used with another body."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from local.app import model
from local.app.provision import client
from local.commands.status import consumer_groups
from shardline.aws_lambda._http_idempotency import KEY_ATTRIBUTE

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]


def post(url: str, records: list[dict], key: str | None = None) -> tuple[int, dict]:
    """One signed POST, with `Idempotency-Key: key` if given."""
    body = json.dumps({"records": records}).encode()
    headers = {"content-type": "application/json"} | ({"Idempotency-Key": key} if key else {})
    request = AWSRequest("POST", url, data=body, headers=headers)
    SigV4Auth(Credentials(model.ACCESS_KEY, model.SECRET_KEY), "execute-api", model.REGION).add_auth(request)
    prepared = urllib.request.Request(url, data=body, method="POST", headers=dict(request.headers))
    try:
        with urllib.request.urlopen(prepared, timeout=60) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def test_property_3_api_a_reused_id_with_another_body_is_refused_by_the_local_app(runtime):
    url = f"{runtime.api_url}/streams/events/records"
    tag = f"reuse-{time.time_ns()}"
    first = {"partitionKey": f"{tag}-pk", "data": base64.b64encode(b"first").decode(), "id": f"{tag}-id"}
    other = first | {"data": base64.b64encode(b"other").decode()}

    assert post(url, [first])[0] == 200
    status, answer = post(url, [other])
    assert status == 422, answer
    assert [(e["index"], e["id"]) for e in answer["errors"]] == [(0, f"{tag}-id")]
    status, answer = post(url, [first])  # the same body again: accepted, applied once
    assert status == 200, answer

    dynamodb = client("dynamodb", runtime.endpoint_url)
    (ids_table,) = [
        name for name in dynamodb.list_tables()["TableNames"] if name.startswith("shardline-dev-ProducerIds")
    ]
    keys = [item[KEY_ATTRIBUTE]["S"] for item in dynamodb.scan(TableName=ids_table)["Items"]]
    (ours,) = [key for key in keys if key.endswith(f"/i/{tag}-id")]
    scoped_id = ours.split("/", 1)[1]  # <stream>/<caller scope>/i/<id>: the consumers' scoped id

    groups = {group["group"]: group for group in consumer_groups(runtime.app)}
    sink, counter = groups["event-sink"]["sink_table"], groups["key-counter"]["sink_table"]
    deadline = time.monotonic() + 300
    item = count = None
    while time.monotonic() < deadline and not (item and count):
        item = dynamodb.get_item(TableName=sink, Key={"pk": {"S": f"id#{scoped_id}"}, "sk": {"S": "id"}}).get(
            "Item"
        )
        count = dynamodb.get_item(TableName=counter, Key={"partitionKey": {"S": f"{tag}-pk"}}).get("Item")
        time.sleep(0.5)
    assert item is not None and item["data"]["B"] == b"first", "the event sink holds the first body"
    assert count is not None and count["count"]["N"] == "1", "the key counter counted it once"
