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
from shardline.aws_lambda._http_response import is_stream_missing
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
    assert response.body["message"] == "the body is 4097 bytes; at most 4096 are accepted"


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
    assert response.body["records"][1] == {"errorCode": "Expired", "errorMessage": "Expired!", "attempts": 2}
    assert response.body["records"][3] == {
        "errorCode": "InternalFailure",
        "errorMessage": "InternalFailure!",
        "attempts": 1,
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
    assert fields == {"status": 207, "records": 3, "failedRecordCount": 2, "errorCodes": {"Expired": 2}}
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


def test_producer_config_follows_the_stream_limits_and_never_resends_a_landed_record():
    # The pipeline's consumers (shardline's) deliver out-of-range members: a resend would apply twice.
    assert producer_config(ROUTE) == ProducerConfig(retry_wrong_shard=False)
    big = producer_config(StreamRoute("b", "b", Limits.for_max_record_size(10 * MiB)))
    assert big.limits.max_record_size == 10 * MiB and big.collection_max_size == 10 * MiB
