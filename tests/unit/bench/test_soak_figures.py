"""The soak's figures from its samples: memory flat or not, consumer lag and backlog, ingest share."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from bench.soak import MiB, ingest, lag, memory_verdict


def _samples(worker_mib: list[float], endpoint_mib: list[float] | None = None) -> list[dict[str, Any]]:
    out = []
    for i, size in enumerate(worker_mib):
        memory = {"worker a": {"processes": 1, "rss_total": int(size * MiB), "rss_max": int(size * MiB)}}
        if endpoint_mib is not None:
            memory["endpoint"] = {"processes": 1, "rss_total": 0, "rss_max": int(endpoint_mib[i] * MiB)}
        out.append({"t": float(i), "memory": memory, "records_written": 1000 * i})
    return out


def test_a_process_that_warms_up_then_stays_is_flat() -> None:
    # A start-up climb in the first quarter is not growth: warm is the second quarter's median.
    verdict = memory_verdict(_samples([20, 40, 60, 60, 61, 60, 62, 61]))
    assert verdict["worker a"] == {"warm_mib": 60.0, "final_mib": 61.5, "flat": True}


def test_a_process_that_keeps_growing_is_not_flat() -> None:
    verdict = memory_verdict(_samples([60, 60, 100, 100, 140, 140, 200, 200]))
    assert verdict["worker a"]["flat"] is False
    assert (verdict["worker a"]["warm_mib"], verdict["worker a"]["final_mib"]) == (100.0, 200.0)


def test_the_endpoint_is_reported_as_its_growth_per_accepted_record() -> None:
    # From the first sample (50 MiB) to the last quarter's median (250 MiB), over 100,000 records.
    verdict = memory_verdict(_samples([60] * 8, endpoint_mib=[50, 60, 100, 100, 150, 150, 250, 250]), 100_000)
    assert "flat" not in verdict["endpoint"]  # it holds the data: growth is expected, and shown
    assert verdict["endpoint"]["grown_mib"] == 200.0
    assert verdict["endpoint"]["bytes_per_accepted_record"] == round(200 * MiB / 100_000)


def test_lag_is_the_iterator_age_and_the_backlog_of_records_not_processed() -> None:
    samples = [
        {"records_written": 100, "records_processed": {"sink": 100}, "lag_ms": {"sink": 0}},
        {"records_written": 900, "records_processed": {"sink": 300}, "lag_ms": {"sink": 4000}},
        {"records_written": 1000, "records_processed": {"sink": 800}, "lag_ms": {"sink": 1000}},
    ]
    assert lag(samples) == {
        "sink": {
            "iterator_age_median_ms": 1000,
            "iterator_age_max_ms": 4000,
            "backlog_median_records": 200,
            "backlog_max_records": 600,
        }
    }


def test_ingest_is_bytes_per_open_shard_over_the_send_window_only() -> None:
    samples = [
        {"t": 0.0, "bytes_written": 0, "records_written": 0, "open_shards": 2},
        {"t": 10.0, "bytes_written": 10 * MiB, "records_written": 20_000, "open_shards": 2},
        {"t": 20.0, "bytes_written": 20 * MiB, "records_written": 40_000, "open_shards": 2},
        {"t": 99.0, "bytes_written": 20 * MiB, "records_written": 40_000, "open_shards": 2},  # drain
    ]
    figures = ingest(samples, SimpleNamespace(accepted_per_second=1234.0), (0.0, 20.0))
    assert figures["share_of_1_mib_per_s"] == 0.5
    assert figures["kinesis_records_per_s_per_shard"] == 1000.0
    assert figures["accepted_user_records_per_s"] == 1234.0
