"""shardline: the KPL and KCL for Python and Lambda.

The producer side aggregates user records per predicted shard and retries like the KPL::

    from shardline.producer import Producer
    from shardline.records import UserRecord

    results = Producer(kinesis_client, "events").put_many([UserRecord("user-1", b"{...}")])

Submodules are imported on demand (cold starts): import what you use.
"""

__version__ = "0.1.0"
