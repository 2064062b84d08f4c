"""shardline: the KPL and KCL for Python and Lambda.

Producer: `shardline.producer.Producer` aggregates user records per predicted shard and retries
like the KPL. Consumer: `shardline.consumer.KinesisConsumer` de-aggregates, skips what was
processed, and checkpoints safely in a KCL-compatible lease table (`shardline.consumer.LeaseTable`).
Beside them: `shardline.kinesis` (limits, records, positions, the shard map), `shardline.kpl` (the
codec), `shardline.aws_lambda` (the Lambda adapters), `shardline.testing` (for your tests),
`shardline.errors` and `shardline.protocols`.

Submodules are imported on demand (cold starts): import what you use.
"""

__version__ = "0.1.0"
