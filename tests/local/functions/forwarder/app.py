"""A team's consumer with no sink table: it forwards each Kinesis record's data to an SQS queue."""

import base64
import os

import boto3

SQS = boto3.client("sqs")


def handler(event, context):
    entries = [
        {"Id": str(index), "MessageBody": base64.b64decode(record["kinesis"]["data"]).decode()}
        for index, record in enumerate(event["Records"])
    ]
    for start in range(0, len(entries), 10):
        SQS.send_message_batch(QueueUrl=os.environ["QUEUE_URL"], Entries=entries[start : start + 10])
    return {}
