"""The producer's HTTP contract: parsing, validation, the 4xx decisions and the result statuses."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from shardline.aws_lambda import (
    ApiSettings,
    StreamRoute,
    handle,
    is_unavailable,
    log_fields,
    parse_streams,
    producer_config,
    result_entry,
    results_response,
    settings_from_env,
)
from shardline.aws_lambda._environment import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_RECORDS_PER_REQUEST
from shardline.aws_lambda._http_records import to_user_record
from shardline.aws_lambda._http_response import MAX_LOGGED_SEQUENCES, is_stream_missing, written_by_shard
from shardline.errors import PERMANENT_ERROR_CODES, ConfigurationError
from shardline.kinesis import DEFAULT_LIMITS, MAX_HASH_KEY, Limits, MiB, UserRecord
from shardline.producer import Attempt, ProducerConfig, RecordResult

THROTTLED = "ProvisionedThroughputExceededException"
MISSING = "ResourceNotFoundException"
ROUTE = StreamRoute("orders", "orders-physical")
SETTINGS = ApiSettings(streams={"orders": ROUTE}, max_records_per_request=5, max_body_bytes=4096)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class Recorder:
    """A fake `put`: records what it was given and answers with canned results (all succeed by default)."""

    def __init__(self, results: list[RecordResult] | None = None) -> None:
        self.calls: list[tuple[StreamRoute, list[UserRecord]]] = []
        self.results = results

    def __call__(self, route: StreamRoute, records: list[UserRecord]) -> list[RecordResult]:
        self.calls.append((route, records))
        if self.results is not None:
            return self.results
        return [ok(f"{i}") for i in range(len(records))]


def ok(sequence: str = "1", sub: int | None = None, attempts: int = 1) -> RecordResult:
    history = tuple(Attempt(0.0, 0.01, False, THROTTLED, "slow down") for _ in range(attempts - 1))
    return RecordResult(
        True,
        shard_id="shardId-000000000000",
        sequence_number=sequence,
        sub_sequence_number=sub,
        attempts=(*history, Attempt(0.0, 0.01, True)),
    )


def failed(*codes: str) -> RecordResult:
    """A failed result whose attempts had `codes`; the last code is the result's."""
    attempts = tuple(
        Attempt(0.0, 0.0 if code == "Expired" else 0.01, False, code, f"{code}!") for code in codes
    )
    return RecordResult(False, error_code=codes[-1], error_message=f"{codes[-1]}!", attempts=attempts)


def call(
    body: str | None,
    content_type: str | None = "application/json",
    *,
    route: str = "orders",
    settings: ApiSettings = SETTINGS,
    put: Recorder | None = None,
    is_base64_encoded: bool = False,
):
    put = put if put is not None else Recorder()
    response = handle(
        route,
        body,
        content_type=content_type,
        is_base64_encoded=is_base64_encoded,
        settings=settings,
        put=put,
    )
    return response, put


def json_body(*records: Any) -> str:
    return json.dumps({"records": list(records)})


def errors(response) -> list[tuple[int, str]]:
    return [(error["index"], error["field"]) for error in response.body["errors"]]


# -- valid requests ----------------------------------------------------------------------------


def test_json_body_with_data_json_and_explicit_hash_key_becomes_user_records():
    body = json_body(
        {"data": b64(b"\x00\x01binary\xff"), "partitionKey": "user-1"},
        {"json": {"id": 7, "name": "clé", "tags": [1, 2.5, None, True]}, "partitionKey": "user-2"},
        {"data": b64(b"x"), "partitionKey": "user-3", "explicitHashKey": str(MAX_HASH_KEY)},
        {"json": "text", "partitionKey": "p", "explicitHashKey": None},
    )
    response, put = call(body)

    assert response.status == 200
    (route, records), *_ = put.calls
    assert route is ROUTE
    assert records == [
        UserRecord("user-1", b"\x00\x01binary\xff"),
        UserRecord("user-2", '{"id":7,"name":"clé","tags":[1,2.5,null,true]}'.encode()),
        UserRecord("user-3", b"x", str(MAX_HASH_KEY)),
        UserRecord("p", b'"text"'),
    ]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, b"null"),
        (0, b"0"),
        (False, b"false"),
        ([], b"[]"),
        ({}, b"{}"),
        ("", b'""'),
        ("😀", '"😀"'.encode()),
    ],
)
def test_any_json_value_is_serialized_compactly_as_utf8(value, expected):
    record, problems = to_user_record(0, {"json": value, "partitionKey": "k"})
    assert problems == [] and record == UserRecord("k", expected)


def test_empty_data_is_a_valid_record():
    record, problems = to_user_record(0, {"data": "", "partitionKey": "k"})
    assert problems == [] and record == UserRecord("k", b"")


def test_ndjson_body_has_one_record_per_line_and_ignores_blank_lines():
    lines = [
        json.dumps({"data": b64(b"one"), "partitionKey": "a"}),
        "",
        json.dumps({"json": [1, 2], "partitionKey": "b", "explicitHashKey": "42"}) + "\r",
        "   ",
        json.dumps({"data": b64(b"three"), "partitionKey": "c"}),
        "",
    ]
    response, put = call("\n".join(lines), "application/x-ndjson")

    assert response.status == 200
    assert put.calls[0][1] == [
        UserRecord("a", b"one"),
        UserRecord("b", b"[1,2]", "42"),
        UserRecord("c", b"three"),
    ]


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "Application/JSON",
        "application/json; charset=utf-8",
        'application/json;charset="UTF-8"',
        "application/json; charset=utf8; foo=bar",
    ],
)
def test_json_content_types_with_utf8_or_no_charset_are_accepted(content_type):
    response, _ = call(json_body({"data": "", "partitionKey": "k"}), content_type)
    assert response.status == 200


