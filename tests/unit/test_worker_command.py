"""`shardline worker`'s settings reach the consumer it builds: flags, or their environment variables."""

from __future__ import annotations

import argparse

import pytest

from shardline._worker_command import _consumer_of, parser


def parsed(environ: dict[str, str], argv: list[str]) -> argparse.Namespace:
    return parser(environ=environ).parse_args(["--group", "orders", "--lease-table", "leases", *argv])


def consumer(args: argparse.Namespace):
    return _consumer_of(lambda record: None, args, lambda service: object())


@pytest.mark.parametrize(
    ("environ", "argv", "expected"),
    [
        ({}, [], "fingerprint"),
        ({"FAILURE_DETAIL": "message"}, [], "message"),  # what WorkerGroup(failure_detail=) sets
        ({}, ["--failure-detail", "message"], "message"),
    ],
)
def test_6_the_worker_keeps_what_its_failure_detail_says_of_an_exception(environ, argv, expected):
    assert consumer(parsed(environ, argv)).settings.failure_detail == expected


def test_a_failure_detail_the_consumer_does_not_know_is_refused():
    with pytest.raises(ValueError, match="failure_detail must be 'fingerprint' or 'message'"):
        consumer(parsed({"FAILURE_DETAIL": "everything"}, []))
