"""The local endpoint's DynamoDB error answers against what AWS recorded
(tests/conformance/aws_recorded/dynamodb_errors.json), through botocore as the recorded tests read them."""

from __future__ import annotations

import uuid

import pytest
from botocore.exceptions import ClientError

from tests.support.esm.aws import client
from tests.support.recorded import load, mismatches

pytestmark = pytest.mark.integration

RECORDED = load("dynamodb_errors")


def new_table(dynamodb, key: str) -> str:
    name = f"conformance-{uuid.uuid4().hex[:8]}"
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": key, "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": key, "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return name


def test_a_cancelled_transaction_is_the_recorded_transaction_canceled(local_endpoint):
    """Source: dynamodb_errors.json `transaction_canceled` — LocalStack tests/aws/services/dynamodb/
    test_dynamodb.snapshot.json, TestDynamoDB::test_transaction_write_canceled (AWS-validated
    2025-10-08): "An error occurred (TransactionCanceledException) when calling the
    TransactWriteItems operation: Transaction cancelled, please refer cancellation reasons for
    specific reasons [ConditionalCheckFailed, None]"; and `cancellation_reason` (the API
    reference's CancellationReason: Code, Message, Item, one per item in the request's order)."""
    dynamodb = client("dynamodb", local_endpoint)
    table = new_table(dynamodb, "Username")
    dynamodb.put_item(TableName=table, Item={"Username": {"S": "Fred"}})
    with pytest.raises(ClientError) as caught:
        dynamodb.transact_write_items(
            TransactItems=[
                {
                    "ConditionCheck": {
                        "TableName": table,
                        "ConditionExpression": "attribute_not_exists(Username)",
                        "Key": {"Username": {"S": "Fred"}},
                    }
                },
                {"Delete": {"TableName": table, "Key": {"Username": {"S": "Bert"}}}},
            ]
        )
    assert str(caught.value) == RECORDED["transaction_canceled"]["recorded"]
    reasons = caught.value.response["CancellationReasons"]
    assert [reason["Code"] for reason in reasons] == ["ConditionalCheckFailed", "None"]  # the recorded list
    assert all(set(reason) <= set(RECORDED["cancellation_reason"]["recorded"]["keys"]) for reason in reasons)


@pytest.mark.xfail(
    strict=True,
    reason="the endpoint (moto) writes the error's message as `message`; with the item returned, AWS writes "
    "`Message` (botocore shows no top-level `message`) — README: Not emulated",
)
def test_a_failed_condition_is_the_recorded_conditional_check_failed(local_endpoint):
    """Source: dynamodb_errors.json `conditional_check_failed` — test_dynamodb.snapshot.json,
    TestDynamoDB::test_return_values_on_conditions_check_failure (AWS-validated 2025-10-08):
    Error {Code ConditionalCheckFailedException, Message "The conditional request failed"}, the
    item as it was (ReturnValuesOnConditionCheckFailure ALL_OLD), HTTP 400. LocalStack's snapshot
    keeps of ResponseMetadata only HTTPStatusCode and an emptied HTTPHeaders: so is it read here."""
    dynamodb = client("dynamodb", local_endpoint)
    table = new_table(dynamodb, "id")
    item = {"id": {"S": "456"}, "price": {"N": "650"}, "product": {"S": "sporting goods"}}
    dynamodb.put_item(TableName=table, Item=item)
    with pytest.raises(ClientError) as caught:
        dynamodb.delete_item(
            TableName=table,
            Key={"id": {"S": "456"}},
            ConditionExpression="price between :lo and :hi",
            ExpressionAttributeValues={":lo": {"N": "500"}, ":hi": {"N": "600"}},
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
    response = dict(caught.value.response)
    response["ResponseMetadata"] = {
        "HTTPHeaders": {},
        "HTTPStatusCode": response["ResponseMetadata"]["HTTPStatusCode"],
    }
    assert mismatches(response, RECORDED["conditional_check_failed"]["recorded"]) == []
