"""Data at rest (issue 25, item 5): whose key encrypts what, who may use the dead-letter stores, and
that their access is logged."""

from __future__ import annotations

import copy
import json

import pytest
from aws_cdk.assertions import Template

from app import build
from shardline.cdk._config import ConfigError, load
from tests.support.cdk import default_context, resources


def _key_id(value) -> str:
    return value["Fn::GetAtt"][0]


def _encryption_key(resource: dict):
    props = resource.get("Properties", {})
    if resource["Type"] == "AWS::DynamoDB::Table":
        return props["SSESpecification"]["KMSMasterKeyId"]
    if resource["Type"] == "AWS::SQS::Queue":
        return props["KmsMasterKeyId"]
    if resource["Type"] == "AWS::S3::Bucket":
        [rule] = props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
        return rule["ServerSideEncryptionByDefault"].get("KMSMasterKeyID")
    return None


def test_5_each_group_keeps_its_tables_queues_and_dead_letters_under_its_own_key(template):
    raw = template.to_json()["Resources"]
    keys_by_group: dict[str, set[str]] = {}
    for lid, resource in raw.items():
        key = _encryption_key(resource)
        if key is None or not lid.startswith("Group"):
            continue
        group = next(g for g in ("Groupeventsink", "Groupkeycounter") if lid.startswith(g))
        keys_by_group.setdefault(group, set()).add(_key_id(key))
    assert set(keys_by_group) == {"Groupeventsink", "Groupkeycounter"}, keys_by_group
    for group, keys in keys_by_group.items():
        assert len(keys) == 1 and next(iter(keys)).startswith(f"{group}Key"), (group, keys)
    (topic,) = resources(template, "AWS::SNS::Topic").values()
    alarm_key = _key_id(topic["Properties"]["KmsMasterKeyId"])
    assert alarm_key not in set().union(*keys_by_group.values()), "the alarm topic has a key of its own"


def test_5_every_log_group_is_encrypted_with_a_key_cloudwatch_logs_here_may_use(template):
    groups = resources(template, "AWS::Logs::LogGroup")
    assert len(groups) == 5  # three functions, the API's access and execution logs
    keys = {_key_id(group["Properties"]["KmsKeyId"]) for group in groups.values()}
    assert len(keys) == 1
    (key,) = keys
    policy = resources(template, "AWS::KMS::Key")[key]["Properties"]["KeyPolicy"]["Statement"]
    [logs] = [s for s in policy if "logs." in json.dumps(s.get("Principal", {}))]
    assert logs["Principal"] == {
        "Service": {"Fn::Join": ["", ["logs.", {"Ref": "AWS::Region"}, ".amazonaws.com"]]}
    }
    assert logs["Condition"] == {
        "ArnLike": {
            "kms:EncryptionContext:aws:logs:arn": {
                "Fn::Join": [
                    "",
                    [
                        "arn:",
                        {"Ref": "AWS::Partition"},
                        ":logs:",
                        {"Ref": "AWS::Region"},
                        ":",
                        {"Ref": "AWS::AccountId"},
                        ":log-group:*",
                    ],
                ]
            }
        }
    }


