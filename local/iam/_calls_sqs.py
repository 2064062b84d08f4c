"""SQS operations -> the actions and ARNs IAM authorizes them on.

Source: the Service Authorization Reference for SQS
(https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonsqs.html) and the
developer guide's API permissions reference
(https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-api-permissions-reference.html):
the `queue` resource type `arn:aws:sqs:<region>:<account>:<name>`; the batch operations are authorized
as their single action (SendMessageBatch -> sqs:SendMessage, DeleteMessageBatch -> sqs:DeleteMessage,
ChangeMessageVisibilityBatch -> sqs:ChangeMessageVisibility); ListQueues on "*".

The queue comes from QueueUrl (`http://host:port/<account>/<name>` locally, `local.app.model.queue_url`;
`https://sqs.<region>.amazonaws.com/<account>/<name>` on AWS), from the path of a query-form request
sent to the queue's URL, or from QueueName (GetQueueUrl, CreateQueue).
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any
from urllib.parse import unquote, urlsplit

from ._calls_types import Need, UnknownResource, Where

__all__ = ["needs", "queue_arn_of_url"]

_BATCH = {
    "SendMessageBatch": "SendMessage",
    "DeleteMessageBatch": "DeleteMessage",
    "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
}
_STAR = frozenset({"ListQueues"})
_WRITES = frozenset({"SendMessage", "SendMessageBatch"})
_READS = frozenset({"ReceiveMessage"})
_REGION_HOST = re.compile(r"^(?:sqs\.)?(?P<region>[a-z]{2}(?:-[a-z]+)+-\d)\.")


def queue_arn_of_url(url: str, where: Where) -> str:
    """A queue URL's ARN (`UnknownResource` when the path is not `/<account>/<name>`)."""
    parts = urlsplit(url)
    segments = [unquote(s) for s in parts.path.split("/") if s]
    if len(segments) != 2:
        raise UnknownResource(f"QueueUrl {url!r} is not <endpoint>/<account>/<queue name>")
    region = _REGION_HOST.match(parts.hostname or "")
    return f"arn:aws:sqs:{region.group('region') if region else where.region}:{segments[0]}:{segments[1]}"


def _task_source(handle: str) -> str:
    """The source queue ARN inside a message-move task handle (base64 JSON with `sourceArn`)."""
    try:
        source = json.loads(base64.b64decode(handle, validate=True)).get("sourceArn")
    except (ValueError, AttributeError):
        source = None
    if not isinstance(source, str) or not source.startswith("arn:"):
        raise UnknownResource("CancelMessageMoveTask: the TaskHandle does not name its source queue")
    return source


def needs(
    operation: str, params: dict[str, Any], request: Any, where: Where
) -> tuple[list[Need], list[tuple[str, str]], dict[str, str]]:
    action = f"sqs:{_BATCH.get(operation, operation)}"
    if operation in _STAR:
        return [Need(action, "*")], [], {}
    if params.get("QueueUrl"):
        queue = queue_arn_of_url(str(params["QueueUrl"]), where)
    elif params.get("QueueName"):  # GetQueueUrl, CreateQueue
        owner = str(params.get("QueueOwnerAWSAccountId") or where.account)
        queue = f"arn:aws:sqs:{where.region}:{owner}:{params['QueueName']}"
    elif params.get("SourceArn"):  # StartMessageMoveTask, ListMessageMoveTasks
        queue = str(params["SourceArn"])
    elif params.get("TaskHandle"):  # CancelMessageMoveTask: the source queue is inside the handle
        queue = _task_source(str(params["TaskHandle"]))
    elif request.path.count("/") == 2 and request.path != "/":  # the query form, sent to the queue's URL
        queue = queue_arn_of_url(request.path, where)
    else:
        raise UnknownResource(f"SQS {operation} names no queue (QueueUrl, QueueName, SourceArn absent)")
    touches: list[tuple[str, str]] = []
    if operation in _WRITES:
        touches.append((queue, "write"))
    elif operation in _READS:
        touches.append((queue, "read"))
    return [Need(action, queue)], touches, {}
