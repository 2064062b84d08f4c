"""The commands that talk to a running app over the wire, as any client would.

- `status`: what the app holds (shards, groups, DLQs, functions, faults injected).
- `send` (+ `send_http`, `send_shapes`): load through the REST API, every answer counted.
- `verify` (+ `verify_readers`): the end of `send`: where every record went, per consumer group.
- `redrive`: a group's on-failure messages back through its own code.
"""
