"""Test function for a mapping through real worker processes: prints the event it was given,
reports a record whose data is `fail-once` as failed the first time it sees it (a partial batch
response), and raises on a record whose data is `raise`."""

import base64
import json
import os

reported = set()  # sequence numbers already reported once (the worker is warm: this survives)


def handler(event, context):
    print(json.dumps({"received": event, "pid": os.getpid(), "request_id": context.aws_request_id}))
    failures = []
    for record in event["Records"]:
        sequence_number = record["kinesis"]["sequenceNumber"]
        data = base64.b64decode(record["kinesis"]["data"])
        if data == b"raise":
            raise ValueError(f"record {sequence_number} cannot be processed")
        if data == b"fail-once" and sequence_number not in reported:
            reported.add(sequence_number)
            failures.append({"itemIdentifier": sequence_number})
    return {"batchItemFailures": failures}
