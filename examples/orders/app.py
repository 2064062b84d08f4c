"""The orders app: `python app.py` synthesizes it into cdk.out, checked by cdk-nag.

It depends on shardline only as an installed package (`pip install "../..[cdk,local]"` from this
folder of a clone, or the wheel `make dist` builds, with those extras).
"""

from __future__ import annotations

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks
from orders_stack import OrdersStack


def build(outdir: str | None = None) -> tuple[cdk.App, OrdersStack]:
    app = cdk.App(outdir=outdir)
    stack = OrdersStack(app, "orders")
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app, stack


if __name__ == "__main__":
    build()[0].synth()
