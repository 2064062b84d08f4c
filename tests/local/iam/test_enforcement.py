"""Issue 40, properties 1–4 on the wire: the local endpoint, told the default app's principals and
policies (as `Runtime` tells it), verifies every signature and authorizes every request as AWS would.

The endpoint is one of its own (enforcement changes what every other test's requests would get),
the app is the default one synthesized from the repository, each principal a real boto3 client
signing with the credentials the runtime gives that function or mapping.
"""

from __future__ import annotations

import io
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from rich.console import Console

from local.app import model
from local.app.provision import client, provision
from local.app.template import load
from local.cloudwatch.monitor import Monitor
from local.commands.status_iam import render_iam
from local.endpoint.handle import Endpoint
from local.iam.principals import Session, endpoint_config, sessions_of

pytestmark = pytest.mark.integration


class App:
    """The default app on an enforcing endpoint of its own."""

    def __init__(self, url: str, app: model.LocalApp) -> None:
        self.url, self.app = url, app
        self.sessions = {session.who: session for session in sessions_of(app)}

    def function(self, prefix: str) -> model.Function:
        return next(f for f in self.app.functions if f.logical_id.startswith(prefix))

    def session(self, function_prefix: str) -> Session:
        return self.sessions[f"function {self.function(function_prefix).name}"]

    def client(self, service: str, session: Session | None = None, **keys: str) -> Any:
        access_key, secret = session.credentials if session is not None else (keys["key"], keys["secret"])
        return boto3.client(
            service,
            endpoint_url=self.url,
            region_name=model.REGION,
            aws_access_key_id=access_key,
            aws_secret_access_key=secret,
            config=Config(retries={"total_max_attempts": 1}),
        )

    def table(self, prefix: str) -> str:
        return next(r.name for r in self.app.resources if r.logical_id.startswith(prefix))

    def queue_url(self, prefix: str) -> str:
        return model.queue_url(self.url, self.table(prefix))

    def report(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.url}/_shardline/iam", timeout=10) as response:
            report: dict[str, Any] = json.load(response)
        return report