def test_base64_encoded_body_is_decoded():
    body = base64.b64encode(json_body({"data": b64(b"hi"), "partitionKey": "k"}).encode()).decode()
    response, put = call(body, is_base64_encoded=True)
    assert response.status == 200
    assert put.calls[0][1] == [UserRecord("k", b"hi")]


def test_records_at_the_route_limit_of_a_larger_stream_are_valid():
    big = StreamRoute("big", "big-physical", Limits.for_max_record_size(2 * MiB))
    record, problems = to_user_record(0, {"data": b64(b"x" * (MiB + 1)), "partitionKey": "k"}, big.limits)
    assert problems == [] and record is not None
    _, problems = to_user_record(0, {"data": b64(b"x" * (MiB + 1)), "partitionKey": "k"}, DEFAULT_LIMITS)
    assert [(p.field, p.index) for p in problems] == [("data", 0)]


# -- invalid records: 400, every problem, nothing sent -----------------------------------------


@pytest.mark.parametrize(
    ("record", "field", "message_part"),
    [
        ([1, 2], "record", "JSON object, got array"),
        ("text", "record", "JSON object, got string"),
        (None, "record", "got null"),
        ({"partitionKey": "k"}, "data", "is required"),
        ({"data": "", "json": 1, "partitionKey": "k"}, "data", "not both"),
        ({"data": "not base64!", "partitionKey": "k"}, "data", "not valid base64"),
        ({"data": "QQ", "partitionKey": "k"}, "data", "not valid base64"),  # missing padding
        ({"data": 12, "partitionKey": "k"}, "data", "base64 string, got number"),
        ({"data": None, "partitionKey": "k"}, "data", "got null"),
        ({"json": "\ud800", "partitionKey": "k"}, "json", "not valid Unicode"),
        ({"data": ""}, "partitionKey", "is required"),
        ({"data": "", "partitionKey": None}, "partitionKey", "is required"),
        ({"data": "", "partitionKey": 5}, "partitionKey", "must be a string, got number"),
        ({"data": "", "partitionKey": ["k"]}, "partitionKey", "got array"),
        ({"data": "", "partitionKey": ""}, "partitionKey", "1 to 256 UTF-16 code units"),
        ({"data": "", "partitionKey": "😀" * 129}, "partitionKey", "got 258"),
        ({"data": "", "partitionKey": "k" * 257}, "partitionKey", "got 257"),
        ({"data": "", "partitionKey": "\udc00"}, "partitionKey", "UTF-8"),
        ({"data": "", "partitionKey": "k", "explicitHashKey": 5}, "explicitHashKey", "got number"),
        ({"data": "", "partitionKey": "k", "explicitHashKey": "007"}, "explicitHashKey", "leading zeros"),
        ({"data": "", "partitionKey": "k", "explicitHashKey": "-1"}, "explicitHashKey", "decimal integer"),
        ({"data": "", "partitionKey": "k", "explicitHashKey": "abc"}, "explicitHashKey", "decimal integer"),
        ({"data": "", "partitionKey": "k", "explicitHashKey": str(2**128)}, "explicitHashKey", "2**128-1"),
        ({"data": b64(b"x" * MiB), "partitionKey": "k"}, "data", "at most 1048576"),
        ({"json": "x" * MiB, "partitionKey": "k"}, "json", "at most 1048576"),
        ({"data": "", "partitionKey": "k", "partition_key": "k"}, "partition_key", "not a known field"),
    ],
)
def test_each_invalid_record_is_named_by_index_and_field_and_nothing_is_sent(record, field, message_part):
    good = {"data": b64(b"fine"), "partitionKey": "ok"}
    response, put = call(json_body(good, good, record), settings=ApiSettings(streams={"orders": ROUTE}))

    assert response.status == 400
    assert put.calls == []
    assert response.body["errors"] == [
        {"index": 2, "field": field, "message": response.body["errors"][0]["message"]}
    ]
    assert message_part in response.body["errors"][0]["message"]
    assert "nothing was written" in response.body["message"]


def test_every_problem_of_every_record_is_reported_in_order():
    response, put = call(
        json_body(
            {"data": "!!", "partitionKey": "", "explicitHashKey": "01"},
            {"data": b64(b"ok"), "partitionKey": "fine"},
            {"json": 1, "partitionKey": 3},
            7,
        ),
        settings=ApiSettings(streams={"orders": ROUTE}),
    )

    assert response.status == 400 and put.calls == []
    assert errors(response) == [
        (0, "data"),
        (0, "partitionKey"),
        (0, "explicitHashKey"),
        (2, "partitionKey"),
        (3, "record"),
    ]
    assert response.body["message"] == "3 invalid records; nothing was written"


def test_a_json_number_beyond_float_range_is_a_problem_of_the_json_field():
    response, put = call('{"records": [{"json": {"n": 1e400}, "partitionKey": "k"}]}')
    assert response.status == 400 and put.calls == []
    assert response.body["errors"] == [
        {"index": 0, "field": "json", "message": "holds a number too large for a float"}
    ]


def test_partition_key_length_is_counted_in_utf16_code_units_as_kinesis_counts_it():
    response, put = call(
        json_body({"data": "", "partitionKey": "😀" * 128}, {"data": "", "partitionKey": "k" * 256})
    )
    assert response.status == 200 and len(put.calls) == 1
    response, put = call(json_body({"data": "", "partitionKey": "é" * 255 + "😀"}))
    assert response.status == 400 and put.calls == []
    (error,) = response.body["errors"]
    assert (error["index"], error["field"]) == (0, "partitionKey")
    assert error["message"].endswith("got 257")


