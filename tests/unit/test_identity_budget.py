"""Item 6 of identity: bytes and writes are budgeted — counted, not timed.

The same metering `python -m bench.identity` prints (PUT units of what the real Producer sent, the
KPL's packing of the same records without ids, every DynamoDB item the example sinks' handlers
wrote through the consumer), on a smaller run: the budget is a property of the code, so it is a
test; the figures at full size are the benchmark's.
"""

from __future__ import annotations

from bench import identity


def test_6_bytes_and_writes_are_budgeted() -> None:
    plain, with_ids = identity.make_records(seed=23, count=20_000)
    ours, _ = identity.send_with_producer("aggregate ids", plain)
    kpl = identity.kpl_without_ids(plain)
    assert (ours.failed, ours.problem) == (0, None)
    # Producer-retry dedup: at most 1 % more PUT payload units than the KPL's own aggregation.
    assert ours.units <= kpl.units * 1.01, (ours.units, kpl.units)
    assert ours.kinesis_records <= kpl.kinesis_records + identity.SHARDS

    sink_records = 2_000
    _, small = identity.send_with_producer("sinks", plain[:sink_records])
    _, small_ids = identity.send_with_producer("sinks, client ids", with_ids[:sink_records])
    for sink in ("event_sink", "key_counter"):
        without = identity.run_sink(sink, small.shards, sink_records, with_ids=False)
        # ... and no DynamoDB write per record: one sink item each (the key counter: one per key
        # per chunk, fewer), the lease row's writes per batch.
        assert without.guard_items == 0 and without.sink_items <= sink_records, without
        if sink == "event_sink":
            assert without.sink_items == sink_records, without
        assert without.row_writes <= 2 * -(-sink_records // identity.BATCH_SIZE) * identity.SHARDS, without
        # Client-id dedup costs the counter one guard item per record, in the same transaction; the
        # event sink none (its item is keyed by the id), and no transaction: 1 WCU per small item.
        with_guards = identity.run_sink(sink, small_ids.shards, sink_records, with_ids=True)
        if sink == "key_counter":
            assert with_guards.guard_items == sink_records, with_guards
        else:
            assert (with_guards.guard_items, with_guards.transactions) == (0, 0), with_guards
            assert with_guards.wcu == sink_records + with_guards.row_writes, with_guards
        assert with_guards.sink_items == without.sink_items or sink == "key_counter", with_guards
