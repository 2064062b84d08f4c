"""The CDK constructs this repository's app is made of, for a team's own app (the `cdk` extra).

    import aws_cdk as cdk
    from shardline.cdk import PipelineStack, load_config, acknowledge

    app = cdk.App()
    config = load_config(app.node.try_get_context("shardline"), code_root=Path(__file__).parent)
    acknowledge(PipelineStack(app, config.prefix, config=config))
    app.synth()

- `load_config`: the pipeline from the `shardline` context, every key checked (`ConfigError` names it).
- `PipelineStack`: streams, the producer API, consumer groups and monitoring, from the configuration.
- `Stream`, `Layers`, `ProducerApi`, `ConsumerGroup`, `Monitoring`: the constructs it composes, each
  usable alone with typed props (a team's own stream, handler code and sink tables: `Sink`).
- `WorkerGroup`: a consumer group driven by `shardline worker` tasks on ECS Fargate instead of
  Lambda (a group is one or the other), with its lease table, DLQ, cluster and image.
- `ApiClient`: a caller of the producer API with its own key and usage plan.
- `acknowledge`: kept for older apps; each construct acknowledges its own cdk-nag findings.

Importing `shardline.cdk` needs aws-cdk-lib, constructs and cdk-nag (the `cdk` extra); the rest of
shardline never imports it, and its Lambda layer leaves it out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardline._lazy import lazy_exports

if TYPE_CHECKING:
    from shardline.cdk._config import PipelineConfig as PipelineConfig
    from shardline.cdk._config import load_config as load_config
    from shardline.cdk._config_api import ApiClient as ApiClient
    from shardline.cdk._config_reader import ConfigError as ConfigError
    from shardline.cdk._consumer_group import ConsumerGroup as ConsumerGroup
    from shardline.cdk._layers import POWERTOOLS_VERSION as POWERTOOLS_VERSION
    from shardline.cdk._layers import Layers as Layers
    from shardline.cdk._monitoring import Monitoring as Monitoring
    from shardline.cdk._nag import acknowledge as acknowledge
    from shardline.cdk._producer_api import ProducerApi as ProducerApi
    from shardline.cdk._sink import Sink as Sink
    from shardline.cdk._stack import PipelineStack as PipelineStack
    from shardline.cdk._stream import Stream as Stream
    from shardline.cdk._worker_group import WorkerGroup as WorkerGroup

_EXPORTS = {
    "PipelineConfig": "_config",
    "ApiClient": "_config_api",
    "load_config": "_config",
    "ConfigError": "_config_reader",
    "ConsumerGroup": "_consumer_group",
    "Layers": "_layers",
    "POWERTOOLS_VERSION": "_layers",
    "Monitoring": "_monitoring",
    "acknowledge": "_nag",
    "ProducerApi": "_producer_api",
    "Sink": "_sink",
    "PipelineStack": "_stack",
    "Stream": "_stream",
    "WorkerGroup": "_worker_group",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