def test_a_key_problem_is_reported_even_when_the_payload_is_broken():
    _, problems = to_user_record(4, {"data": "%%", "partitionKey": "k" * 300})
    assert [(p.index, p.field) for p in problems] == [(4, "data"), (4, "partitionKey")]


def test_messages_never_echo_payloads_or_keys():
    secret = "s3cr3t-value"
    response, _ = call(
        json_body(
            {"data": secret + "!", "partitionKey": secret * 30},
            {"json": secret * 100000, "partitionKey": secret},
            {"data": "", "partitionKey": secret, "explicitHashKey": secret},
        ),
        settings=ApiSettings(streams={"orders": ROUTE}, max_body_bytes=DEFAULT_MAX_BODY_BYTES),
    )
    assert response.status == 400 and len(response.body["errors"]) == 4
    assert secret not in response.json()


def test_ndjson_record_problems_are_indexed_by_record_not_by_line():
    lines = [json.dumps({"data": "", "partitionKey": "a"}), "", json.dumps({"data": "", "partitionKey": ""})]
    response, put = call("\n".join(lines), "application/x-ndjson")
    assert response.status == 400 and put.calls == []
    assert errors(response) == [(1, "partitionKey")]


# -- malformed bodies: 400 ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message_part"),
    [
        ("{", "not valid JSON"),
        ("", "not valid JSON"),
        (None, "not valid JSON"),
        ('{"records": [NaN]}', "not valid JSON"),
        ('{"records": [], }', "not valid JSON"),
        ("[" * 100000 + "]" * 100000, "nested too deeply"),
        ("[]", '"records" array'),
        ('{"records": {}}', '"records" array'),
        ('{"items": []}', '"records" array'),
        ('{"records": [], "extra": 1}', "unknown top-level fields ['extra']"),
        (
            '{"records": [{"data": "", "partitionKey": "k"}], "extra": 1}',
            "unknown top-level fields ['extra']",
        ),
        ('{"records": []}', "no records"),
    ],
)
def test_malformed_json_bodies_are_rejected_with_400(body, message_part):
    response, put = call(body, settings=ApiSettings(streams={"orders": ROUTE}))
    assert response.status == 400 and put.calls == []
    assert message_part in response.body["message"]
    assert "errors" not in response.body


@pytest.mark.parametrize(
    ("body", "message_part"),
    [
        ('{"data": "", "partitionKey": "k"}\n{oops', "line 2 is not valid JSON"),
        ("\n\n", "no records"),
        ("", "no records"),
        ('{"data": "", "partitionKey": "k"}\n\n[\n', "line 3 is not valid JSON"),
    ],
)
def test_malformed_ndjson_bodies_name_the_line(body, message_part):
    response, put = call(body, "application/x-ndjson")
    assert response.status == 400 and put.calls == []
    assert message_part in response.body["message"]


def test_ndjson_line_that_is_not_an_object_is_a_record_problem():
    response, _ = call('{"data": "", "partitionKey": "k"}\n[1]\n"x"', "application/x-ndjson")
    assert response.status == 400
    assert errors(response) == [(1, "record"), (2, "record")]


def test_invalid_base64_or_utf8_bodies_are_rejected_with_400():
    response, _ = call("%%%", is_base64_encoded=True)
    assert response.status == 400 and "not valid base64" in response.body["message"]
    response, _ = call(base64.b64encode(b'{"records": ["\xff"]}').decode(), is_base64_encoded=True)
    assert response.status == 400 and "not valid UTF-8" in response.body["message"]


# -- 404, 415, 413 -----------------------------------------------------------------------------


def test_unknown_stream_is_404_before_anything_else():
    response, put = call("not even json", "text/plain", route="nope")
    assert response.status == 404 and put.calls == []
    assert response.body == {"message": "unknown stream 'nope'"}


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "",
        "text/plain",
        "application/xml",
        "application/jsonl",
        "application/json; charset=latin-1",
        "json",
    ],
)
def test_other_content_types_are_415(content_type):
    response, put = call(json_body({"data": "", "partitionKey": "k"}), content_type)
    assert response.status == 415 and put.calls == []
    assert "application/json" in response.body["message"]


def test_wrong_content_type_is_415_even_with_a_malformed_body():
    response, _ = call("{", "text/csv")
    assert response.status == 415


def test_too_many_json_records_is_413():
    record = {"data": "", "partitionKey": "k"}
    response, put = call(json_body(*[record] * 5))
    assert response.status == 200
    response, put = call(json_body(*[record] * 6))
    assert response.status == 413 and put.calls == []
    assert response.body["message"] == "the request holds 6 records; at most 5 are accepted"


def test_too_many_ndjson_lines_is_413_before_parsing_them():
    response, put = call("\n".join(["{broken"] * 6), "application/x-ndjson")
    assert response.status == 413 and put.calls == []


def test_too_large_body_is_413_before_parsing_it():
    body = "{" + " " * 4095
    response, _ = call(body[:4095] + "}")  # 4096 bytes: parsed (and malformed), not oversize
    assert response.status == 400
    response, put = call(body + "}")
    assert response.status == 413 and put.calls == []
    assert response.body["message"] == (
        "the body takes 4097 bytes in the Lambda event (JSON-escaped, as API Gateway passes it); "
        "at most 4096 are accepted: send fewer records per request"
    )


def test_body_size_counts_utf8_bytes_not_characters():
    response, _ = call("é" * 2049)  # 2049 characters, 4098 bytes
    assert response.status == 413


def test_too_large_base64_body_is_413():
    body = base64.b64encode(b" " * 4200).decode()
    response, _ = call(body, is_base64_encoded=True)
    assert response.status == 413


