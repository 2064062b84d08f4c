"""Kinesis limits: the service defaults, what a stream may raise, and PUT payload units."""

from __future__ import annotations

import dataclasses

import pytest

from shardline.kinesis import (
    DEFAULT_LIMITS,
    MAX_HASH_KEY,
    MAX_MAX_RECORD_SIZE,
    MAX_PARTITION_KEY_LENGTH,
    MIN_HASH_KEY,
    MIN_MAX_RECORD_SIZE,
    MIN_PARTITION_KEY_LENGTH,
    PUT_PAYLOAD_UNIT,
    KiB,
    Limits,
    MiB,
    put_payload_units,
)


def test_constants_are_the_service_values():
    assert (KiB, MiB) == (1024, 1024 * 1024)
    assert (MIN_HASH_KEY, MAX_HASH_KEY) == (0, 2**128 - 1)
    assert (MIN_PARTITION_KEY_LENGTH, MAX_PARTITION_KEY_LENGTH) == (1, 256)
    assert (1024 * KiB, 10240 * KiB) == (MIN_MAX_RECORD_SIZE, MAX_MAX_RECORD_SIZE)
    assert PUT_PAYLOAD_UNIT == 25_600


def test_defaults_are_the_service_defaults():
    assert Limits() == DEFAULT_LIMITS
    assert DEFAULT_LIMITS.max_record_size == 1 * MiB
    assert DEFAULT_LIMITS.max_records_per_request == 500
    assert DEFAULT_LIMITS.max_request_size == 5 * MiB
    assert DEFAULT_LIMITS.shard_write_records_per_second == 1000
    assert DEFAULT_LIMITS.shard_write_bytes_per_second == 1 * MiB


def test_limits_are_immutable():
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT_LIMITS.max_record_size = 2 * MiB  # type: ignore[misc]


# -- max_record_size -------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1 * MiB, 1 * MiB + 1, 3 * MiB, 5 * MiB])
def test_max_record_size_up_to_the_request_size_is_accepted_with_default_request_size(size):
    assert Limits(max_record_size=size).max_record_size == size


@pytest.mark.parametrize("size", [1 * MiB, 2 * MiB, 5 * MiB, 5 * MiB + 1, 10 * MiB - 1, 10 * MiB])
def test_for_max_record_size_accepts_1_to_10_mib(size):
    limits = Limits.for_max_record_size(size)
    assert limits.max_record_size == size


@pytest.mark.parametrize("size", [0, -1, 1, 1 * MiB - 1, 10 * MiB + 1, 100 * MiB])
def test_max_record_size_outside_1_to_10_mib_is_rejected(size):
    with pytest.raises(ValueError, match="max_record_size"):
        Limits.for_max_record_size(size)
    with pytest.raises(ValueError, match="max_record_size"):
        Limits(max_record_size=size, max_request_size=max(5 * MiB, size))


@pytest.mark.parametrize(
    ("record_size", "request_size"),
    [(1 * MiB, 5 * MiB), (2 * MiB, 5 * MiB), (5 * MiB, 5 * MiB), (6 * MiB, 6 * MiB), (10 * MiB, 10 * MiB)],
)
def test_for_max_record_size_grows_the_request_cap_only_past_5_mib(record_size, request_size):
    assert Limits.for_max_record_size(record_size).max_request_size == request_size


def test_for_max_record_size_keeps_the_other_defaults():
    limits = Limits.for_max_record_size(10 * MiB)
    assert limits.max_records_per_request == DEFAULT_LIMITS.max_records_per_request
    assert limits.shard_write_records_per_second == DEFAULT_LIMITS.shard_write_records_per_second
    assert limits.shard_write_bytes_per_second == DEFAULT_LIMITS.shard_write_bytes_per_second


# -- max_request_size ------------------------------------------------------------------------


def test_request_size_smaller_than_one_record_is_rejected():
    with pytest.raises(ValueError, match="max_request_size"):
        Limits(max_request_size=1 * MiB - 1)
    with pytest.raises(ValueError, match="max_request_size"):
        Limits(max_record_size=6 * MiB)  # the default 5 MiB request could not hold one record


@pytest.mark.parametrize("request_size", [1 * MiB, 2 * MiB, 5 * MiB])
def test_request_size_between_one_record_and_5_mib_is_accepted(request_size):
    assert Limits(max_request_size=request_size).max_request_size == request_size


def test_request_size_over_5_mib_is_rejected_for_default_records():
    with pytest.raises(ValueError, match="max_request_size"):
        Limits(max_request_size=5 * MiB + 1)


def test_request_size_over_the_raised_record_size_is_rejected():
    assert Limits(max_record_size=8 * MiB, max_request_size=8 * MiB).max_request_size == 8 * MiB
    with pytest.raises(ValueError, match="max_request_size"):
        Limits(max_record_size=8 * MiB, max_request_size=8 * MiB + 1)


# -- records per request and rates -----------------------------------------------------------


@pytest.mark.parametrize("count", [1, 250, 500])
def test_records_per_request_within_1_to_500_is_accepted(count):
    assert Limits(max_records_per_request=count).max_records_per_request == count


@pytest.mark.parametrize("count", [0, -1, 501])
def test_records_per_request_outside_1_to_500_is_rejected(count):
    with pytest.raises(ValueError, match="max_records_per_request"):
        Limits(max_records_per_request=count)


@pytest.mark.parametrize(
    "rates",
    [
        {"shard_write_records_per_second": 0},
        {"shard_write_records_per_second": -1},
        {"shard_write_bytes_per_second": 0},
        {"shard_write_bytes_per_second": -1},
    ],
)
def test_non_positive_shard_rates_are_rejected(rates):
    with pytest.raises(ValueError, match="rates"):
        Limits(**rates)


def test_custom_positive_shard_rates_are_accepted():
    limits = Limits(shard_write_records_per_second=1, shard_write_bytes_per_second=1)
    assert (limits.shard_write_records_per_second, limits.shard_write_bytes_per_second) == (1, 1)


# -- PUT payload units -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("record_size", "units"),
    [
        (0, 1),
        (1, 1),
        (25_599, 1),
        (25_600, 1),
        (25_601, 2),
        (51_200, 2),
        (51_201, 3),
        (1 * MiB, 41),
        (10 * MiB, 410),
    ],
)
def test_put_payload_units_round_up_to_25_kib_with_a_minimum_of_one(record_size, units):
    assert put_payload_units(record_size) == units
