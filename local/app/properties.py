"""Which template properties the local runtime honours, for the resources it runs itself.

Every property of a stream, a function or an event-source mapping is one of three things:
honoured (the runtime does what AWS does with it), of no local effect (a tag, a description:
nothing a run could show differs), or not emulated — listed at start-up and in `status` with
what differs, never dropped in silence. A property a newer CDK adds lands in the third group
until it is looked at.
"""

from __future__ import annotations

from typing import Any

from .model import NotEmulated

__all__ = ["HONOURED", "not_emulated"]

HONOURED: dict[str, frozenset[str]] = {
    "AWS::Kinesis::Stream": frozenset(
        ["Name", "ShardCount", "RetentionPeriodHours", "StreamModeDetails", "MaxRecordSizeInKiB"]
    ),
    "AWS::Lambda::Function": frozenset(
        [
            "FunctionName",
            "Handler",
            "Code",
            "Runtime",
            "Layers",
            "Timeout",
            "MemorySize",
            "Environment",
            "Role",
            "ReservedConcurrentExecutions",
            "LoggingConfig",
            "EphemeralStorage",
        ]
    ),
    "AWS::Lambda::EventSourceMapping": frozenset(
        [
            "EventSourceArn",
            "FunctionName",
            "BatchSize",
            "MaximumBatchingWindowInSeconds",
            "StartingPosition",
            "StartingPositionTimestamp",
            "FunctionResponseTypes",
            "BisectBatchOnFunctionError",
            "MaximumRetryAttempts",
            "MaximumRecordAgeInSeconds",
            "ParallelizationFactor",
            "DestinationConfig",
            "Enabled",
            "FilterCriteria",
        ]
    ),
}

#: Properties that change nothing a local run can show, whatever the resource.
NO_LOCAL_EFFECT = frozenset({"Tags", "Description"})

#: What differs when a property is not emulated (anything unlisted gets the generic reason).
DIFFERENCES: dict[str, str] = {
    "Architectures": "workers run on this machine's architecture; a native wheel built for the "
    "function's (e.g. arm64) fails only when deployed",
    "TracingConfig": "X-Ray is not emulated: no traces, no trace header",
    "StreamEncryption": "records are kept unencrypted and KMS permissions are not checked",
    "KmsKeyArn": "KMS is not emulated: the key and its permissions are not checked",
    "TumblingWindowInSeconds": "tumbling windows are not run: the function gets plain batches, "
    "without window, state or isFinalInvokeForWindow, and what it returns as state is ignored",
    "MetricsConfig": "the mapping's own metrics (EventCount, ...) are not published",
    "VpcConfig": "no VPC: the function reaches the local endpoint whatever its subnets allow",
    "DeadLetterConfig": "asynchronous invocation is not emulated, so its dead-letter queue is never used",
    "SnapStart": "SnapStart is not emulated: every worker starts cold",
    "FileSystemConfigs": "EFS is not emulated: the mount path does not exist",
    "ImageConfig": "only zip functions run locally",
    "CodeSigningConfigArn": "code signing is not checked",
    "RuntimeManagementConfig": "the runtime version is this machine's interpreter of the same minor version",
}
_GENERIC = "not emulated: the local run behaves as if it were absent"


def not_emulated(logical_id: str, resource_type: str, properties: dict[str, Any]) -> list[NotEmulated]:
    """The properties of one resource the runtime runs that it does not honour (empty for other types)."""
    honoured = HONOURED.get(resource_type)
    if honoured is None:
        return []
    return [
        NotEmulated(logical_id, resource_type, name, DIFFERENCES.get(name, _GENERIC))
        for name in sorted(properties)
        if name not in honoured and name not in NO_LOCAL_EFFECT
    ]
