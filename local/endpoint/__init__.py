"""The local AWS endpoint: every service moto serves, on one port, corrected where shardline can tell.

- `handle`: `Endpoint`, the parent's handle: `python -m local.endpoint` started as a child, awaited,
  stopped.
- `server`: the child program: moto's WSGI app, the corrections installed, shardline's own routes.
- `kinesis`: Kinesis made right (`fixes`: models, shard limits, counters; `responses`: the actions
  answered here rather than by moto; `subscribe`: SubscribeToShard, which moto lacks).
- `dynamodb`: atomic writes and cheap transactions.
- `service_metrics`: the Kinesis and DynamoDB metrics AWS would publish.
- `chaos`: the endpoint's part of a chaos profile (request faults, throttles, what was injected);
  `callers`: who holds a connection (a producer's reads are refused); `resharder`: the profile's
  splits and merges.
"""
