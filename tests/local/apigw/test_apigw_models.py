"""The local REST API validator's compiled models agree with jsonschema."""

from __future__ import annotations

import jsonschema
import pytest

from local.apigw.schema import compile_model
from tests.support.apigw import RECORDS_MODEL

pytestmark = pytest.mark.integration

# --- the validator's compiled models ---------------------------------------------------------

MODEL_DOCUMENTS = [
    {"records": [{"partitionKey": "k"}]},
    {"records": [{"partitionKey": "k", "data": "d", "explicitHashKey": "0"}]},
    {"records": [{"partitionKey": "k", "explicitHashKey": "1" + "0" * 38}]},
    {"records": [{"partitionKey": "k", "explicitHashKey": "1" + "0" * 39}]},
    {"records": [{"partitionKey": "k", "explicitHashKey": "007"}]},
    {"records": [{"partitionKey": ""}]},
    {"records": [{"partitionKey": "x" * 256}]},
    {"records": [{"partitionKey": "x" * 257}]},
    {"records": [{"partitionKey": "é" * 256}]},
    {"records": [{"partitionKey": True}]},
    {"records": [{"partitionKey": "k", "data": None}]},
    {"records": [{"partitionKey": "k", "data": 1}]},
    {"records": [{"partitionKey": "k", "other": [1, 2]}]},
    {"records": [{"data": "d"}]},
    {"records": ["k"]},
    {"records": []},
    {"records": {"partitionKey": "k"}},
    {"records": None},
    {"other": 1},
    {},
    [],
    "records",
    None,
    3.5,
]
OTHER_MODEL = {
    "type": ["object", "null"],
    "additionalProperties": False,
    "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9}, "f": {"type": "number"}},
}


@pytest.mark.parametrize(
    "document", [*MODEL_DOCUMENTS, {"n": 1}, {"n": 0}, {"n": 9.0}, {"f": True}, {"x": 1}]
)
def test_compiled_models_agree_with_jsonschema(document):
    for schema in (RECORDS_MODEL, OTHER_MODEL):
        compiled = compile_model(schema)
        assert not isinstance(getattr(compiled, "__self__", None), jsonschema.Draft4Validator)  # compiled
        assert compiled(document) == jsonschema.Draft4Validator(schema).is_valid(document), (schema, document)


def test_models_with_other_keywords_use_jsonschema():
    schema = {"type": "object", "properties": {"color": {"enum": ["red", "blue"]}}}
    check = compile_model(schema)
    assert isinstance(check.__self__, jsonschema.Draft4Validator)
    assert (check({"color": "red"}), check({"color": "green"})) == (True, False)
