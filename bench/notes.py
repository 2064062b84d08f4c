"""The prose under the table: how each figure was obtained, and side figures, from a run's details."""

from __future__ import annotations

from typing import Any

from bench.consumer import notes as consumer_notes


def compose(details: dict[str, Any], problems: list[str]) -> list[str]:
    """One note per section (inputs, method, side figures), then every sanity problem found."""
    d = details
    c100 = d["codec 100 B records, 1,000 keys"]
    c1k = d["codec 1 KiB records, 1,000 keys"]
    w100, w1k = c100["workload"], c1k["workload"]
    ev = d["lambda event"]
    bulk = d["put units"]["bulk"]
    sent = bulk["shardline"]
    imp = d["imports"]
    biggest = ", ".join(f"{m['module']} {m['self_ms']:.1f}" for m in imp["largest_self_times_cached"][:4])
    identical = c100["sanity"]["byte_identical_to_shardline"]
    out = [
        f"Encode/decode: batches fill one aggregate of at most 51,200 bytes (KPL AggregationMaxSize, metered "
        f'with partition key "a"): {w100["records_per_aggregate"]:.0f} records of 100 B or '
        f"{w1k['records_per_aggregate']:.0f} of 1 KiB per aggregate, "
        f"{w100['aggregates']} aggregates per timed call. "
        f"Decode times the same payloads for all three; peers' encoders produce "
        f"{'byte-identical' if all(identical.values()) else 'different'} payloads.",
        f"MD5 of the aggregate body, which every contender computes, is "
        f"{c100['md5_share_of_shardline_encode']:.0%} / {c1k['md5_share_of_shardline_encode']:.0%} of "
        f"shardline's encode time and {c100['md5_share_of_shardline_decode']:.0%} / "
        f"{c1k['md5_share_of_shardline_decode']:.0%} of its decode time (100 B / 1 KiB records): "
        f"a floor that compresses every ratio as records grow.",
        f"Lambda event: {ev['kinesis_records']} Kinesis records (~{ev['event_bytes_approx'] / 1e6:.1f} MB), "
        f"{ev['user_records']:,} user records; aws-kinesis-agg runs deaggregate_records (which "
        f"re-encodes each record's data to base64, as Lambda delivers it); "
        f"shardline and aiokpl base64-decode then decode.",
        f"PUT units: shardline's real Producer, a fake stream of 4 even open shards, sleeps skipped; "
        f"KPL defaults are a model (aiokpl's aggregator is async/anyio-only): {d['put units']['model']}. "
        f"Bulk run: {sent['kinesis_records']:,} Kinesis records in {sent['requests']} PutRecords "
        f"request(s), {bulk['kpl_model']['kinesis_records']:,} in the model; producer wall time "
        f"{sent['seconds']:.1f} s for {bulk['user_records']:,} records "
        f"({bulk['user_records'] / sent['seconds'] / 1e3:.0f} k records/s), rate-limiter sleeps skipped: "
        f"{sent['skipped_sleep_seconds']:.2f} s.",
        f"Import: best of {imp['runs']} fresh interpreters; boto3 itself takes "
        f"{imp['timings_ms']['shardline (cached .pyc)']['boto3']:.0f} ms here. Cross-check "
        f"min(boto3 + library) − min(boto3 alone): "
        f"{imp['timings_ms']['shardline (cached .pyc)']['difference_formula']:.1f} ms cached, "
        f"{imp['timings_ms']['shardline (source, no .pyc)']['difference_formula']:.1f} ms no .pyc. "
        f"Largest self import times after boto3 (ms, cached): {biggest}.",
        *(consumer_notes(d["consumer"]) if "consumer" in d else []),
        "Throughput is best-of-N with the garbage collector paused inside timed calls; contenders of a row "
        "run interleaved in the same loop. Timings on a shared VM vary; ratios are steadier than figures.",
    ]
    out += [f"SANITY PROBLEM: {problem}" for problem in problems]
    return out
