"""shardline: the KPL and KCL for Python and Lambda.

Producer: `shardline.producer.Producer` aggregates user records per predicted shard and retries
like the KPL. Consumer: `shardline.consumer.KinesisConsumer` de-aggregates, skips what was
processed, and checkpoints safely in a KCL-compatible lease table (`shardline.checkpoint`).

Submodules are imported on demand (cold starts): import what you use.
"""

__version__ = "0.1.0"
