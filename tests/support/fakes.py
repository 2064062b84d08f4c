"""In-process fakes shared by the tests: clocks, and ListShards over a list of shards."""

from __future__ import annotations

from botocore.exceptions import ClientError

from shardline.kinesis import MAX_HASH_KEY

QUARTER = (MAX_HASH_KEY + 1) // 4


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeClock:
    """A clock that moves only when slept on: pass it as a producer's `clock` and `sleep`."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def shard(shard_id: str, start: int, end: int, closed: bool = False) -> dict:
    sequence_range = {"StartingSequenceNumber": "1"}
    if closed:
        sequence_range["EndingSequenceNumber"] = "9"
    return {
        "ShardId": shard_id,
        "HashKeyRange": {"StartingHashKey": str(start), "EndingHashKey": str(end)},
        "SequenceNumberRange": sequence_range,
    }


def four_shards() -> list[dict]:
    return [shard(f"s{i}", i * QUARTER, (i + 1) * QUARTER - 1) for i in range(4)]


class FakeListShards:
    """Pages `shards` two at a time, like a server that ignores ShardFilter; can fail on demand."""

    def __init__(self, shards: list[dict]) -> None:
        self.shards = shards
        self.calls: list[dict] = []
        self.error: str | None = None

    def __call__(self, **kwargs) -> dict:
        self.calls.append(kwargs)
        if self.error:
            raise ClientError({"Error": {"Code": self.error, "Message": "no"}}, "ListShards")
        start = int(kwargs.get("NextToken", 0))
        page = self.shards[start : start + 2]
        response: dict = {"Shards": page}
        if start + 2 < len(self.shards):
            response["NextToken"] = str(start + 2)
        return response