# -- results: 200, 207, 503 --------------------------------------------------------------------


def test_all_written_is_200_with_positions_in_request_order():
    results = [ok("100", sub=0), ok("100", sub=1, attempts=3), ok("101")]
    response = results_response(results)
    assert response.status == 200 and dict(response.headers) == {}
    assert response.body == {
        "failedRecordCount": 0,
        "records": [
            {
                "shardId": "shardId-000000000000",
                "sequenceNumber": "100",
                "subSequenceNumber": 0,
                "attempts": 1,
            },
            {
                "shardId": "shardId-000000000000",
                "sequenceNumber": "100",
                "subSequenceNumber": 1,
                "attempts": 3,
            },
            {
                "shardId": "shardId-000000000000",
                "sequenceNumber": "101",
                "subSequenceNumber": None,
                "attempts": 1,
            },
        ],
    }


def test_some_failed_is_207_and_names_exactly_the_failed_records():
    results = [ok("1"), failed(THROTTLED, THROTTLED, "Expired"), ok("2"), failed("InternalFailure")]
    response = results_response(results)
    assert response.status == 207 and "Retry-After" not in response.headers
    assert response.body["failedRecordCount"] == 2
    assert [i for i, entry in enumerate(response.body["records"]) if "errorCode" in entry] == [1, 3]
    assert response.body["records"][1] == {
        "errorCode": "Expired",
        "errorMessage": "the record's shard was over its write limit until the deadline (2 attempts)",
        "attempts": 2,
        "written": False,
        "retry": "resend",
    }
    assert response.body["records"][3] == {
        "errorCode": "InternalFailure",
        "errorMessage": "the stream could not take the record (InternalFailure)",
        "attempts": 1,
        "written": False,
        "retry": "resend",
    }


@pytest.mark.parametrize(
    "results",
    [
        [failed(THROTTLED), failed(THROTTLED, THROTTLED)],
        [failed(THROTTLED, "Expired"), failed("ThrottlingException")],
        [failed("Expired")],  # time ran out before it could be sent at all
        [failed("KMSThrottlingException"), failed("InternalFailure", "Expired")],
    ],
)
def test_nothing_written_because_throttled_or_unavailable_is_503_with_retry_after(results):
    response = results_response(results)
    assert response.status == 503
    assert response.headers == {"Retry-After": "1"}
    assert response.body["failedRecordCount"] == len(results)
    assert all("errorCode" in entry for entry in response.body["records"])


@pytest.mark.parametrize(
    "results",
    [
        [failed(THROTTLED), failed("AccessDeniedException")],
        [failed(MISSING), failed(THROTTLED)],  # not all missing, not all unavailable
        [failed("Wrong Shard", "Expired")],
        [failed("RecordCountMismatch")],
        [failed("PartitionerError")],
    ],
)
def test_nothing_written_for_other_reasons_is_207(results):
    assert results_response(results).status == 207


def test_a_stream_that_does_not_exist_is_404_naming_it_without_retry_after():
    # Kinesis fails the whole request with ResourceNotFoundException: the code of every record.
    put = Recorder([failed(MISSING), failed(MISSING)])
    response, put = call(
        json_body({"data": "", "partitionKey": "a"}, {"json": 1, "partitionKey": "b"}), put=put
    )

    assert len(put.calls) == 1
    assert response.status == 404
    assert "Retry-After" not in response.headers
    assert response.body == {
        "message": "stream 'orders' (Kinesis stream 'orders-physical') does not exist; nothing was written"
    }
    assert log_fields(response) == {"status": 404, "reason": response.body["message"]}


def test_a_stream_that_does_not_exist_is_named_once_when_route_and_stream_share_a_name():
    same = StreamRoute("events", "events")
    response = results_response([failed(MISSING)], route=same)
    assert response.body == {"message": "stream 'events' does not exist; nothing was written"}


def test_records_that_expired_after_finding_no_stream_are_404_too():
    assert results_response([failed(MISSING, "Expired"), failed(MISSING)]).status == 404
    assert results_response([failed("Expired")]).status == 503, "no attempt: time ran out, not the stream"


def test_a_missing_stream_is_a_permanent_error_code_not_an_unavailable_one():
    assert MISSING in PERMANENT_ERROR_CODES, "the producer must fail it at once, not retry it"
    assert is_stream_missing(failed(MISSING)) and not is_unavailable(failed(MISSING))
    assert not is_stream_missing(failed(THROTTLED)) and not is_stream_missing(ok())


def test_one_success_among_throttles_is_207():
    assert results_response([failed(THROTTLED), ok()]).status == 207


def test_retry_after_is_configurable():
    assert results_response([failed(THROTTLED)], retry_after=5).headers == {"Retry-After": "5"}


def test_attempts_count_trips_to_kinesis_not_decisions():
    assert result_entry(failed("Expired"))["attempts"] == 0
    assert result_entry(failed(THROTTLED, THROTTLED, "Expired"))["attempts"] == 2
    assert result_entry(ok(attempts=4))["attempts"] == 4


def test_is_unavailable_is_false_for_success():
    assert not is_unavailable(ok())


def test_handle_sends_valid_records_and_shapes_the_results():
    put = Recorder([ok("9"), failed(THROTTLED, "Expired")])
    response, put = call(
        json_body({"data": "", "partitionKey": "a"}, {"json": 1, "partitionKey": "b"}), put=put
    )
    assert response.status == 207
    assert response.body["failedRecordCount"] == 1
    assert len(put.calls) == 1


def test_response_json_is_compact():
    response = results_response([ok("1")])
    assert json.loads(response.json()) == response.body
    assert ", " not in response.json()


