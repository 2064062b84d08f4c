"""`python -m bench.consumer_cost` runs, and the costs it prints for this tree keep their bounds
(counts of DynamoDB requests, not times): a crash and a refusal DynamoDB does not pin cost
O(log n) transactions, the key counter one transaction per batch of hot keys."""

from __future__ import annotations

import math

from bench import consumer_cost


def test_the_consumer_cost_bench_measures_this_tree_within_its_bounds() -> None:
    figures = consumer_cost.marginal(
        consumer_cost.measure_in(
            consumer_cost.ROOT / "layers/shardline/python", consumer_cost.ROOT / "functions"
        )
    )
    log_n = math.ceil(math.log2(consumer_cost.BATCH + 1))
    assert figures["successful batch"]["handler calls"] == consumer_cost.BATCH
    assert figures["crash"]["transactions"] <= log_n, figures["crash"]
    assert figures["refusal not pinned"]["transactions"] <= log_n, figures["refusal not pinned"]
    assert figures["failed record"]["dead letters"] == 1 and figures["failed record"]["waited s"] > 0
    assert figures["key counter, hot keys"]["transactions"] == 1
    assert figures["key counter, re-POST of 40"]["transactions"] <= 2
