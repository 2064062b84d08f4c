"""Test function: reports what the runtime gave it (context, environment, sys.path, cwd)."""

import os
import sys
import time


def context_fields(event, context):
    first = context.get_remaining_time_in_millis()
    time.sleep(event.get("sleep", 0))
    second = context.get_remaining_time_in_millis()
    return {
        "aws_request_id": context.aws_request_id,
        "function_name": context.function_name,
        "function_version": context.function_version,
        "invoked_function_arn": context.invoked_function_arn,
        "memory_limit_in_mb": context.memory_limit_in_mb,
        "memory_limit_type": type(context.memory_limit_in_mb).__name__,
        "log_group_name": context.log_group_name,
        "log_stream_name": context.log_stream_name,
        "identity": [context.identity.cognito_identity_id, context.identity.cognito_identity_pool_id],
        "client_context": context.client_context,
        "remaining_ms": [first, second],
    }


def environment(event, context):
    return dict(os.environ)


def paths(event, context):
    import layer_probe  # lives in the layer the test makes

    return {"sys_path": sys.path, "cwd": os.getcwd(), "layer_probe": layer_probe.__file__}
