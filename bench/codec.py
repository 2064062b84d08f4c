"""Encode and decode throughput of KPL aggregates (~50 KiB each): shardline against its peers."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from bench import peers
from bench.inputs import aggregate_batches, partition_keys
from bench.report import Row, Target
from bench.timing import best_of
from shardline import kpl
from shardline.kinesis import UserRecord

ENCODE_TARGETS = {peers.AIOKPL: Target("ratio", ">=", 2.0), peers.AWS_KINESIS_AGG: Target("ratio", ">=", 4.0)}
DECODE_TARGETS = {peers.AIOKPL: Target("ratio", ">=", 2.5), peers.AWS_KINESIS_AGG: Target("ratio", ">=", 4.0)}


@dataclass(frozen=True, slots=True)
class Workload:
    """Batches of user records, each filling one KPL aggregate, and those aggregates encoded."""

    label: str
    batches: list[list[UserRecord]]
    payloads: list[bytes]

    @property
    def record_count(self) -> int:
        return sum(len(batch) for batch in self.batches)

    def describe(self) -> dict[str, Any]:
        sizes = [len(payload) for payload in self.payloads]
        return {
            "aggregates": len(self.payloads),
            "user_records": self.record_count,
            "records_per_aggregate": self.record_count / len(self.payloads),
            "aggregate_bytes_min": min(sizes),
            "aggregate_bytes_max": max(sizes),
        }


def make_workload(
    label: str, *, seed: int, data_size: int, key_count: int = 1000, aggregates: int = 24
) -> Workload:
    """`aggregates` full aggregates of `data_size`-byte records with keys from `key_count` distinct ones."""
    rng = random.Random(seed)
    keys = partition_keys(rng, key_count)
    batches = aggregate_batches(rng, keys, data_size, aggregates)
    return Workload(label, batches, [kpl.encode(batch) for batch in batches])


def sanity(workload: Workload) -> dict[str, Any]:
    """Outside any timing: every encoder's payloads decode (shardline) to the input; every decoder agrees.

    Returns findings instead of raising: a benchmark reports, it does not fail.
    """
    expected = [(r.partition_key, r.data) for batch in workload.batches for r in batch]
    findings: dict[str, Any] = {"problems": []}
    identical: dict[str, bool] = {}
    for name, encode in peers.encoders(workload.batches).items():
        payloads = encode()
        identical[name] = payloads == workload.payloads
        try:
            decoded = [(r.partition_key, r.data) for p in payloads for r in kpl.decode(p)]
        except kpl.AggregationError as exc:
            findings["problems"].append(f"{workload.label}: shardline.decode rejects {name}'s payload: {exc}")
            continue
        if decoded != expected:
            findings["problems"].append(f"{workload.label}: {name}'s payloads decode to other records")
    findings["byte_identical_to_shardline"] = identical
    for name, decode in peers.decoders(workload.payloads).items():
        if peers.user_data(decode()) != expected:
            findings["problems"].append(f"{workload.label}: {name} decodes the aggregates to other records")
    return findings


MD5_FLOOR = "md5 alone"


def md5_floor(payloads: list[bytes]) -> Callable[[], list[bytes]]:
    """The MD5 of every aggregate body: work every validating encoder and decoder must do (a floor)."""
    bodies = [payload[len(kpl.MAGIC) : -kpl.DIGEST_SIZE] for payload in payloads]

    def digest_all() -> list[bytes]:
        md5 = hashlib.md5
        return [md5(body).digest() for body in bodies]

    return digest_all


def measure(workload: Workload, repeats: int) -> tuple[list[Row], dict[str, Any]]:
    """Encode and decode rates (user records per second) of every contender, with ratios and targets.

    The MD5 floor runs in the same interleaved loops; it goes to the details, not the table.
    """
    count = workload.record_count
    floor = md5_floor(workload.payloads)
    encode_seconds = best_of({**peers.encoders(workload.batches), MD5_FLOOR: floor}, repeats)
    decode_seconds = best_of({**peers.decoders(workload.payloads), MD5_FLOOR: floor}, repeats)
    encode_rates = {name: count / seconds for name, seconds in encode_seconds.items()}
    decode_rates = {name: count / seconds for name, seconds in decode_seconds.items()}
    rows = [
        *_rows(f"Encode, {workload.label}", encode_rates, ENCODE_TARGETS),
        *_rows(f"Decode, {workload.label}", decode_rates, DECODE_TARGETS),
    ]
    details = {
        "workload": workload.describe(),
        "encode_records_per_s": encode_rates,
        "decode_records_per_s": decode_rates,
        "md5_share_of_shardline_encode": encode_seconds[MD5_FLOOR] / encode_seconds[peers.SHARDLINE],
        "md5_share_of_shardline_decode": decode_seconds[MD5_FLOOR] / decode_seconds[peers.SHARDLINE],
    }
    return rows, details


def _rows(measurement: str, rates: dict[str, float], targets: Mapping[str, Target | None]) -> list[Row]:
    return [
        Row(measurement, "rec/s", rates[peers.SHARDLINE], peer, rates[peer], targets.get(peer))
        for peer in peers.PEERS
    ]
