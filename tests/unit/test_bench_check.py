"""`python -m bench --check` (issue 41, property 7): a miss or a fall cannot land unnoticed, and a
loaded machine does not flip the verdict (rows are judged on figures measured in the same run
against a peer). The check's logic on rows made here; its reading of the README's real table."""

from __future__ import annotations

import pytest

from bench import check
from bench.check import Published, published_rows
from bench.report import Row, Target

CONSUMER = "Consumer process, 10,000 user records in 25 aggregates, fresh (all handled)"
YARDSTICK = check.YARDSTICKS["Consumer process, 10,000 user records in 25 aggregates"]
POWERTOOLS = "Powertools BatchProcessor, Kinesis records"


def readme(*rows: str) -> str:
    return "\n".join(
        [
            "# x",
            "",
            "## Benchmarks",
            "",
            "| Measurement | shardline | Peer | Peer figure | shardline ÷ peer | Target | Met |",
            "|---|---:|---|---:|---:|---|---|",
            *rows,
            "",
            "after the table",
        ]
    )


def failed(rows: list[Row], text: str) -> list[str]:
    return [f.measurement for f in check.check(rows, published_rows(text)) if f.failed]


ENCODE = "| Encode, 100 B | 1.10 M/s | aiokpl | 488 k/s | 2.26× | ≥ 2× | yes |"
DECODE = "| Decode, 100 B | 859 k/s | aws-kinesis-agg | 439 k/s | 1.96× | ≥ 4× | **NO** |"
UNITS = "| PUT units | 4,600 | — | — | — | info | — |"
CONSUMER_ROWS = (
    f"| {CONSUMER} | 404 k/s | — | — | — | ≥ 300 k/s | yes |",
    f"| {YARDSTICK} | 404 k/s | {POWERTOOLS} | 166 k/s | 2.43× | info | — |",
)


def test_property_7_the_readme_table_is_read_with_its_figures() -> None:
    rows = published_rows(readme(ENCODE, DECODE, UNITS))
    assert rows[("Encode, 100 B", "aiokpl")] == Published("Encode, 100 B", "aiokpl", 1.1e6, 488e3, 2.26, True)
    assert rows[("Decode, 100 B", "aws-kinesis-agg")].met is False
    assert rows[("PUT units", None)].shardline == 4600 and rows[("PUT units", None)].met is None


def test_property_7_the_projects_readme_publishes_the_rows_the_check_scales_by() -> None:
    rows = published_rows(check.README.read_text(encoding="utf-8"))
    for prefix, yardstick in check.YARDSTICKS.items():
        assert any(name == yardstick and p.peer_value for (name, _), p in rows.items()), yardstick
        assert any(name.startswith(prefix) and p.shardline for (name, _), p in rows.items()), prefix


def test_property_7_a_target_met_in_the_readme_and_missed_now_fails() -> None:
    row = Row("Encode, 100 B", "rec/s", 900e3, "aiokpl", 488e3, Target("ratio", ">=", 2.0))  # 1.84×
    assert failed([row], readme(ENCODE)) == ["Encode, 100 B"]


@pytest.mark.parametrize(("ratio", "fails"), [(2.26 * 0.79, True), (2.26 * 0.85, False), (2.26 * 1.5, False)])
def test_property_7_a_fall_of_more_than_20_percent_fails(ratio: float, fails: bool) -> None:
    row = Row("Encode, 100 B", "rec/s", ratio * 100e3, "aiokpl", 100e3)  # informational: no target
    assert failed([row], readme(ENCODE)) == (["Encode, 100 B"] if fails else [])


def test_property_7_a_known_miss_fails_nothing_but_a_fall_from_it_does() -> None:
    target = Target("ratio", ">=", 4.0)
    same = Row("Decode, 100 B", "rec/s", 1.9 * 439e3, "aws-kinesis-agg", 439e3, target)
    lower = Row("Decode, 100 B", "rec/s", 1.4 * 439e3, "aws-kinesis-agg", 439e3, target)
    assert failed([same], readme(DECODE)) == []
    assert failed([lower], readme(DECODE)) == ["Decode, 100 B"]


def test_property_7_a_count_that_grows_fails_where_less_is_better() -> None:
    assert failed([Row("PUT units", "units/M", 6000)], readme(UNITS)) == ["PUT units"]
    assert failed([Row("PUT units", "units/M", 4000)], readme(UNITS)) == []


def consumer_run(mine: float, powertools: float) -> list[Row]:
    return [
        Row(CONSUMER, "rec/s", mine, target=Target("value", ">=", 300e3)),
        Row(YARDSTICK, "rec/s", mine, POWERTOOLS, powertools),
    ]


def test_property_7_a_loaded_machine_does_not_flip_a_rate_without_a_peer() -> None:
    # everything runs at half speed: the consumer's 202k/s reads as 404k/s on the README's machine
    assert failed(consumer_run(202e3, 83e3), readme(*CONSUMER_ROWS)) == []


def test_property_7_a_rate_that_falls_against_its_yardstick_fails() -> None:
    # the consumer at a third of its speed, Powertools as fast as ever: the regression issue 41 found
    assert failed(consumer_run(135e3, 166e3), readme(*CONSUMER_ROWS)) == [CONSUMER, YARDSTICK]


def test_property_7_a_row_the_readme_does_not_publish_fails() -> None:
    assert failed([Row("A new row", "ms", 1.0)], readme(ENCODE)) == ["A new row"]


def test_property_7_a_row_fails_only_if_it_fails_in_both_runs() -> None:
    text = readme(ENCODE)
    bad = check.check([Row("Encode, 100 B", "rec/s", 1.5 * 488e3, "aiokpl", 488e3)], published_rows(text))
    good = check.check([Row("Encode, 100 B", "rec/s", 2.3 * 488e3, "aiokpl", 488e3)], published_rows(text))
    assert [f.failed for f in check.confirmed(bad, good)] == [False]
    assert [f.failed for f in check.confirmed(bad, bad)] == [True]


def test_property_7_an_absolute_time_without_a_peer_is_printed_not_judged() -> None:
    text = readme("| Import, cached | 9.8 ms | — | — | — | ≤ 10 ms | yes |")
    row = Row("Import, cached", "ms", 30.0, target=Target("value", "<=", 10.0))
    (finding,) = check.check([row], published_rows(text))
    assert not finding.failed and "not judged" in finding.text
