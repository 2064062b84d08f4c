"""User records: hash keys, sizes, and validation that names every problem by index and field."""

from __future__ import annotations

import hashlib

import pytest

from shardline.kinesis import (
    DEFAULT_LIMITS,
    MAX_HASH_KEY,
    InvalidRecord,
    Limits,
    MiB,
    RecordProblem,
    UserRecord,
    find_problems,
    hash_key,
    md5_hash_key,
    record_size,
    validate,
)
from shardline.kinesis._limits import ENVELOPE_OVERHEAD, envelope_size
from shardline.kinesis._records import partition_key_length
from shardline.kpl._identity import new_producer_id
from shardline.producer._buffered import BufferedRecord
from shardline.producer._lanes import Lanes, _Lane
from shardline.producer._reducer import single

MAX_RECORD = DEFAULT_LIMITS.max_record_size


def only_problem(record: object, limits: Limits = DEFAULT_LIMITS) -> RecordProblem:
    problems = find_problems([record], limits)
    assert len(problems) == 1, problems
    return problems[0]


def assert_valid(record: UserRecord, limits: Limits = DEFAULT_LIMITS) -> None:
    assert find_problems([record], limits) == []
    assert validate([record], limits) == [record]


# -- hash keys -------------------------------------------------------------------------------


def test_hash_key_of_ascii_key_is_big_endian_md5():
    # md5("a") = 0cc175b9c0f1b6a831c399e269772661
    assert hash_key(UserRecord("a", b"")) == 0x0CC175B9C0F1B6A831C399E269772661
    assert md5_hash_key("a") == int(hashlib.md5(b"a").hexdigest(), 16)


def test_hash_key_of_non_ascii_key_hashes_its_utf8_bytes():
    expected = int.from_bytes(hashlib.md5("clé-😀".encode()).digest(), "big")
    assert hash_key(UserRecord("clé-😀", b"data")) == expected
    assert expected != int.from_bytes(hashlib.md5("clé-😀".encode("utf-16")).digest(), "big")


def test_hash_key_does_not_depend_on_data():
    assert hash_key(UserRecord("user-1", b"x")) == hash_key(UserRecord("user-1", b"y" * 1000))


def test_hash_key_is_within_the_128_bit_range():
    for key in ["a", "b", "user-42", "é" * 256]:
        assert 0 <= hash_key(UserRecord(key, b"")) <= MAX_HASH_KEY


@pytest.mark.parametrize("explicit", ["0", "1", "12345678901234567890", str(MAX_HASH_KEY)])
def test_explicit_hash_key_overrides_the_partition_key(explicit):
    assert hash_key(UserRecord("a", b"", explicit)) == int(explicit)


def test_record_size_counts_data_plus_utf8_key_bytes():
    assert record_size(UserRecord("abc", b"12345")) == 8
    assert record_size(UserRecord("é😀", b"12345")) == 5 + 2 + 4
    assert record_size(UserRecord("k", b"", str(MAX_HASH_KEY))) == 1  # the hash key does not count


# -- valid batches ---------------------------------------------------------------------------


def test_valid_batch_is_returned_as_a_list():
    records = [UserRecord("a", b"1"), UserRecord("b", b"", "5"), UserRecord("a", b"x" * 100)]
    assert find_problems(records) == []
    assert validate(records) == records
    assert validate(iter(records)) == records


def test_empty_batch_is_valid():
    assert validate([]) == []
    assert find_problems([]) == []


# -- partition keys --------------------------------------------------------------------------


def test_empty_partition_key_is_rejected():
    problem = only_problem(UserRecord("", b"x"))
    assert (problem.index, problem.field) == (0, "partition_key")


def test_partition_key_of_256_characters_is_accepted():
    assert_valid(UserRecord("k" * 256, b"x"))


def test_partition_key_of_257_characters_is_rejected():
    problem = only_problem(UserRecord("k" * 257, b"x"))
    assert (problem.index, problem.field) == (0, "partition_key")
    assert "257" in problem.message


