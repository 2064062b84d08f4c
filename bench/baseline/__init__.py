"""The baseline for `make cost`: the same pipeline built the usual way, without shardline.

Its own small CDK app (`app.py`, `stack.py`, `cdk.json`) that the local runtime runs like any other:
an API Gateway proxy to a Lambda that sends each record unaggregated with PutRecords, and a consumer
on Powertools' `BatchProcessor` + idempotency utility writing each record to a DynamoDB table and
keeping a per-key count. `stack.py`'s docstring lists every choice that affects its cost.
"""
