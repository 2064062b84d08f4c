"""The baseline app: `cd bench/baseline && npx cdk synth` (cdk.json), or from the repository root
`python -m bench.baseline.app` (writes `cdk.out` here, or to `$CDK_OUTDIR`).

Context `shards` (default 4, shardline's app's stream): the stream's shard count.

Under the local runtime, from the repository root:

    (cd bench/baseline && ../../node_modules/.bin/cdk synth -q -o /tmp/baseline.out)
    python -m local up --cdk-out /tmp/baseline.out
    python -m local send --cdk-out /tmp/baseline.out --count 1000 --keys 100

`send`'s verdict checks the two sinks the consumer declares (exactly once, exact counts) and the
stream (each record a Kinesis record of its own, known by its payload). The consumer names its
idempotency table as its LEASE_TABLE (the local tools find a consumer group by it); `status` shows
no lease rows there.
"""

from __future__ import annotations

import aws_cdk as cdk

from bench.baseline.stack import DEFAULT_SHARDS, BaselineStack

STACK_NAME = "baseline"


def build(outdir: str | None = None, *, shards: int | None = None) -> tuple[cdk.App, BaselineStack]:
    """The app and its one stack; `shards` overrides the context's."""
    app = cdk.App(outdir=outdir)
    context = app.node.try_get_context("shards")
    count = shards if shards is not None else int(context) if context is not None else DEFAULT_SHARDS
    stack = BaselineStack(app, STACK_NAME, shards=count)
    return app, stack


if __name__ == "__main__":
    build()[0].synth()
