"""The local runtime: the synthesized app on one machine, on loopback (`python -m local up`).

In this repository it is the top-level folder `local/`; installed (with the `local` extra)
the same folder is the package `shardline.local` (setup.py maps it), run as `shardline local ...`
(`shardline._cli`). Its modules import each other relatively, and whatever names a module for a
child process derives the name from the package (`home.module`), so both work.

One package per emulated service, as moto and LocalStack arrange theirs; each depends only on the
ones below it (pyproject's import contract, `make lint`):

- `__main__`: the command line (`up`, `status`, `send`, `redrive`, `usage`).
- `runtime`: the whole app, started and stopped together.
- `commands`: `status`, `send` and its verdict (`verify`), `redrive`, `usage` (the billable
  operations counted so far): clients of a running app.
- `ecs`: a worker consumer group's ECS service, its tasks as local processes of the image's code
  (above `lambda_`, whose runtime packages they use).
- `lambda_`: functions in warm worker processes, packaged as Lambda packages them (`runtimes`), and
  the Kinesis event-source mappings (`esm`).
- `apigw`: the REST API, as API Gateway serves it (SigV4, resource policy, keys, validator, throttling).
- `endpoint`: one AWS endpoint (moto in a child process; `kinesis` and `dynamodb` corrected, the
  metrics AWS would publish, the endpoint's part of chaos).
- `cloudwatch`: metrics, alarms and the dashboard's data, in the runtime's process; and the usage
  ledger (`usage`: what each part bills, counted where it is served, the endpoint's part included).
- `app`: the synthesized app (`model`, `template`, and `properties`: what it honours of each
  resource), its resources created (`provision`), the functions' environments read through
  `shardline.aws_lambda`'s contract (`environments`).
- `chaos`: chaos profiles (what goes wrong, how often, when) and a faulty Kinesis client.
- `_http` (the request and response types shared by the API and the dashboard), `limits` (the
  per-shard throughput limits every enforcer counts with) and `home` (where the runtime keeps its
  state, in this repository and installed): below all of them.

No two modules import each other, even lazily (pyproject's import contract, `make lint`).
"""

import importlib.util
import sys
from pathlib import Path

# The verdict reads KPL aggregates with the library. Installed (`shardline[local]`), it is importable;
# in this repository it is the layer's source folder, which `python -m local ...` does not see.
if importlib.util.find_spec("shardline") is None:
    sys.path.append(str(Path(__file__).resolve().parents[1] / "layers" / "shardline" / "python"))