def test_log_fields_carry_counts_and_codes_not_payloads():
    fields = log_fields(results_response([ok(), failed(THROTTLED, "Expired"), failed("Expired")]))
    assert fields == {
        "status": 207,
        "records": 3,
        "failedRecordCount": 2,
        "errorCodes": {"Expired": 2},
        "written": {"shardId-000000000000": {"records": 1, "aggregates": 1, "sequenceNumbers": ["1"]}},
    }
    response, _ = call(json_body({"data": "", "partitionKey": ""}))
    assert log_fields(response) == {
        "status": 400,
        "reason": "1 invalid record; nothing was written",
        "errors": [
            {
                "index": 0,
                "field": "partitionKey",
                "message": "must be 1 to 256 UTF-16 code units (a character beyond U+FFFF, such as an emoji, "
                "counts as 2), got 0",
            }
        ],
        "errorCount": 1,
    }
    unsupported, _ = call("{}", "text/plain")
    assert log_fields(unsupported) == {"status": 415, "reason": unsupported.body["message"]}


def test_3_the_log_lists_sequence_numbers_per_shard_and_bounds_them():
    entries = [{"shardId": "s1", "sequenceNumber": str(n)} for n in (30, 4, 4)] + [{"errorCode": "X"}]
    assert written_by_shard(entries) == {
        "s1": {"records": 3, "aggregates": 2, "sequenceNumbers": ["4", "30"]}
    }
    many = [{"shardId": "s2", "sequenceNumber": str(n)} for n in range(MAX_LOGGED_SEQUENCES + 1, 0, -1)]
    assert written_by_shard(many)["s2"] == {
        "records": MAX_LOGGED_SEQUENCES + 1,
        "aggregates": MAX_LOGGED_SEQUENCES + 1,
        "sequenceNumbers": ["1", str(MAX_LOGGED_SEQUENCES + 1)],
    }


# -- configuration -----------------------------------------------------------------------------


def test_settings_default_when_only_streams_are_set():
    settings = settings_from_env({"SHARDLINE_STREAMS": '{"orders": {"streamName": "orders-prod"}}'})
    assert settings == ApiSettings(
        streams={"orders": StreamRoute("orders", "orders-prod", DEFAULT_LIMITS)},
        max_records_per_request=DEFAULT_MAX_RECORDS_PER_REQUEST,
        max_body_bytes=DEFAULT_MAX_BODY_BYTES,
    )
    assert (DEFAULT_MAX_RECORDS_PER_REQUEST, DEFAULT_MAX_BODY_BYTES) == (500, 6_000_000)


def test_settings_read_every_variable():
    settings = settings_from_env(
        {
            "SHARDLINE_STREAMS": json.dumps(
                {"a": {"streamName": "a-1", "maxRecordSize": 2 * MiB}, "b": {"streamName": "b-1"}}
            ),
            "MAX_RECORDS_PER_REQUEST": "100",
            "MAX_BODY_BYTES": " 1000 ",
        }
    )
    assert settings.streams["a"] == StreamRoute("a", "a-1", Limits.for_max_record_size(2 * MiB))
    assert settings.streams["b"].stream_name == "b-1"
    assert (settings.max_records_per_request, settings.max_body_bytes) == (100, 1000)


def test_settings_come_from_the_process_environment_when_called(monkeypatch):
    monkeypatch.setenv("SHARDLINE_STREAMS", '{"x": {"streamName": "y"}}')
    monkeypatch.setenv("MAX_RECORDS_PER_REQUEST", "7")
    assert settings_from_env().max_records_per_request == 7
    assert settings_from_env().streams["x"].stream_name == "y"


def test_no_streams_configured_means_every_stream_is_unknown():
    assert settings_from_env({}).streams == {}
    assert parse_streams("  ") == {}


@pytest.mark.parametrize(
    "text",
    [
        "{",
        "[]",
        '{"a": "stream"}',
        '{"a": {}}',
        '{"a": {"streamName": ""}}',
        '{"a": {"streamName": 1}}',
        '{"a": {"streamName": "s", "maxRecordSize": "1MiB"}}',
        '{"a": {"streamName": "s", "maxRecordSize": true}}',
        '{"a": {"streamName": "s", "maxRecordSize": 100}}',
        '{"a": {"streamName": "s", "maxRecordSize": 20971520}}',
        '{"a": {"streamName": "s", "shards": 2}}',
    ],
)
def test_bad_stream_configuration_raises(text):
    with pytest.raises(ConfigurationError):
        parse_streams(text)


@pytest.mark.parametrize(("name", "value"), [("MAX_RECORDS_PER_REQUEST", "many"), ("MAX_BODY_BYTES", "0")])
def test_bad_bounds_raise(name, value):
    with pytest.raises(ConfigurationError, match=name):
        settings_from_env({name: value})


def test_producer_config_follows_the_stream_limits():
    assert producer_config(ROUTE, None) == ProducerConfig()
    assert producer_config(ROUTE).throttled_give_up == settings_from_env({}).throttled_give_up_seconds == 3
    big = producer_config(StreamRoute("b", "b", Limits.for_max_record_size(10 * MiB)))
    assert big.limits.max_record_size == 10 * MiB and big.collection_max_size == 10 * MiB


# -- identity: record ids and Idempotency-Key -----------------------------------------------------


def unconfirmed(*codes: str) -> RecordResult:
    """A failed result some of whose copies went unanswered: a copy may be in the stream."""
    return failed(*codes)._replace(unconfirmed=True)