@pytest.mark.parametrize("char", ["é", "€", "\uffff"], ids=["2-byte", "3-byte", "last-bmp"])
def test_partition_key_length_counts_bmp_characters_not_bytes(char):
    assert_valid(UserRecord(char * 256, b"x"))
    assert only_problem(UserRecord(char * 257, b"x")).field == "partition_key"


def test_partition_key_length_counts_utf16_code_units_as_kinesis_does():
    # Kinesis (and kinesis-mock) measure a Java String: a character beyond U+FFFF counts 2.
    assert partition_key_length("k" * 256) == 256
    assert partition_key_length("😀" * 128) == 256
    assert partition_key_length("€" * 255 + "😀") == 257
    assert_valid(UserRecord("k" * 256, b"x"))
    assert_valid(UserRecord("😀" * 128, b"x"))
    assert_valid(UserRecord("€" * 254 + "😀", b"x"))  # 256 units


@pytest.mark.parametrize(
    ("key", "units"),
    [("€" * 255 + "😀", 257), ("😀" * 129, 258), ("😀" * 200, 400), ("𝄞" * 256, 512)],
    ids=["255-bmp-plus-emoji", "129-emoji", "200-emoji", "256-astral"],
)
def test_partition_key_over_256_utf16_code_units_is_rejected_naming_record_and_field(key, units):
    problem = only_problem(UserRecord(key, b"x"))
    assert (problem.index, problem.field) == (0, "partition_key")
    assert problem.message.endswith(f"got {units}")
    assert "UTF-16 code units" in problem.message
    with pytest.raises(InvalidRecord, match=r"^record 1: partition_key: must be 1 to 256 UTF-16 code units"):
        validate([UserRecord("ok", b""), UserRecord(key, b"x")])


def test_partition_key_with_lone_surrogates_is_measured_not_a_crash():
    assert partition_key_length("a\ud800b") == 3  # as Java counts it, though not encodable
    assert only_problem(UserRecord("\ud800" * 257, b"x")).message.endswith("got 257")
    assert only_problem(UserRecord("a\ud800b", b"x")).message == "is not encodable as UTF-8"


def test_single_character_partition_key_is_accepted():
    assert_valid(UserRecord("k", b""))


@pytest.mark.parametrize("bad_key", [None, b"key", 7, ["k"]], ids=["None", "bytes", "int", "list"])
def test_partition_key_that_is_not_a_str_is_rejected(bad_key):
    problem = only_problem(UserRecord(bad_key, b"x"))
    assert (problem.index, problem.field) == (0, "partition_key")
    assert type(bad_key).__name__ in problem.message


def test_partition_key_that_cannot_be_encoded_as_utf8_is_rejected():
    problem = only_problem(UserRecord("bad\ud800key", b"x"))
    assert (problem.index, problem.field) == (0, "partition_key")


# -- data ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad_data",
    ["text", bytearray(b"x"), None, memoryview(b"x"), 5],
    ids=["str", "bytearray", "None", "memoryview", "int"],
)
def test_data_that_is_not_bytes_is_rejected(bad_data):
    problem = only_problem(UserRecord("k", bad_data))
    assert (problem.index, problem.field) == (0, "data")
    assert type(bad_data).__name__ in problem.message


def test_empty_data_is_accepted():
    assert_valid(UserRecord("k", b""))


def largest_data(key: str, max_record: int = MAX_RECORD, record_id: str | None = None) -> int:
    """The most data bytes a record with `key` (and `record_id`) may hold: the stream's record
    size less the producer's envelope around it (a one-record aggregate carrying its ids)."""
    id_bytes = len(record_id) if record_id is not None else 0
    return max_record - envelope_size(0, len(key.encode()), id_bytes)


def test_record_exactly_at_the_size_limit_in_its_envelope_is_accepted():
    data = largest_data("key")
    assert data < MAX_RECORD - 3 - ENVELOPE_OVERHEAD  # the key counts twice: the aggregate's and its own
    assert_valid(UserRecord("key", bytes(data)))


