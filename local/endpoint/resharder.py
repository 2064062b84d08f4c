"""The endpoint's reshards under a chaos profile: a thread that splits and merges at the profile's times.

`Resharder` counts each reshard's `at_s` from its stream's first record written, then calls the
Kinesis API on loopback as an observer (so every fix of `local.endpoint.kinesis` applies and no
fault of the profile hits it), retrying while the stream is UPDATING; a split takes the busiest
open shard, a merge the quietest adjacent pair. Each one done is noted in `ChaosState.reshards`
(`local.endpoint.chaos`) and counted in its `injected`.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

from ..chaos.profiles import Reshard
from .chaos import ChaosState


class Resharder:
    """Splits and merges at the profile's times, through the Kinesis API on loopback (so every fix
    applies), as an observer; `at_s` counts from the stream's first record written."""

    def __init__(
        self, state: ChaosState, endpoint_url: str, records_written: Callable[[], dict[str, int]]
    ) -> None:
        self.state = state
        self.endpoint_url = endpoint_url
        self.records_written = records_written  # stream name -> records written so far
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-resharder", daemon=True)

    def start(self) -> None:
        if self.state.reshards:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        from ..app.provision import client

        kinesis = client("kinesis", self.endpoint_url)
        first_record: dict[str, float] = {}
        pending = list(range(len(self.state.reshards)))
        while pending and not self._stop.wait(0.1):
            now = time.monotonic()
            for name, count in self.records_written().items():
                if count and name not in first_record:
                    first_record[name] = now
            for index in list(pending):
                entry = self.state.reshards[index]
                streams = [s for s in first_record if entry["stream"] in (None, s)]
                due = [s for s in streams if now >= first_record[s] + entry["at_s"]]
                if not due:
                    continue
                reshard = Reshard(entry["at_s"], entry["action"], entry["stream"])
                for stream in due:
                    entry["shards"] += _reshard(kinesis, stream, reshard, self._stop)
                entry["done_at"] = time.time()
                self.state.count(f"reshard.{reshard.action}")
                pending.remove(index)


def _reshard(kinesis: Any, stream: str, reshard: Reshard, stop: threading.Event) -> list[str]:
    """Do one split or merge of `stream`; the shards it involved (retried while the stream is UPDATING)."""
    from botocore.exceptions import ClientError

    while not stop.is_set():
        shards = kinesis.list_shards(StreamName=stream, ShardFilter={"Type": "AT_LATEST"})["Shards"]
        counts = _records_by_shard(kinesis, stream)
        try:
            if reshard.action == "split":
                shard = max(shards, key=lambda s: (counts.get(s["ShardId"], 0), s["ShardId"]))
                low, high = (int(shard["HashKeyRange"][k]) for k in ("StartingHashKey", "EndingHashKey"))
                kinesis.split_shard(
                    StreamName=stream,
                    ShardToSplit=shard["ShardId"],
                    NewStartingHashKey=str((low + high + 1) // 2),
                )
                involved = [shard["ShardId"]]
            else:
                ordered = sorted(shards, key=lambda s: int(s["HashKeyRange"]["StartingHashKey"]))
                pairs = list(itertools.pairwise(ordered))
                if not pairs:
                    return []
                first, second = min(
                    pairs, key=lambda p: counts.get(p[0]["ShardId"], 0) + counts.get(p[1]["ShardId"], 0)
                )
                kinesis.merge_shards(
                    StreamName=stream, ShardToMerge=first["ShardId"], AdjacentShardToMerge=second["ShardId"]
                )
                involved = [first["ShardId"], second["ShardId"]]
            print(f"chaos: {reshard.action} of {', '.join(involved)} in {stream}", flush=True)
            return involved
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") not in (
                "ResourceInUseException",
                "LimitExceededException",
            ):
                raise
            stop.wait(0.2)
    return []


def _records_by_shard(kinesis: Any, stream: str) -> dict[str, int]:
    """Records written per shard of `stream`, from the endpoint's counters (in this process)."""
    from .kinesis.fixes import STATE

    with STATE.lock:
        return {shard: counts[0] for (_, name, shard), counts in STATE.counters.items() if name == stream}
