"""Fault injection for a Kinesis client: what no emulator does on its own.

Two wrappers around a real (loopback) boto3 Kinesis client; entries they refuse are never
sent to the server, as with real Kinesis, and everything else really lands.

`FaultyKinesis`, according to knobs that tests and the local runtime set, throttles or fails
some PutRecords entries, fails whole requests, returns a response with the wrong record count,
or denies ListShards.

`ShardLimitedKinesis` enforces Kinesis's per-shard write limits (1,000 records and 1 MiB per
second per open shard) on the client side, counting with `local.limits` (which the local endpoint
also uses, server side, for every client); neither moto nor kinesis-mock enforces them.

    client = boto3.client("kinesis", endpoint_url=...)
    kinesis = FaultyKinesis(client, rng=random.Random(7))
    kinesis.throttle_fraction = 0.3
    limited = ShardLimitedKinesis(client)  # or ShardLimitedKinesis(kinesis): limits, then faults
"""

from __future__ import annotations

import bisect
import hashlib
import random
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from typing import Any

from botocore.exceptions import ClientError, ReadTimeoutError

from shardline.kinesis._limits import DEFAULT_LIMITS

from ..limits import THROTTLED, Rates, ShardLimits, rate_exceeded_message

THROTTLED_MESSAGE = "Rate exceeded for shard (injected)"


def client_error(code: str, message: str, operation: str) -> ClientError:
    """The exception botocore raises for a service error `code`."""
    return ClientError({"Error": {"Code": code, "Message": message}}, operation)


class FaultyKinesis:
    """A Kinesis client that injects faults; every other call goes to the wrapped client.

    Knobs (safe to change between calls):
    - `throttle_fraction`: share of PutRecords entries answered with ProvisionedThroughputExceeded.
    - `record_error_fraction`: share answered with InternalFailure.
    - `fail_requests(code, times)`: the next `times` PutRecords calls raise `code`, sending nothing.
    - `mismatch_counts(times)`: the next `times` PutRecords calls land every entry but answer with
      one entry missing (a response whose count does not match the request).
    - `lose_replies(times, landed=True)`: the next `times` PutRecords calls raise botocore's
      ReadTimeoutError, as a reply lost on the way back; with `landed` the call reached the
      server first (every entry written), else it never did.
    - `list_shards_error`: ListShards raises this code (e.g. AccessDeniedException) while set.
    `injected` counts what was injected, by kind.
    """

    def __init__(self, client: Any, *, rng: random.Random | None = None) -> None:
        self._client = client
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._request_errors: deque[str] = deque()
        self._mismatches = 0
        self._lost_replies: deque[bool] = deque()
        self.throttle_fraction = 0.0
        self.record_error_fraction = 0.0
        self.list_shards_error: str | None = None
        self.injected: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def fail_requests(self, code: str, times: int = 1) -> None:
        with self._lock:
            self._request_errors.extend([code] * times)

    def mismatch_counts(self, times: int = 1) -> None:
        with self._lock:
            self._mismatches += times

    def lose_replies(self, times: int = 1, *, landed: bool = True) -> None:
        with self._lock:
            self._lost_replies.extend([landed] * times)

    def list_shards(self, **kwargs: Any) -> Any:
        code = self.list_shards_error
        if code is not None:
            self._count("ListShards:" + code)
            raise client_error(code, "ListShards denied (injected)", "ListShards")
        return self._client.list_shards(**kwargs)

    def put_records(self, **kwargs: Any) -> dict[str, Any]:
        with self._lock:
            lost = self._lost_replies.popleft() if self._lost_replies else None
        if lost is not None:
            if lost:
                self._client.put_records(**kwargs)
            self._count("PutRecords:ReplyLost" + ("" if lost else "BeforeWriting"))
            raise ReadTimeoutError(endpoint_url="(injected: the reply was lost)")
        with self._lock:
            request_error = self._request_errors.popleft() if self._request_errors else None
            mismatch = self._mismatches > 0
            self._mismatches -= int(mismatch)
            verdicts = [self._verdict() for _ in kwargs["Records"]]
        if request_error is not None:
            self._count("PutRecords:" + request_error)
            raise client_error(request_error, "request failed (injected)", "PutRecords")
        survivors = [
            entry for entry, verdict in zip(kwargs["Records"], verdicts, strict=True) if verdict is None
        ]
        landed: list[dict[str, Any]] = []
        if survivors:
            landed = list(self._client.put_records(**{**kwargs, "Records": survivors})["Records"])
        results: list[dict[str, Any]] = []
        landed_iter = iter(landed)
        for verdict in verdicts:
            if verdict is None:
                results.append(next(landed_iter))
            else:
                self._count(verdict)
                message = THROTTLED_MESSAGE if verdict == THROTTLED else "Internal service failure (injected)"
                results.append({"ErrorCode": verdict, "ErrorMessage": message})
        if mismatch:
            self._count("RecordCountMismatch")
            results = results[:-1]
        failed = sum(1 for result in results if "ErrorCode" in result)
        return {"FailedRecordCount": failed, "Records": results}

    def _verdict(self) -> str | None:
        roll = self._rng.random()
        if roll < self.throttle_fraction:
            return THROTTLED
        if roll < self.throttle_fraction + self.record_error_fraction:
            return "InternalFailure"
        return None

    def _count(self, kind: str) -> None:
        with self._lock:
            self.injected[kind] += 1


