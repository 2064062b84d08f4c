"""What the tests share: helpers, imported as `from tests.support.<module> import <name>`, and the
pytest plugins that define the shared fixtures (named once, in the root `tests/conftest.py`).

- `fakes`: in-process fakes of a Kinesis client, and clocks (unit tests).
- `consumer`: the consumer's in-memory harness (records, effects, a recording SQS, `setup`).
- `integration`: helpers over the moto server fixture (streams, tables, the virtual-clock lease table).
- `identity`: `LossyProxy`, a loopback proxy that loses replies after the write.
- `consumer_handlers`: the example handlers on moto (fixture `stream`; `drain`).
- `apigw`, `workers`, `send`, `endpoint`: the local runtime's parts under test (fixtures `start`,
  `make_functions`, `stub_api`, `pipeline`).
- `local_endpoint`: the local AWS endpoint as a child process (fixtures `local_endpoint`,
  `local_endpoint_no_limits`).
- `recorded`: the conformance suite's field-by-field comparison with what AWS recorded (`shape_of`).
- `cdk`: the default context and template lookups (infra tests).
- `runtime`: the local runtime on free ports (`start_runtime`, `free_port`).
"""
