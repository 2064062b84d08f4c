"""Failures of a shard's environment, told apart from a record's: they stall the shard, loudly.

A sink table that does not exist, a role that may not write it, an item collection over 10 GB,
DynamoDB throttling or unreachable, a dead-letter queue (or its bucket) that refuses a letter, a
handler raising `DependencyUnavailable`: none of these is evidence against the record that was
running. The delivery counts nothing against any record, notes the stall in the lease row
(`stalledSince`, `stalledCause`, `stalledSequence`, `stalls`), counts `ShardStalls`, logs the
cause, waits with backoff and asks the mapping to retry from the first record not committed. When
the cause is removed, the next delivery goes on where the shard stopped: nothing is lost.
"""

from __future__ import annotations

import random

from botocore.exceptions import ClientError

from shardline.consumer._failure_text import failure_text
from shardline.consumer._lease_store import MAX_ERROR_CHARS
from shardline.errors import DependencyUnavailable

#: The longest wait between two deliveries of a stalled shard, and of a failing record (before
#: jitter, which adds up to a quarter).
MAX_BACKOFF_S = 60.0
#: The first wait of a stalled shard (it doubles with each stalled delivery).
STALL_BACKOFF_S = 1.0

_HINTS = {
    "ResourceNotFoundException": "a table (or queue) it writes does not exist in this account and region",
    "AccessDeniedException": "the function's role may not make this call",
    "AccessDenied": "the function's role may not make this call",
    "UnrecognizedClientException": "the function's credentials are not valid",
    "ItemCollectionSizeLimitExceededException": "an item collection (local index) is over 10 GB",
    "ProvisionedThroughputExceededException": "DynamoDB throttled the write",
    "ThrottlingException": "the service throttled the call",
    "RequestLimitExceeded": "DynamoDB's account request limit was reached",
    "InternalServerError": "DynamoDB failed",
    "ServiceUnavailable": "the service is unavailable",
    "NonExistentQueue": "the dead-letter queue does not exist",
    "AWS.SimpleQueueService.NonExistentQueue": "the dead-letter queue does not exist",
    "KMS.AccessDeniedException": "the queue's KMS key may not be used by the function's role",
    "NoSuchBucket": "the dead-letter bucket does not exist",
}


def backoff(attempt: int, base: float, cap: float = MAX_BACKOFF_S) -> float:
    """The wait before try `attempt + 1`: `base` doubled per earlier try, at most `cap`, and up
    to a quarter more at random — jitter only adds, so the spacing a user counts on (an outage
    shorter than the waits fails no record) holds, while shards stalled on one cause do not
    retry in step."""
    return min(cap, base * 2.0 ** max(0, attempt - 1)) * random.uniform(1.0, 1.25)


def stall_cause(failure: BaseException, detail: str = "fingerprint") -> str:
    """What stalled the shard, in words an operator can act on (bounded). An AWS error of
    shardline's own calls is told in AWS's words (its code, message and a hint); anything else —
    a handler's `DependencyUnavailable`, an unexpected exception — as `failure_text(failure,
    detail)` gives it: its type and fingerprint, its message only with `detail="message"`."""
    if isinstance(failure, DependencyUnavailable):
        text = f"the handler reported a dependency unavailable: {failure_text(failure, detail).text}"
    elif isinstance(failure, ClientError):
        error = failure.response.get("Error", {})
        code = str(error.get("Code", "?"))
        reasons = [
            str(reason.get("Code"))
            for reason in failure.response.get("CancellationReasons") or []
            if reason.get("Code") not in (None, "None")
        ]
        hint = _HINTS.get(code) or next((_HINTS[r] for r in reasons if r in _HINTS), None)
        if "ItemCollectionSizeLimitExceeded" in reasons:
            hint = _HINTS["ItemCollectionSizeLimitExceededException"]
        operation = getattr(failure, "operation_name", None) or "a call"
        text = f"{operation} failed with {code}"
        if reasons:
            text += f" (cancellation reasons: {', '.join(reasons)})"
        text += f": {error.get('Message', '')}"
        if hint:
            text += f" — {hint}"
    else:
        text = failure_text(failure, detail).text
    return text[:MAX_ERROR_CHARS]