#: An open shard: (starting hash key, ending hash key, shard id).
_Shard = tuple[int, int, str]
#: What one entry costs its shard: (shard id, or None when no open shard holds it; bytes).
_Charge = tuple[str | None, int]


class ShardLimitedKinesis:
    """A Kinesis client that enforces the per-shard write limits; every other call goes to the wrapped client.

    Each open shard admits `records_per_second` records and `bytes_per_second` bytes (data + UTF-8
    partition key, as Kinesis meters) a second of `clock`, as one-second token buckets. A
    PutRecords entry over budget is answered in place with ProvisionedThroughputExceededException
    and not sent; a PutRecord raises it. The cached ListShards is dropped by a reshard through this
    wrapper (or `refresh_shards()`) and re-read once a second until the stream is ACTIVE again (a
    reshard lands a while after the call), or once a second for a hash key no cached shard holds.
    `throttled`, `admitted_*` count by shard id.
    """

    def __init__(
        self,
        client: Any,
        *,
        records_per_second: int = DEFAULT_LIMITS.shard_write_records_per_second,
        bytes_per_second: int = DEFAULT_LIMITS.shard_write_bytes_per_second,
        clock: Callable[[], float] = time.monotonic,
        account: str = "000000000000",
    ) -> None:
        self._client = client
        self.records_per_second = records_per_second
        self.bytes_per_second = bytes_per_second
        self.account = account
        self._clock = clock
        self._lock = threading.Lock()
        self._shards: dict[str, tuple[int, list[_Shard]]] = {}  # stream -> (second listed, open shards)
        self._settling: set[str] = set()  # resharded, and not yet seen ACTIVE since
        self._missed: dict[str, int] = {}  # stream -> second of its last re-read for an unknown hash key
        rates = Rates(write_records_per_second=records_per_second, write_bytes_per_second=bytes_per_second)
        self._limits = ShardLimits(rates, clock=clock)
        self.throttled: Counter[str] = Counter()
        self.admitted_records: Counter[str] = Counter()
        self.admitted_bytes: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def refresh_shards(self, stream: str | None = None) -> None:
        """Forget the shard listing of `stream` (of every stream if None): it has changed or will."""
        with self._lock:
            for name in [stream] if stream is not None else list(self._shards):
                self._shards.pop(name, None)
                self._settling.add(name)

    def split_shard(self, **kwargs: Any) -> Any:
        return self._reshard(self._client.split_shard, kwargs)

    def merge_shards(self, **kwargs: Any) -> Any:
        return self._reshard(self._client.merge_shards, kwargs)

    def update_shard_count(self, **kwargs: Any) -> Any:
        return self._reshard(self._client.update_shard_count, kwargs)

    def put_records(self, **kwargs: Any) -> dict[str, Any]:
        stream = _stream_name(kwargs)
        charges, admitted = self._charge(stream, kwargs["Records"])
        sent = [entry for entry, ok in zip(kwargs["Records"], admitted, strict=True) if ok]
        landed: list[dict[str, Any]] = []
        if sent:
            try:
                landed = list(self._client.put_records(**{**kwargs, "Records": sent})["Records"])
            except BaseException:
                self._release(stream, [c for c, ok in zip(charges, admitted, strict=True) if ok])
                raise
        results: list[dict[str, Any]] = []
        landed_iter = iter(landed)
        for charge, ok in zip(charges, admitted, strict=True):
            if ok:
                results.append(next(landed_iter))
            else:
                results.append({"ErrorCode": THROTTLED, "ErrorMessage": self._message(stream, charge[0])})
        # An entry the server refused wrote nothing, so it used no budget either.
        answered = zip(charges, admitted, results, strict=True)
        self._release(stream, [c for c, ok, result in answered if ok and "ErrorCode" in result])
        failed = sum(1 for result in results if "ErrorCode" in result)
        return {"FailedRecordCount": failed, "Records": results}

    def put_record(self, **kwargs: Any) -> Any:
        stream = _stream_name(kwargs)
        charges, admitted = self._charge(stream, [kwargs])
        if not admitted[0]:
            raise client_error(THROTTLED, self._message(stream, charges[0][0]), "PutRecord")
        try:
            return self._client.put_record(**kwargs)
        except BaseException:
            self._release(stream, charges)
            raise

    def _charge(self, stream: str, entries: list[Mapping[str, Any]]) -> tuple[list[_Charge], list[bool]]:
        """Each entry's charge, and whether its shard's budget admitted it (now spent)."""
        shards = self._open_shards(stream)
        charges: list[_Charge] = []
        for entry in entries:
            shard = _find(shards, key := record_hash_key(entry))
            if shard is None and self._may_reread(stream):  # the cache may predate a reshard elsewhere
                shards = self._open_shards(stream, reload=True)
                shard = _find(shards, key)
            charges.append((shard, _size(entry)))
        admitted = self._limits.admit_writes(
            [((stream, shard) if shard is not None else None, size) for shard, size in charges]
        )
        with self._lock:
            for (shard, size), ok in zip(charges, admitted, strict=True):
                if shard is None:
                    continue
                if ok:
                    self.admitted_records[shard] += 1
                    self.admitted_bytes[shard] += size
                else:
                    self.throttled[shard] += 1
        return charges, admitted

    def _release(self, stream: str, charges: list[_Charge]) -> None:
        """Give back the budget of admitted entries that did not land."""
        self._limits.release_writes([((stream, shard), size) for shard, size in charges if shard is not None])
        with self._lock:
            for shard, size in charges:
                if shard is not None:
                    self.admitted_records[shard] -= 1
                    self.admitted_bytes[shard] -= size

    def _message(self, stream: str, shard: str | None) -> str:
        return rate_exceeded_message(shard, stream, self.account)

    def _reshard(self, call: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
        response = call(**kwargs)
        self.refresh_shards(_stream_name(kwargs))
        return response

    def _may_reread(self, stream: str) -> bool:
        with self._lock:
            second = int(self._clock())
            first = self._missed.get(stream) != second
            self._missed[stream] = second
            return first

    def _open_shards(self, stream: str, *, reload: bool = False) -> list[_Shard]:
        with self._lock:
            second = int(self._clock())
            cached = self._shards.get(stream)
            settling = stream in self._settling
        if cached is not None and not reload and not (settling and cached[0] != second):
            return cached[1]
        # Asked before listing: if ACTIVE then, the listing shows the reshard's result.
        summary = self._client.describe_stream_summary(StreamName=stream) if settling else None
        shards: list[_Shard] = []
        request: dict[str, Any] = {"StreamName": stream}
        while request:
            response = self._client.list_shards(**request)
            for shard in response.get("Shards", ()):
                if shard["SequenceNumberRange"].get("EndingSequenceNumber") is not None:
                    continue  # closed: moto ignores ShardFilter, so skip them here
                keys = shard["HashKeyRange"]
                shards.append((int(keys["StartingHashKey"]), int(keys["EndingHashKey"]), shard["ShardId"]))
            # The API rejects StreamName beside a token.
            request = {"NextToken": response["NextToken"]} if response.get("NextToken") else {}
        shards.sort()
        with self._lock:
            self._shards[stream] = (second, shards)
            if summary is not None and summary["StreamDescriptionSummary"]["StreamStatus"] == "ACTIVE":
                self._settling.discard(stream)
        return shards


def _stream_name(kwargs: Mapping[str, Any]) -> str:
    return kwargs.get("StreamName") or str(kwargs["StreamARN"]).split("stream/", 1)[1]


def record_hash_key(entry: Mapping[str, Any]) -> int:
    if entry.get("ExplicitHashKey") is not None:
        return int(entry["ExplicitHashKey"])
    digest = hashlib.md5(entry["PartitionKey"].encode("utf-8"), usedforsecurity=False).digest()
    return int.from_bytes(digest, "big")


def _size(entry: Mapping[str, Any]) -> int:
    data = entry["Data"]
    return len(data.encode() if isinstance(data, str) else data) + len(entry["PartitionKey"].encode("utf-8"))


def _find(shards: list[_Shard], key: int) -> str | None:
    index = bisect.bisect_right(shards, key, key=lambda shard: shard[0]) - 1
    return shards[index][2] if index >= 0 and key <= shards[index][1] else None
