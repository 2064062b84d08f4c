"""`status` reads the lease rows over the wire and shows what holds a shard back: a stall (its cause,
since when, how many stalled deliveries), the batches the mapping discarded (a redrive is owed), and a
record that keeps failing. The rows are written to the local endpoint's lease table as the consumer
writes them (the lease-row attributes of issue 24's contract), then read back by `collect`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from local.app.provision import client, provision
from local.app.template import load
from local.commands.status import age, collect, consumer_groups, lease_of, render
from local.endpoint.handle import Endpoint
from tests.support.runtime import free_port

pytestmark = pytest.mark.integration

NOW = 1_800_000_000.0
CAUSE = (
    "PutItem failed with ResourceNotFoundException: Requested resource not found [table orders] "
    "— a table (or queue) it writes does not exist in this account and region"
)
STALLED_AT = "49590338271490256608559692538361571095921575989136588898"
CHECKPOINT = "49590338271490256608559692538361571095921575989136588801"


def _rows() -> list[dict]:
    base = {"leaseOwner": {"S": "req-1"}, "leaseCounter": {"N": "12"}, "checkpoint": {"S": CHECKPOINT},
            "checkpointSubSequenceNumber": {"N": "0"}, "updatedAt": {"N": str(NOW - 5)}}  # fmt: skip
    skipped = [
        {"start": STALLED_AT, "checkpoint": CHECKPOINT, "checkpointSub": 0, "detectedAt": NOW - 600},
        {
            "start": STALLED_AT[:-2] + "99",
            "checkpoint": CHECKPOINT,
            "checkpointSub": 0,
            "detectedAt": NOW - 60,
        },
    ]
    return [
        {
            **base,
            "leaseKey": {"S": "shardId-000000000000"},
            "stalledSince": {"N": str(NOW - 754)},
            "stalledCause": {"S": CAUSE},
            "stalledSequence": {"S": STALLED_AT},
            "stalls": {"N": "7"},
            "skippedByMapping": {"S": json.dumps(skipped, separators=(",", ":"))},
        },
        {**base, "leaseKey": {"S": "shardId-000000000001"}},
        {
            **base,
            "leaseKey": {"S": "shardId-000000000002"},
            "failedSequenceNumber": {"S": STALLED_AT},
            "failedSubSequenceNumber": {"N": "3"},
            "failedAttempts": {"N": "2"},
            "lastError": {"S": "ValueError: bad order"},
        },
    ]


@pytest.fixture(scope="module")
def report(cdk_out: Path, tmp_path_factory: pytest.TempPathFactory):
    log = tmp_path_factory.mktemp("status") / "endpoint.log"
    with Endpoint(port=0, log_path=log) as endpoint:  # its own: the names are the app's
        app = load(cdk_out, endpoint_url=endpoint.url)
        provision(app, endpoint.url)
        dynamodb = client("dynamodb", endpoint.url)
        (group,) = [g for g in consumer_groups(app) if g["group"] == "event-sink"]
        for row in _rows():
            dynamodb.put_item(TableName=group["lease_table"], Item=row)
        # No `up` process: the runtime's part of the report says it is not answering.
        yield collect(app, endpoint_url=endpoint.url, api_base=f"http://127.0.0.1:{free_port()}")


def _shown(report: dict, width: int = 200) -> tuple[str, str]:
    """(plain text, text with the terminal's styles) of `status` as a user's terminal shows it."""
    console = Console(
        record=True,
        width=width,
        force_terminal=True,
        color_system="standard",
        highlight=False,
        soft_wrap=True,
    )
    render(report, console, now=NOW)
    return console.export_text(clear=False), console.export_text(styles=True)


def test_collect_reads_the_stall_the_skipped_batches_and_the_failing_record_from_the_lease_rows(report):
    (group,) = [g for g in report["groups"] if g["group"] == "event-sink"]
    leases = {lease["shard"]: lease for lease in group["leases"]}
    stalled, healthy, failing = (leases[f"shardId-00000000000{i}"] for i in range(3))
    assert stalled["stalled_since"] == NOW - 754 and stalled["stalled_cause"] == CAUSE
    assert stalled["stalled_sequence"] == STALLED_AT and stalled["stalls"] == 7
    assert [entry["start"] for entry in stalled["skipped_by_mapping"]] == [STALLED_AT, STALLED_AT[:-2] + "99"]
    assert healthy["stalled_since"] is None and healthy["skipped_by_mapping"] == [] and healthy["stalls"] == 0
    assert (failing["failed_attempts"], failing["last_error"]) == (2, "ValueError: bad order")
    assert failing["failed_sub_sequence"] == 3
    json.dumps(report)  # `status --json` prints it as it is


def test_a_stalled_shard_stands_out_with_its_cause_its_age_and_its_stalled_deliveries(report):
    text, styled = _shown(report)
    assert "consumer group event-sink  1 shard STALLED  2 batches to redrive" in text
    row = next(line for line in text.splitlines() if "shardId-000000000000" in line and "req-1" in line)
    assert " STALLED  12 min 34 s, 7 stalls" in row  # a badge, then the age
    assert "2 skipped by the mapping: redrive" in row
    assert " STALLED  shardId-000000000000 for 12 min 34 s" in text
    assert f"retrying from {STALLED_AT}" in text
    assert f"cause: {CAUSE}" in text  # whole, brackets and all (not taken for markup)
    assert "nothing is lost while the stream holds the records" in text
    # Styled: the cause in bold red, the STALLED badge white on red.
    assert re.search(r"\x1b\[1;31m" + re.escape(CAUSE), styled), "the cause in bold red"
    assert re.search(r"\x1b\[1;37;41m STALLED ", styled), "a white-on-red badge"
    healthy = next(line for line in text.splitlines() if "shardId-000000000001" in line and "req-1" in line)
    assert "ok" in healthy and "STALLED" not in healthy


def test_batches_the_mapping_skipped_say_a_redrive_is_owed_and_where_they_start(report):
    text, _ = _shown(report)
    assert "REDRIVE NEEDED shardId-000000000000: the mapping discarded 2 stalled batches" in text
    assert "`python -m local redrive event-sink` (README: Redriving what the mapping discarded)" in text
    assert f"from {STALLED_AT} (checkpoint {CHECKPOINT}/0), detected 10 min 0 s ago" in text
    assert "detected 1 min 0 s ago" in text


def test_a_failing_record_shows_its_attempts_and_last_error(report):
    text, _ = _shown(report)
    row = next(line for line in text.splitlines() if "shardId-000000000002" in line and "req-1" in line)
    assert "a record failed 2 times" in row
    assert (
        f"FAILING shardId-000000000002: record {STALLED_AT}/3 failed 2 time(s): ValueError: bad order" in text
    )


def test_ages_read_as_an_operator_reads_them():
    assert [age(s) for s in (-3, 0, 59, 60, 754, 3600, 4000, 90_000)] == [
        "0 s", "0 s", "59 s", "1 min 0 s", "12 min 34 s", "1 h 0 min", "1 h 6 min", "1 d 1 h",
    ]  # fmt: skip


def test_a_skipped_list_that_does_not_parse_is_still_a_redrive_owed_shown_as_it_is():
    lease = lease_of({"leaseKey": {"S": "shardId-000000000007"}, "skippedByMapping": {"S": "[oops"}})
    assert lease["skipped_by_mapping"] == [{"unreadable": "[oops"}] and lease["stalled_since"] is None
    report = {"kinesis": {"streams": {}}, "chaos": {}, "runtime": {"error": "not running"},
              "groups": [{"group": "g", "function": "f", "depths": {}, "leases": [lease]}]}  # fmt: skip
    text, _ = _shown(report)
    assert "REDRIVE NEEDED shardId-000000000007: the mapping discarded 1 stalled batch" in text
    assert "skippedByMapping (not as expected): [oops" in text  # the raw value, not taken for markup


def test_8_the_group_table_says_its_counts_are_the_mappings_kinesis_records(report):
    """A Lambda group's mapping counts Kinesis records (an aggregate is one), where a worker group
    counts user records: the column says which; a shard no mapping reads shows none (not 0)."""
    text, _ = _shown(report)
    header = next(line for line in text.splitlines() if "lease" in line and "health" in line)
    assert "Kinesis records" in header and "iterator age (ms)" in header
    row = next(line for line in text.splitlines() if "shardId-000000000001" in line and "req-1" in line)
    assert not re.search(r"\s0\s", row), row  # no runtime answering: no mapping figures, not zeros