def test_record_one_byte_over_the_size_limit_in_its_envelope_is_rejected():
    data = largest_data("key") + 1
    problem = only_problem(UserRecord("key", bytes(data)))
    assert (problem.index, problem.field) == (0, "data")
    assert (
        f"{data + 3} bytes" in problem.message
        and f"{MAX_RECORD + 1} in shardline's envelope" in problem.message
    )


def test_the_envelope_counts_the_record_id():
    record_id = "i" * 128
    data = largest_data("key", record_id=record_id)
    assert_valid(UserRecord("key", bytes(data), id=record_id))
    assert only_problem(UserRecord("key", bytes(data + 1), id=record_id)).field == "data"


def test_size_limit_counts_the_partition_key_in_utf8_bytes():
    key = "😀" * 10  # 10 characters, 40 bytes
    assert_valid(UserRecord(key, bytes(largest_data(key))))
    assert only_problem(UserRecord(key, bytes(largest_data(key) + 1))).field == "data"


def test_raised_record_size_limit_accepts_exactly_10_mib_in_its_envelope():
    limits = Limits.for_max_record_size(10 * MiB)
    assert_valid(UserRecord("k", bytes(largest_data("k", 10 * MiB))), limits)
    problem = only_problem(UserRecord("k", bytes(largest_data("k", 10 * MiB) + 1)), limits)
    assert (problem.index, problem.field) == (0, "data")


def test_the_envelope_bounds_the_one_record_aggregate_the_producer_sends():
    """The producer's largest envelope (longest lane and counters, a 39-digit explicit hash key,
    a 128-character id) is within `envelope_size`: a valid record always fits the stream."""
    lanes = Lanes(new_producer_id(), clock=lambda: 0.0)
    lanes._lanes["999999999999"] = state = _Lane()
    state.next = 2**64 - 1  # counter and floor of 16 hex digits
    key, record_id = "k" * 256, "i" * 128
    record = UserRecord(key, bytes(1000), str(MAX_HASH_KEY), id=record_id)
    member = BufferedRecord(record, None, 0, 0.0, 1.0)
    member.assign(record)
    kinesis_record = single(member, lanes, "999999999999")
    assert kinesis_record.aggregate_id.counter == 2**64 - 1
    assert kinesis_record.size <= envelope_size(1000, 256, 128)


def test_record_over_1_mib_is_valid_only_under_raised_limits():
    record = UserRecord("k", bytes(MiB))
    assert only_problem(record).field == "data"
    assert_valid(record, Limits.for_max_record_size(2 * MiB))


# -- explicit hash keys ----------------------------------------------------------------------


@pytest.mark.parametrize("explicit", ["0", "1", "9" * 38, str(MAX_HASH_KEY)])
def test_explicit_hash_key_within_range_is_accepted(explicit):
    assert_valid(UserRecord("k", b"x", explicit))


@pytest.mark.parametrize(
    "explicit",
    ["-1", "", "abc", "1.5", "1e3", "0x10", " 1", "1 ", "+1", "2**128", "١٢", "１２"],
    ids=[
        "negative",
        "empty",
        "letters",
        "decimal point",
        "exponent",
        "hex",
        "leading space",
        "trailing space",
        "plus sign",
        "power expression",
        "arabic-indic digits",
        "fullwidth digits",
    ],
)
def test_explicit_hash_key_that_is_not_a_decimal_integer_is_rejected(explicit):
    problem = only_problem(UserRecord("k", b"x", explicit))
    assert (problem.index, problem.field) == (0, "explicit_hash_key")


@pytest.mark.parametrize("explicit", [str(MAX_HASH_KEY + 1), str(2**129), "1" + "0" * 39])
def test_explicit_hash_key_over_the_128_bit_range_is_rejected(explicit):
    problem = only_problem(UserRecord("k", b"x", explicit))
    assert (problem.index, problem.field) == (0, "explicit_hash_key")


