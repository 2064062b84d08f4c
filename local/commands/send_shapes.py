"""The shape of `send`'s load: each record's size, partition key and whether it is poison.

    shape = LoadShape(count=100_000, min_size=100, max_size=1 << 20, keys=1_000, skew="zipf:1.1",
                      poison_rate=0.001, seed=7)
    shape.size(seq), shape.key_index(seq), shape.poison(seq)

Sizes are log-uniform between `min_size` and `max_size` (as many records of 100-1,000 bytes as of
100 KB-1 MB). Keys: `uniform` over `keys`; `zipf[:S]` gives key k a weight 1/(k+1)^S (S=1.1 by
default: a few keys carry most records); `hot[:SHARE]` sends SHARE of the records (0.5 by default)
to key 0 and the rest uniformly. A poison record is one the event-sink group cannot apply: its
data is `POISON_SIZE`, over a DynamoDB item (the key counter still counts it). Everything is drawn
up front from `seed`, so a run is the same record by record.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from array import array
from dataclasses import dataclass, field

POISON_SIZE = 450 * 1024  # over DynamoDB's 400 KB item: the event sink dead-letters it, whole
MAX_RECORD_SIZE = 1024 * 1024  # the stream's maxRecordSizeKiB (data + key within it)
MAX_DATA_SIZE = MAX_RECORD_SIZE - 256  # room for the partition key
SKEWS = ("uniform", "zipf", "hot")


class ShapeError(ValueError):
    """A load shape that cannot be sent; the message names the option."""


def parse_size(text: str) -> tuple[int, int]:
    """`N` or `MIN-MAX` bytes of data (up to 1 MiB less room for the partition key)."""
    try:
        low, _, high = text.partition("-")
        sizes = (int(low), int(high or low))
    except ValueError:
        raise ShapeError(f"--size: a number of bytes or MIN-MAX, got {text!r}") from None
    if not 0 <= sizes[0] <= sizes[1] <= MAX_DATA_SIZE:
        raise ShapeError(f"--size: 0 <= MIN <= MAX <= {MAX_DATA_SIZE} bytes, got {text!r}")
    return sizes


def parse_skew(text: str) -> tuple[str, float]:
    """`uniform`, `zipf[:S]` (S > 0) or `hot[:SHARE]` (0 < SHARE <= 1)."""
    kind, _, value = text.partition(":")
    if kind not in SKEWS:
        raise ShapeError(f"--skew: one of uniform, zipf[:S], hot[:SHARE], got {text!r}")
    try:
        parameter = float(value) if value else {"uniform": 0.0, "zipf": 1.1, "hot": 0.5}[kind]
    except ValueError:
        raise ShapeError(f"--skew: {kind}'s parameter is a number, got {value!r}") from None
    if (kind == "zipf" and parameter <= 0) or (kind == "hot" and not 0 < parameter <= 1):
        raise ShapeError(f"--skew: zipf takes S > 0, hot a SHARE in (0, 1], got {text!r}")
    return kind, parameter


@dataclass
class LoadShape:
    count: int
    min_size: int = 100
    max_size: int = 100
    keys: int = 100
    skew: str = "uniform"
    poison_rate: float = 0.0
    poison_every: int = 0
    seed: int | None = None
    _sizes: array[int] = field(init=False, repr=False)
    _keys: array[int] = field(init=False, repr=False)
    _poison: set[int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.count < 0 or self.keys < 1:
            raise ShapeError("--count must be >= 0 and --keys >= 1")
        if not 0 <= self.poison_rate <= 1:
            raise ShapeError(f"--poison-rate: a share in [0, 1], got {self.poison_rate}")
        parse_size(f"{self.min_size}-{self.max_size}")
        kind, parameter = parse_skew(self.skew)
        rng = random.Random(self.seed)
        low, high = math.log(max(1, self.min_size)), math.log(max(1, self.max_size))
        if self.min_size == self.max_size:
            self._sizes = array("I", itertools.repeat(self.min_size, self.count))
        else:
            self._sizes = array("I", (round(math.exp(rng.uniform(low, high))) for _ in range(self.count)))
        self._keys = array("I", self._draw_keys(rng, kind, parameter))
        every = self.poison_every
        self._poison = {seq for seq in range(self.count) if every and (seq + 1) % every == 0}
        if self.poison_rate:
            self._poison |= {seq for seq in range(self.count) if rng.random() < self.poison_rate}

    def _draw_keys(self, rng: random.Random, kind: str, parameter: float) -> list[int]:
        if kind == "uniform":
            return [seq % self.keys for seq in range(self.count)]  # every key, in turn
        if kind == "hot":
            return [0 if rng.random() < parameter else rng.randrange(self.keys) for _ in range(self.count)]
        cumulative = list(itertools.accumulate(1 / (k + 1) ** parameter for k in range(self.keys)))
        total = cumulative[-1]
        last = self.keys - 1
        return [min(last, bisect.bisect(cumulative, rng.random() * total)) for _ in range(self.count)]

    def size(self, seq: int) -> int:
        return POISON_SIZE if seq in self._poison else self._sizes[seq]

    def key_index(self, seq: int) -> int:
        return self._keys[seq]

    def poison(self, seq: int) -> bool:
        return seq in self._poison

    @property
    def poison_count(self) -> int:
        return len(self._poison)
