"""`--profile`: where shardline spends its time in encode, decode and the producer (cProfile)."""

from __future__ import annotations

import cProfile
import io
import pstats
from collections.abc import Callable, Sequence

from bench.codec import Workload
from bench.units import FakeKinesis, SkippingClock, send_all
from shardline import kpl
from shardline.kinesis import UserRecord


def profile_call(title: str, call: Callable[[], object], top: int) -> str:
    """A Markdown section: the cProfile table (by own time) of one call."""
    profiler = cProfile.Profile()
    profiler.enable()
    call()
    profiler.disable()
    buffer = io.StringIO()
    stats = pstats.Stats(profiler, stream=buffer)
    stats.strip_dirs().sort_stats("tottime").print_stats(top)
    lines = [line for line in buffer.getvalue().splitlines() if line.strip()]
    body = lines[lines.index(next(line for line in lines if line.lstrip().startswith("ncalls"))) :]
    return "\n".join([f"## {title}", "", "```", *body, "```"])


def profile(workload: Workload, producer_records: Sequence[UserRecord], top: int = 10) -> str:
    """cProfile tables (by own time) of shardline encoding and decoding `workload`, and a producer run."""
    rounds = 20

    def encode_all() -> None:
        for _ in range(rounds):
            for batch in workload.batches:
                kpl.encode(batch)

    def decode_all() -> None:
        for _ in range(rounds):
            for payload in workload.payloads:
                kpl.decode(payload)

    return "\n\n".join(
        [
            profile_call(f"encode, {workload.label} (x{rounds})", encode_all, top),
            profile_call(f"decode, {workload.label} (x{rounds})", decode_all, top),
            profile_call(
                f"Producer.put_many of {len(producer_records):,} records, fake client "
                "(main thread; PutRecords calls run on the producer's pool, not shown)",
                lambda: send_all(FakeKinesis(4), SkippingClock(), producer_records, len(producer_records)),
                top,
            ),
        ]
    )
