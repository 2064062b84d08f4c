"""The local runtime: the synthesized app on one machine, on loopback (`python -m local up`).

- `template`: cdk.out -> the app (`model.LocalApp`): nothing declared twice.
- `provision`: its streams, tables, queues and buckets, created on the endpoint.
- `endpoint`: one AWS endpoint (moto in process; `kinesis_fixes` then `kinesis_responses`,
  `limits`, `dynamodb_fixes`).
- `workers`: each function in warm worker processes, as Lambda runs them.
- `apigw`: the REST API, as API Gateway serves it (SigV4, resource policy and keys in
  `_apigw_access`, validator, throttling); `_http`: the request and response types it shares with
  the routes beside it (the dashboard).
- `esm`: the Kinesis event-source mappings, as Lambda polls (`_esm_shard`: one shard's poller, which
  sees its mapping through a `Runner` protocol).
- `runtime`: all of the above, started and stopped together.
- `send`, `verify`, `status`: the commands: load, the end-to-end verdict, what the app holds. They
  read the functions' environments through `shardline.aws_lambda`'s contract (`_environments`).
- `faults`: fault injection for a Kinesis client (tests and benchmarks).
- `chaos`, `endpoint_chaos`: chaos profiles, injected at the endpoint and in the workers.
- `service_metrics`: the Kinesis and DynamoDB metrics AWS would publish, from the endpoint.
- `cloudwatch`: metrics, alarms and the dashboard's data, in the runtime's process.

No two modules import each other, even lazily (pyproject's import contract, `make lint`).
"""

import importlib.util
import sys
from pathlib import Path

# The verdict reads KPL aggregates with the library. Installed (`shardline[local]`), it is importable;
# in this repository it is the layer's source folder, which `python -m local ...` does not see.
if importlib.util.find_spec("shardline") is None:
    sys.path.append(str(Path(__file__).resolve().parents[1] / "layers" / "shardline" / "python"))