def test_a_record_id_travels_to_the_producer_and_comes_back_in_its_entry():
    body = json_body(
        {"data": "", "partitionKey": "a", "id": "order-1"},
        {"data": "", "partitionKey": "b"},
        {"json": 1, "partitionKey": "c", "id": "x" * 128},
    )
    put = Recorder([ok("1"), ok("2"), failed("InternalFailure")])
    response, put = call(body, put=put)

    assert [record.id for record in put.calls[0][1]] == ["order-1", None, "x" * 128]
    assert response.status == 207
    assert [entry.get("id") for entry in response.body["records"]] == ["order-1", None, "x" * 128]
    assert response.body["records"][0]["sequenceNumber"] == "1"


def test_idempotency_key_names_every_record_without_an_id_by_its_index():
    body = json_body(
        {"data": "", "partitionKey": "a"},
        {"data": "", "partitionKey": "b", "id": "mine"},
        {"data": "", "partitionKey": "c", "id": None},
    )
    response = handle(
        "orders", body, content_type="application/json", is_base64_encoded=False,
        settings=SETTINGS, put=(put := Recorder()), idempotency_key="req-7f3a",
    )  # fmt: skip

    assert response.status == 200
    assert [record.id for record in put.calls[0][1]] == ["req-7f3a:0", "mine", "req-7f3a:2"]
    assert [entry["id"] for entry in response.body["records"]] == ["req-7f3a:0", "mine", "req-7f3a:2"]


def test_a_request_posted_again_with_the_same_key_carries_the_same_ids():
    body = json_body(*[{"data": b64(bytes([i])), "partitionKey": f"k{i}"} for i in range(3)])
    ids = []
    for _ in range(2):
        _, put = call_with_key(body, "same")
        ids.append([record.id for record in put.calls[0][1]])
    assert ids[0] == ids[1] == ["same:0", "same:1", "same:2"]


def call_with_key(body: str, key: Any, put: Recorder | None = None, settings: ApiSettings = SETTINGS):
    put = put if put is not None else Recorder()
    response = handle(
        "orders", body, content_type="application/json", is_base64_encoded=False,
        settings=settings, put=put, idempotency_key=key,
    )  # fmt: skip
    return response, put


@pytest.mark.parametrize(
    ("key", "message_part"),
    [
        ("", "1 to 120 visible ASCII"),
        ("has space", "1 to 120 visible ASCII"),
        ("k" * 121, "got 121 characters"),
        ("clé", "with others"),
        ("tab\there", "with others"),
        (["one", "two"], "give one Idempotency-Key header, not 2"),
    ],
)
def test_a_bad_idempotency_key_is_400_naming_the_header_and_nothing_is_sent(key, message_part):
    response, put = call_with_key(json_body({"data": "", "partitionKey": "k"}), key)
    assert response.status == 400 and put.calls == []
    assert response.body["header"] == "Idempotency-Key"
    assert message_part in response.body["message"]


def test_the_longest_key_leaves_room_for_any_index():
    records = [{"data": "", "partitionKey": "k"}] * 5
    response, put = call_with_key(json_body(*records), "k" * 120)
    assert response.status == 200
    assert put.calls[0][1][-1].id == "k" * 120 + ":4"
    response, _ = call_with_key(json_body(*records), ["same", "same"])  # one value, repeated
    assert response.status == 200


@pytest.mark.parametrize(
    ("record_id", "message_part"),
    [
        ("", "1 to 128 visible ASCII"),
        ("a b", "1 to 128 visible ASCII"),
        ("é", "1 to 128 visible ASCII"),
        ("x" * 129, "1 to 128 visible ASCII"),
        (7, "must be a string, got number"),
        (["a"], "must be a string, got array"),
    ],
)
def test_an_invalid_record_id_is_400_naming_the_id_field(record_id, message_part):
    good = {"data": "", "partitionKey": "ok"}
    response, put = call(json_body(good, {"data": "", "partitionKey": "k", "id": record_id}))
    assert response.status == 400 and put.calls == []
    assert errors(response) == [(1, "id")]
    assert message_part in response.body["errors"][0]["message"]


def test_two_records_with_one_id_are_400_naming_both_indexes():
    body = json_body(
        {"data": "", "partitionKey": "a", "id": "dup"},
        {"data": "", "partitionKey": "b", "id": "other"},
        {"data": "", "partitionKey": "c", "id": "dup"},
    )
    response, put = call(body)
    assert response.status == 400 and put.calls == []
    assert response.body["errors"] == [{"index": 2, "field": "id", "message": "is the id of record 0 too"}]


def test_property_2_an_own_id_that_equals_a_derived_one_is_another_identity():
    # Issue 39: derived ids live in their own namespace (`sl.k`), so an explicit `key:0` beside the
    # derived `key:0` is no duplicate; before, it was refused as one (they were one identity).
    body = json_body({"data": "", "partitionKey": "a"}, {"data": "", "partitionKey": "b", "id": "key:0"})
    response, put = call_with_key(body, "key")
    assert response.status == 200, response.body
    [(_, records)] = put.calls
    assert [(r.id, r.id_derived) for r in records] == [("key:0", True), ("key:0", False)]
    # Two explicit ids, or two derived ones, that are equal are still one identity twice: refused.
    body = json_body(
        {"data": "", "partitionKey": "a", "id": "x"}, {"data": "", "partitionKey": "b", "id": "x"}
    )
    response, put = call_with_key(body, "key")
    assert response.status == 400 and put.calls == []
    assert response.body["errors"] == [{"index": 1, "field": "id", "message": "is the id of record 0 too"}]