def _statements(template, kind: str, target: str) -> list[dict]:
    return [
        statement
        for policy in resources(template, kind).values()
        if target in json.dumps(policy["Properties"].get("Queues") or policy["Properties"].get("Bucket"))
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_5_dead_letter_stores_are_written_by_their_function_only_and_used_from_this_account_only(template):
    stores = [
        ("AWS::SQS::QueuePolicy", lid, "sqs:SendMessage", "sqs:*")
        for lid in resources(template, "AWS::SQS::Queue")
    ] + [
        ("AWS::S3::BucketPolicy", lid, "s3:PutObject", "s3:*")
        for lid in resources(template, "AWS::S3::Bucket")
        if not lid.startswith("AccessLogs")
    ]
    assert len(stores) == 6  # per group: DLQ, on-failure queue, dead-letter bucket
    for kind, lid, write, anything in stores:
        statements = _statements(template, kind, lid)
        group = lid.split("Dead")[0].split("Mapping")[0]
        [writers] = [s for s in statements if s.get("Sid") == "OnlyTheGroupWrites"]
        assert (
            writers["Effect"] == "Deny"
            and writers["Action"] == write
            and writers["Principal"] == {"AWS": "*"}
        )
        [writer] = _as_list(writers["Condition"]["ArnNotEquals"]["aws:PrincipalArn"])
        role = writer["Fn::GetAtt"][0]
        assert role.startswith(f"{group}FunctionServiceRole"), (lid, role)
        assert not [s for s in statements if s.get("Sid") == "OnlyItsReadersRead"], "reads: IAM decides"
        [accounts] = [s for s in statements if s.get("Sid") == "OnlyThisAccount"]
        assert accounts["Effect"] == "Deny" and accounts["Action"] == anything
        assert accounts["Condition"] == {
            "StringNotEquals": {"aws:PrincipalAccount": {"Ref": "AWS::AccountId"}}
        }
        assert any(s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in statements)


def _as_list(value):
    return value if isinstance(value, list) else [value]


READER = "arn:aws:iam::123456789012:role/oncall"


def test_5_named_readers_alone_read_a_groups_dead_letters_and_may_redrive_them(tmp_path):
    context = copy.deepcopy(default_context())
    context["shardline"]["consumerGroups"][0]["deadLetterReaders"] = [READER]
    app, stack = build(context, outdir=str(tmp_path))
    app.synth()
    template = Template.from_stack(stack)
    for kind, lid, read in [
        ("AWS::SQS::QueuePolicy", "GroupeventsinkDeadLetters", "sqs:ReceiveMessage"),
        ("AWS::SQS::QueuePolicy", "GroupeventsinkMappingFailures", "sqs:ReceiveMessage"),
        ("AWS::S3::BucketPolicy", "GroupeventsinkDeadLetterBucket", "s3:GetObject"),
    ]:
        statements = _statements(template, kind, lid)
        [readers] = [s for s in statements if s.get("Sid") == "OnlyItsReadersRead"]
        assert readers["Effect"] == "Deny" and read in readers["Action"]
        assert readers["Condition"] == {"ArnNotEquals": {"aws:PrincipalArn": [READER]}}
        [writers] = [s for s in statements if s.get("Sid") == "OnlyTheGroupWrites"]
        assert READER in writers["Condition"]["ArnNotEquals"]["aws:PrincipalArn"]  # a redrive dead-letters
    other = _statements(template, "AWS::SQS::QueuePolicy", "GroupkeycounterDeadLetters")
    assert not [s for s in other if s.get("Sid") == "OnlyItsReadersRead"], "per group"


def test_5_a_dead_letter_reader_must_be_a_role_or_user_arn():
    context = copy.deepcopy(default_context())["shardline"]
    context["consumerGroups"][1]["deadLetterReaders"] = ["oncall"]
    with pytest.raises(
        ConfigError, match=r"shardline\.consumerGroups\[1\]\.deadLetterReaders\[0\]: not an IAM"
    ):
        load(context)


def test_5_dead_letter_buckets_log_their_access_to_an_sse_s3_private_expiring_bucket(template):
    buckets = resources(template, "AWS::S3::Bucket")
    [(log_id, log_bucket)] = [(lid, b) for lid, b in buckets.items() if lid.startswith("AccessLogs")]
    props = log_bucket["Properties"]
    [rule] = props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert rule["ServerSideEncryptionByDefault"] == {"SSEAlgorithm": "AES256"}  # what log delivery takes
    assert all(props["PublicAccessBlockConfiguration"].values())
    assert props["LifecycleConfiguration"]["Rules"][0]["ExpirationInDays"] == 365
    prefixes = sorted(
        b["Properties"]["LoggingConfiguration"]["LogFilePrefix"]
        for lid, b in buckets.items()
        if lid != log_id
    )
    assert prefixes == ["event-sink/", "key-counter/"]
    delivery = [
        s
        for s in _statements(template, "AWS::S3::BucketPolicy", log_id)
        if s.get("Principal") == {"Service": "logging.s3.amazonaws.com"}
    ]
    assert delivery and all("aws:SourceAccount" in json.dumps(s["Condition"]) for s in delivery)
    assert any(
        s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        for s in _statements(template, "AWS::S3::BucketPolicy", log_id)
    )