def test_explicit_hash_key_with_thousands_of_digits_is_a_problem_not_a_crash():
    # int() refuses strings over 4300 digits (CPython's int_max_str_digits); that must not escape.
    problem = only_problem(UserRecord("k", b"x", "1" * 5000))
    assert (problem.index, problem.field) == (0, "explicit_hash_key")


@pytest.mark.parametrize("explicit", ["007", "00", "0" * 39 + "1"])
def test_explicit_hash_key_with_leading_zeros_is_rejected(explicit):
    # Kinesis's HashKey pattern is ^(0|([1-9]\d{0,38}))$: the service would reject the request.
    problem = only_problem(UserRecord("k", b"x", explicit))
    assert (problem.index, problem.field) == (0, "explicit_hash_key")


@pytest.mark.parametrize("explicit", [5, b"5", 5.0], ids=["int", "bytes", "float"])
def test_explicit_hash_key_that_is_not_a_str_is_rejected(explicit):
    problem = only_problem(UserRecord("k", b"x", explicit))
    assert (problem.index, problem.field) == (0, "explicit_hash_key")
    assert type(explicit).__name__ in problem.message


# -- not a record ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "thing",
    [("k", b"x"), {"partition_key": "k", "data": b"x"}, None, "k", b"x"],
    ids=["tuple", "dict", "None", "str", "bytes"],
)
def test_object_that_is_not_a_user_record_is_rejected(thing):
    problem = only_problem(thing)
    assert (problem.index, problem.field) == (0, "record")
    assert type(thing).__name__ in problem.message


# -- reporting -------------------------------------------------------------------------------


BAD_BATCH = [
    UserRecord("ok", b"fine"),
    UserRecord("", b"x"),
    UserRecord("ok", b"fine", "7"),
    ("not", b"a record"),
    UserRecord("k" * 300, "not bytes", "-5"),
    UserRecord("ok", b"fine"),
]
BAD_BATCH_PROBLEMS = [
    (1, "partition_key"),
    (3, "record"),
    (4, "partition_key"),
    (4, "data"),
    (4, "explicit_hash_key"),
]


def test_find_problems_lists_every_problem_in_index_then_field_order():
    problems = find_problems(BAD_BATCH)
    assert [(p.index, p.field) for p in problems] == BAD_BATCH_PROBLEMS
    assert all(p.message for p in problems)


def test_validate_raises_invalid_record_listing_every_problem():
    with pytest.raises(InvalidRecord) as caught:
        validate(BAD_BATCH)
    error = caught.value
    assert [(p.index, p.field) for p in error.problems] == BAD_BATCH_PROBLEMS
    assert error.problems == tuple(find_problems(BAD_BATCH))
    assert (error.index, error.field) == (1, "partition_key")
    assert error.message == error.problems[0].message


def test_invalid_record_message_names_the_first_index_and_field_and_counts_the_rest():
    with pytest.raises(InvalidRecord) as caught:
        validate(BAD_BATCH)
    text = str(caught.value)
    assert text.startswith("record 1: partition_key: ")
    assert "(and 4 more)" in text


def test_invalid_record_with_one_problem_has_no_count():
    with pytest.raises(InvalidRecord) as caught:
        validate([UserRecord("a", b"x"), UserRecord("b", b"x", "x")])
    assert str(caught.value).startswith("record 1: explicit_hash_key: ")
    assert "more" not in str(caught.value)


def test_invalid_record_is_a_value_error():
    assert issubclass(InvalidRecord, ValueError)


def test_record_problem_str_names_index_and_field():
    problem = RecordProblem(12, "data", "must be bytes, got str")
    assert str(problem) == "record 12: data: must be bytes, got str"


def test_find_problems_reads_the_limits_it_is_given():
    record = UserRecord("k", bytes(3 * MiB))
    assert find_problems([record], Limits.for_max_record_size(4 * MiB)) == []
    assert [p.field for p in find_problems([record], Limits.for_max_record_size(2 * MiB))] == ["data"]