def test_an_id_counts_toward_the_record_size():
    data = b64(b"x" * (MiB - 1 - 300))  # fits without an id, not with a 128-character one
    response, _ = call(json_body({"data": data, "partitionKey": "k"}), settings=BIG_BODY)
    assert response.status == 200
    response, _ = call(json_body({"data": data, "partitionKey": "k", "id": "i" * 128}), settings=BIG_BODY)
    assert response.status == 400 and errors(response) == [(0, "data")]


BIG_BODY = ApiSettings(streams={"orders": ROUTE})


# -- the body bound counts the Lambda event API Gateway builds ------------------------------------


def proxy_event(body: str) -> dict[str, Any]:
    """A REST proxy event shaped as API Gateway sends it (headers twice, a request context)."""
    headers = {"Content-Type": "application/json", "Host": "x.execute-api.us-east-1.amazonaws.com"}
    return {
        "resource": "/streams/{stream}/records",
        "path": "/streams/orders/records",
        "httpMethod": "POST",
        "headers": headers,
        "multiValueHeaders": {name: [value] for name, value in headers.items()},
        "pathParameters": {"stream": "orders"},
        "requestContext": {"requestId": "r-1", "stage": "v1", "identity": {"sourceIp": "198.51.100.7"}},
        "body": body,
        "isBase64Encoded": False,
    }


@pytest.mark.parametrize(
    "body",
    [
        json_body({"json": {"note": 'say "hi"\\n', "path": "a/b"}, "partitionKey": "k"}),
        json_body({"json": "clé 😀 中", "partitionKey": "k"}),
        json.dumps({"records": [{"json": "x", "partitionKey": "k"}]}, indent=2),
    ],
)
def test_the_event_size_is_counted_as_the_gateway_serializes_the_event(body):
    from shardline.aws_lambda import event_body_bytes
    from shardline.aws_lambda._producer_function import envelope_bytes

    event = proxy_event(body)
    # The local runtime's gateway measures `json.dumps(event)`: the count must never fall short.
    assert envelope_bytes(event) + event_body_bytes(body, is_base64_encoded=False) == len(json.dumps(event))
    assert event_body_bytes(body, is_base64_encoded=False) >= len(body.encode())


def test_a_body_under_the_bound_whose_escaped_event_is_over_it_is_413():
    quotes = json_body(*[{"json": '"' * 60, "partitionKey": f"k{i}"} for i in range(4)])
    assert len(quotes.encode()) < len(json.dumps(quotes)) - 2  # a quote in the body grows to \" in the event
    response, put = call(quotes, settings=ApiSettings(streams={"orders": ROUTE}, max_body_bytes=len(quotes)))
    assert response.status == 413 and put.calls == []
    assert "in the Lambda event" in response.body["message"]


def test_a_58_mb_body_that_escapes_past_lambdas_6_mb_is_413_not_sent():
    # The case: a body under the 6,000,000-byte default that API Gateway's escaping grows
    # past Lambda's 6 MB invocation payload. shardline answers 413 instead of sending it.
    record = {"json": {"q": "x" * 6000 + '"' * 3000}, "partitionKey": "k"}  # a quote is 2 bytes, then 4
    body = json_body(*[record] * 480)
    assert 5_700_000 < len(body.encode()) < DEFAULT_MAX_BODY_BYTES < 6 * MiB < len(json.dumps(body))
    assert len(json.dumps(body)) / len(body) > 1.45  # the 5.8 MB body became 8.7 MB
    settings = ApiSettings(streams={"orders": ROUTE}, max_records_per_request=1000)

    response, put = call(body, settings=settings)

    assert response.status == 413 and put.calls == []
    assert f"at most {DEFAULT_MAX_BODY_BYTES}" in response.body["message"]


def test_the_envelope_counts_toward_lambdas_limit_whatever_max_body_bytes_says():
    from shardline.aws_lambda import event_body_bytes

    body = json_body({"data": b64(b"x" * 1000), "partitionKey": "k"})
    assert event_body_bytes(body, is_base64_encoded=False) == len(body) + body.count('"')
    generous = ApiSettings(streams={"orders": ROUTE}, max_body_bytes=10 * MiB)
    fits = handle(
        "orders", body, content_type="application/json", is_base64_encoded=False, settings=generous,
        put=Recorder(), envelope_bytes=6 * MiB - len(body) - body.count('"') - 2,
    )  # fmt: skip
    assert fits.status == 200
    over = handle(
        "orders", body, content_type="application/json", is_base64_encoded=False, settings=generous,
        put=Recorder(), envelope_bytes=6 * MiB - len(body) - body.count('"') - 1,
    )  # fmt: skip
    assert over.status == 413


def test_a_base64_encoded_body_counts_as_its_base64_text():
    from shardline.aws_lambda import event_body_bytes

    text = b64(json_body({"json": '"' * 100, "partitionKey": "k"}).encode())
    assert event_body_bytes(text, is_base64_encoded=True) == len(text)


# -- failed entries say whether the record was written, and what to do --------------------------


def test_a_lost_reply_never_settled_is_unconfirmed_and_says_to_resend_with_the_same_id():
    results = [ok("1"), unconfirmed("Internal", "Expired"), unconfirmed("ServiceUnavailable", "Expired")]
    response = results_response(results, ids=["a", "b", None])

    assert response.status == 207
    entries = response.body["records"]
    assert entries[1] == {
        "id": "b",
        "errorCode": "Expired",
        "errorMessage": "no answer from Kinesis confirmed this record before the deadline (last: Internal): "
        "a copy may be in the stream",
        "attempts": 1,
        "written": "unconfirmed",
        "retry": "resend-same-id",
    }
    assert entries[2]["written"] == "unconfirmed" and entries[2]["retry"] == "resend-may-duplicate"
    assert "id" not in entries[2]
    assert log_fields(response)["unconfirmed"] == 2


