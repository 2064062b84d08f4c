"""`bench.local_runtime`'s arithmetic: the bytes a run's records weigh, as Kinesis counts them."""

from __future__ import annotations

from types import SimpleNamespace

from bench.local_runtime import _record_bytes
from local.commands.send import partition_key


def test_a_records_bytes_are_its_data_and_the_mean_of_the_runs_partition_keys():
    report = SimpleNamespace(run_id="run-1", keys=100, size=100)
    keys = [partition_key("run-1", index) for index in range(100)]  # run-1-k0 ... run-1-k99
    assert _record_bytes(report) == 100 + sum(len(key) for key in keys) / 100 == 108.9
