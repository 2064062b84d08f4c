"""The endpoint's service metrics: each whole second served once, by cursor, and ten minutes kept."""

from __future__ import annotations

import tracemalloc

from local.endpoint.service_metrics import KEEP_S, ServiceMetrics


def test_a_second_is_served_once_it_has_passed_and_only_once() -> None:
    now = [1_000.2]
    metrics = ServiceMetrics(clock=lambda: now[0])
    metrics.add("AWS/Kinesis", "IncomingRecords", {"StreamName": "s"}, 3)
    metrics.add("AWS/Kinesis", "IncomingRecords", {"StreamName": "s"}, 4)
    assert metrics.since(0) == {"cursor": 0, "datapoints": []}  # 1000 is still going on
    now[0] = 1_001.0
    first = metrics.since(0)
    (point,) = first["datapoints"]
    assert point == [1, 1_000, "AWS/Kinesis", "IncomingRecords", {"StreamName": "s"}, [3.0, 4.0]]
    assert metrics.since(first["cursor"]) == {"cursor": 1, "datapoints": []}


def test_an_endpoint_nobody_reads_keeps_only_the_last_ten_minutes() -> None:
    now = [0.0]
    metrics = ServiceMetrics(clock=lambda: now[0])
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for second in range(20_000):  # five and a half hours, one datapoint a second, never read
            now[0] = float(second)
            metrics.add("AWS/Kinesis", "IncomingRecords", {"StreamName": "s"}, 1)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # Each kept second costs a few hundred bytes; all 20,000 of them were ~6 MB.
    assert grown < (KEEP_S + 1) * 1_000, f"{grown:,} bytes for {KEEP_S} s kept"
    seconds = [point[1] for point in metrics.since(0)["datapoints"]]
    assert seconds == list(range(19_999 - KEEP_S, 19_999))