@pytest.mark.parametrize(
    "result",
    [
        failed("Expired"),
        failed(THROTTLED, "Expired"),
        failed("PartitionerError"),
        failed("KMSAccessDeniedException"),
        failed("InvalidArgumentException"),
    ],
)
def test_a_record_no_copy_of_which_can_land_is_written_false_and_safe_to_resend(result):
    entry = result_entry(result, "id-1")
    assert entry["written"] is False and entry["retry"] == "resend" and entry["id"] == "id-1"


@pytest.mark.parametrize(
    "results",
    [
        [failed("ServiceUnavailable", "Expired"), failed("KMSThrottlingException")],  # a brownout
        [failed("Internal", "Expired"), failed("Internal")],  # unreachable: connection refused
        [failed(THROTTLED, "Expired"), failed("Expired")],
    ],
)
def test_nothing_written_in_a_brownout_is_503_never_a_207(results):
    response = results_response(results, ids=[f"k:{i}" for i in range(len(results))])
    assert response.status == 503
    assert response.headers == {"Retry-After": "1"}
    assert "same Idempotency-Key and ids" in response.body["message"]
    assert [entry["id"] for entry in response.body["records"]] == [f"k:{i}" for i in range(len(results))]
    assert all(entry["written"] is False for entry in response.body["records"])


@pytest.mark.parametrize(
    "results",
    [
        [unconfirmed("Internal", "Expired"), unconfirmed("InternalFailure", "Expired")],  # lost replies only
        [unconfirmed("MalformedResponse", "Expired"), failed(THROTTLED, "Expired")],
        [unconfirmed("RecordCountMismatch", "Expired"), failed("Expired")],
        [unconfirmed("Internal", "AccessDeniedException"), failed("AccessDeniedException")],
        [unconfirmed("Internal", "ResourceNotFoundException"), failed("ResourceNotFoundException")],
    ],
)
def test_property_9_a_request_with_a_lost_reply_is_never_answered_nothing_written(results):
    """A record whose reply was lost may be in the stream: the answer is the 207 of its entries
    (posting the whole request again, as a 503, 500 or 404 would say, applies a record without an id
    twice)."""
    response = results_response(results, ids=[None] * len(results))
    assert response.status == 207 and response.headers == {}
    assert response.body["records"][0]["written"] == "unconfirmed"
    assert response.body["records"][0]["retry"] == "resend-may-duplicate"


def test_kinesis_refusing_the_function_itself_is_a_500_with_the_request_id():
    results = [failed("AccessDeniedException"), failed("AccessDeniedException")]
    response = results_response(results, ids=["a", "b"], request_id="req-42")
    assert response.status == 500
    assert response.body["requestId"] == "req-42"
    assert "AccessDeniedException" in response.body["message"] and "req-42" in response.body["message"]
    assert [entry["written"] for entry in response.body["records"]] == [False, False]


def test_no_answer_echoes_kinesis_or_exception_text():
    leaky = "ReadTimeoutError: Read timeout on endpoint URL: https://10.1.2.3:4566/ account 123456789012"

    def result(code: str, last: str, *, unconfirmed: bool = False) -> RecordResult:
        attempt = Attempt(0.0, 1.0, False, code, leaky)
        return RecordResult(
            False, error_code=last, error_message=leaky, attempts=(attempt,), unconfirmed=unconfirmed
        )

    results = [
        result("Internal", "Internal"),
        result(THROTTLED, THROTTLED),
        result("Internal", "Expired", unconfirmed=True),
    ]
    for response in (results_response(results), results_response(results[2:])):
        assert "10.1.2.3" not in response.json() and "ReadTimeoutError" not in response.json()


def test_the_internal_error_answer_names_the_request_not_the_exception():
    from shardline.aws_lambda._http_response import internal_error_response

    response = internal_error_response("req-9")
    assert response.status == 500
    assert response.body == {"message": "internal error; request id req-9", "requestId": "req-9"}


# -- a stream that refuses caller-chosen shards --------------------------------------------------

ROUTED_BY_KEY = StreamRoute("orders", "orders-physical", explicit_hash_keys=False)


def test_3_a_stream_that_refuses_explicit_hash_keys_refuses_such_records_and_sends_nothing():
    settings = ApiSettings(streams={"orders": ROUTED_BY_KEY}, max_records_per_request=5, max_body_bytes=4096)
    body = json_body(
        {"data": b64(b"a"), "partitionKey": "k"},
        {"data": b64(b"b"), "partitionKey": "k", "explicitHashKey": "0"},
        {"data": b64(b"c"), "partitionKey": "k", "explicitHashKey": str(MAX_HASH_KEY)},
    )
    response, put = call(body, settings=settings)
    assert response.status == 400 and put.calls == []
    assert errors(response) == [(1, "explicitHashKey"), (2, "explicitHashKey")]
    assert "partition key only" in response.body["errors"][0]["message"]
    # Without explicit hash keys, the same stream takes the records.
    response, put = call(json_body({"data": b64(b"a"), "partitionKey": "k"}), settings=settings)
    assert response.status == 200 and len(put.calls) == 1


def test_3_explicit_hash_keys_are_read_from_shardline_streams_and_must_be_a_boolean():
    routes = parse_streams(json.dumps({"orders": {"streamName": "s", "explicitHashKeys": False}}))
    assert routes["orders"].explicit_hash_keys is False
    assert parse_streams(json.dumps({"orders": {"streamName": "s"}}))["orders"].explicit_hash_keys is True
    with pytest.raises(ConfigurationError, match=r'\["explicitHashKeys"\] must be true or false'):
        parse_streams(json.dumps({"orders": {"streamName": "s", "explicitHashKeys": "no"}}))
