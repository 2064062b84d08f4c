"""A test function with a DynamoDB commit: one TransactWriteItems Put of the event's key (unless told not)."""

import boto3

dynamodb = boto3.client("dynamodb")  # the endpoint and credentials come from the worker's environment


def handler(event, context):
    if event.get("commit", True):
        item = {"pk": {"S": event["key"]}}
        dynamodb.transact_write_items(TransactItems=[{"Put": {"TableName": event["table"], "Item": item}}])
    return {"done": event["key"]}
