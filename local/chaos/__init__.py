"""What goes wrong, and a faulty Kinesis client.

- `profiles`: chaos profiles (the language: faults, rates, reshards, kills), parsed and checked.
  The endpoint (`local.endpoint.chaos`, `local.endpoint.resharder`) and the workers
  (`local.lambda_.chaos`) carry them out.
- `faults`: fault injection and per-shard limits for a Kinesis client (tests and benchmarks).
"""