@pytest.fixture(scope="module")
def enforced(cdk_out: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    log = tmp_path_factory.mktemp("iam-endpoint") / "endpoint.log"
    with Endpoint(port=0, log_path=log) as endpoint:
        app = load(cdk_out, endpoint_url=endpoint.url)
        provision(app, endpoint.url)
        config = json.dumps(endpoint_config(app, sessions_of(app))).encode()
        request = urllib.request.Request(f"{endpoint.url}/_shardline/iam", data=config, method="PUT")
        urllib.request.urlopen(request, timeout=30).close()
        yield App(endpoint.url, app)


def item(sink: str) -> dict[str, Any]:
    return {"TableName": sink, "Item": {"pk": {"S": "p"}, "sk": {"S": "s"}, "partitionKey": {"S": "k"}}}


def error_of(call: Any, **request: Any) -> tuple[str, str]:
    with pytest.raises(ClientError) as refused:
        call(**request)
    error = refused.value.response["Error"]
    return error["Code"], error["Message"]


# -- 1. every principal runs as itself ------------------------------------------------------------


def test_property_1_every_principal_runs_as_itself_and_every_request_is_sigv4_verified(enforced: App) -> None:
    sink_table = enforced.table("GroupeventsinkSink")
    event_sink = enforced.session("Groupeventsink")
    counter = enforced.session("Groupkeycounter")
    assert event_sink.credentials != counter.credentials  # two functions, two principals

    # The event sink's own principal writes its sink; the key counter's, on the same table, is refused
    # by name: the session AWS would name.
    enforced.client("dynamodb", event_sink).put_item(**item(sink_table))
    code, message = error_of(enforced.client("dynamodb", counter).put_item, **item(sink_table))
    assert code == "AccessDeniedException"
    assert message.startswith(f"User: {counter.session_arn} is not authorized to perform: dynamodb:PutItem")

    # A wrong secret, an unknown key, no signature at all: refused before anything is read or written.
    key, _ = event_sink.credentials
    wrong = enforced.client("dynamodb", key=key, secret="not-the-secret")
    assert error_of(wrong.put_item, **item(sink_table))[0] == "InvalidSignatureException"
    stranger = enforced.client("dynamodb", key="AKIANOBODY", secret="x")
    assert error_of(stranger.list_tables)[0] == "UnrecognizedClientException"
    unsigned = urllib.request.Request(
        enforced.url,
        data=b"{}",
        method="POST",
        headers={
            "X-Amz-Target": "DynamoDB_20120810.ListTables",
            "Content-Type": "application/x-amz-json-1.0",
        },
    )
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(unsigned, timeout=10)
    assert missing.value.code in (400, 403)
    assert "MissingAuthenticationToken" in missing.value.read().decode()


# -- 2. authorized the way AWS authorizes -----------------------------------------------------------


def test_property_2_identity_policies_resource_policies_and_per_item_actions_are_evaluated(
    enforced: App,
) -> None:
    own, other = enforced.table("GroupeventsinkSink"), enforced.table("GroupkeycounterSink")
    event_sink = enforced.session("Groupeventsink")
    dynamodb = enforced.client("dynamodb", event_sink)

    # No identity-based policy allows the event sink into the key counter's table: AWS's message, whole.
    table_arn = f"arn:aws:dynamodb:{model.REGION}:{model.ACCOUNT}:table/{other}"
    code, message = error_of(dynamodb.put_item, **item(other))
    assert (code, message) == (
        "AccessDeniedException",
        f"User: {event_sink.session_arn} is not authorized to perform: dynamodb:PutItem on resource: "
        f"{table_arn} because no identity-based policy allows the dynamodb:PutItem action",
    )

    # TransactWriteItems: each item needs its own action on its own table.
    transaction = [{"Put": item(own)}, {"Update": {
        "TableName": other, "Key": {"partitionKey": {"S": "k"}},
        "UpdateExpression": "ADD #c :one", "ExpressionAttributeNames": {"#c": "count"},
        "ExpressionAttributeValues": {":one": {"N": "1"}},
    }}]  # fmt: skip
    code, message = error_of(dynamodb.transact_write_items, TransactItems=transaction)
    assert code == "AccessDeniedException" and "dynamodb:UpdateItem on resource: " + table_arn in message
    assert enforced.client("dynamodb", event_sink).transact_write_items(TransactItems=transaction[:1])

    # A resource policy's explicit Deny: only the key counter's role may send to its dead letters,
    # whatever the sender's identity policies say (the account's root included).
    dead_letters = enforced.queue_url("GroupkeycounterDeadLetters")
    code, message = error_of(
        enforced.client("sqs", event_sink).send_message, QueueUrl=dead_letters, MessageBody="x"
    )
    assert code in ("AccessDenied", "AccessDeniedException")
    assert "with an explicit deny in a resource-based policy" in message
    code, _ = error_of(client("sqs", enforced.url).send_message, QueueUrl=dead_letters, MessageBody="x")
    assert code in ("AccessDenied", "AccessDeniedException")
    counter = enforced.session("Groupkeycounter")
    assert enforced.client("sqs", counter).send_message(QueueUrl=dead_letters, MessageBody="x")["MessageId"]


# -- 3. what it cannot evaluate, it says, and refuses ------------------------------------------------


def test_property_3_what_is_not_evaluated_is_listed_by_name_and_place(enforced: App) -> None:
    listed = enforced.report()["not_evaluated"]
    # The logs key's policy conditions its use by CloudWatch Logs on the encryption context.
    assert any(
        item.startswith("Condition key kms:EncryptionContext:aws:logs:arn in key policy of LogsKey")
        for item in listed
    ), listed


def test_property_3_an_allow_that_depends_on_what_is_not_evaluated_grants_nothing(tmp_path: Path) -> None:
    role = "arn:aws:iam::000000000000:role/tagged"
    session = Session(role, "s", "function tagged")
    by_tag = {"StringEquals": {"aws:PrincipalTag/team": "orders"}}
    by_other_tag = {"StringEquals": {"aws:PrincipalTag/x": "y"}}

    def policy(effect: str, action: str, **condition: Any) -> dict[str, Any]:
        return {"Statement": [{"Effect": effect, "Action": action, "Resource": "*", **condition}]}

    policies = [
        ["ByTag", policy("Allow", "dynamodb:ListTables", Condition=by_tag)],
        ["Plain", policy("Allow", "sqs:ListQueues")],
        ["DenyByTag", policy("Deny", "sqs:ListQueues", Condition=by_other_tag)],
    ]
    access_key, secret = session.credentials
    config = {
        "account": model.ACCOUNT,
        "region": model.REGION,
        "root_keys": {},
        "principals": {access_key: {"secret": secret, "arn": role, "session_arn": session.session_arn,
                                    "who": session.who, "policies": policies}},
    }  # fmt: skip
    with Endpoint(port=0, log_path=tmp_path / "endpoint.log") as endpoint:
        request = urllib.request.Request(
            f"{endpoint.url}/_shardline/iam", data=json.dumps(config).encode(), method="PUT"
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            listed = json.load(response)["not_evaluated"]
        assert "Condition key aws:PrincipalTag/team in ByTag: Statement[0]" in listed, listed
        tagged = App(endpoint.url, model.LocalApp("none"))
        code, message = error_of(tagged.client("dynamodb", session).list_tables)
        assert code == "AccessDeniedException" and "dynamodb:ListTables" in message  # the Allow did not grant
        # ... and a Deny that depends on it applies: refused although "Plain" allows.
        code, _ = error_of(tagged.client("sqs", session).list_queues)
        assert code in ("AccessDenied", "AccessDeniedException")
        with urllib.request.urlopen(f"{endpoint.url}/_shardline/iam", timeout=10) as response:
            reasons = {d["action"]: d["reason"] for d in json.load(response)["denials"]["recent"]}
        assert reasons == {"dynamodb:ListTables": "not-evaluated", "sqs:ListQueues": "explicit-deny"}


# -- 4. the failure is told where a developer looks ------------------------------------------------


def test_property_4_a_denial_is_in_status_and_on_the_dashboard_with_what_would_allow_it(
    enforced: App, tmp_path: Path
) -> None:
    counter = enforced.session("Groupkeycounter")
    sink = enforced.table("GroupeventsinkSink")
    error_of(enforced.client("dynamodb", counter).put_item, **item(sink))
    report = enforced.report()
    assert report["enforcing"] and report["denials"]["total"] >= 1
    table_arn = f"arn:aws:dynamodb:{model.REGION}:{model.ACCOUNT}:table/{sink}"
    denial = next(
        d for d in report["denials"]["recent"] if d["who"] == counter.who and d["resource"] == table_arn
    )
    assert denial["action"] == "dynamodb:PutItem" and denial["reason"] == "no-allow"
    assert denial["would_allow"] == {"Effect": "Allow", "Action": "dynamodb:PutItem", "Resource": table_arn}
    console = Console(file=io.StringIO(), width=400, record=True)
    render_iam({"iam": report}, console)
    shown = console.export_text()
    assert counter.who in shown and "dynamodb:PutItem" in shown and table_arn in shown
    board = Monitor(enforced.app, endpoint_url=enforced.url, log_dir=tmp_path).board({})
    assert any(
        (d["who"], d["action"], d["resource"]) == (counter.who, "dynamodb:PutItem", table_arn)
        and d["count"] >= 1
        for d in board["access_denied"]
    ), board["access_denied"]
