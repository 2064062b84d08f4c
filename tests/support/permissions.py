"""Each function of a synthesized template as the least-privilege tests read it: what it owns, what
its code calls, what its role may do (tests/infra/test_permissions.py, test_sink_writes.py)."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

#: IAM service prefix -> botocore service model, and the template resource type its actions act on.
SERVICES = {
    "kinesis": ("kinesis", "AWS::Kinesis::Stream"),
    "dynamodb": ("dynamodb", "AWS::DynamoDB::Table"),
    "sqs": ("sqs", "AWS::SQS::Queue"),
    "s3": ("s3", "AWS::S3::Bucket"),
    "kms": ("kms", "AWS::KMS::Key"),
    "logs": ("logs", "AWS::Logs::LogGroup"),
    "xray": ("xray", None),
}
#: Where each resource type names its KMS key.
KEY_PROPERTY = {
    "AWS::Kinesis::Stream": ("StreamEncryption", "KeyId"),
    "AWS::DynamoDB::Table": ("SSESpecification", "KMSMasterKeyId"),
    "AWS::SQS::Queue": ("KmsMasterKeyId",),
    "AWS::Logs::LogGroup": ("KmsKeyId",),
}
#: The physical-name property of each resource type (an environment may name a resource by it).
NAME_PROPERTY = {
    "AWS::Kinesis::Stream": "Name",
    "AWS::DynamoDB::Table": "TableName",
    "AWS::SQS::Queue": "QueueName",
    "AWS::S3::Bucket": "BucketName",
}


# -- the template, read -------------------------------------------------------------------------


@dataclass
class Function:
    """One function as the template declares it, with what it owns and what its role may do."""

    logical_id: str
    role: str
    tracing: bool
    log_group: str | None
    called: set[str]
    own: dict[str, set[str]] = field(default_factory=dict)  # resource type -> logical ids
    mapped_streams: set[str] = field(default_factory=set)
    on_failure: set[str] = field(default_factory=set)
    permissions: set[tuple[str, str]] = field(default_factory=set)  # (action, resource)
    managed: list[str] = field(default_factory=list)


def _refs(value) -> set[str]:
    """Logical ids a template value refers to (Ref, Fn::GetAtt, ${X} / ${X.Attr} in Fn::Sub)."""
    found: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "Ref" and isinstance(item, str):
                found.add(item)
            elif key == "Fn::GetAtt":
                found.add(item[0] if isinstance(item, list) else item.split(".")[0])
            elif key == "Fn::Sub":
                text = item if isinstance(item, str) else item[0]
                found |= {m.split(".")[0] for m in re.findall(r"\$\{([^}!]+)\}", text)}
                if not isinstance(item, str):
                    found |= _refs(item[1])
            else:
                found |= _refs(item)
    elif isinstance(value, list):
        for item in value:
            found |= _refs(item)
    return found


def resource_name(value) -> str:
    """A policy resource, rendered: `<Id>` for an ARN of a resource of the template, `<Id>/*` for
    its objects, `*` for everything, the JSON otherwise (which matches no own resource)."""
    if value == "*":
        return "*"
    if isinstance(value, dict) and list(value) == ["Fn::GetAtt"] and value["Fn::GetAtt"][1] == "Arn":
        return f"<{value['Fn::GetAtt'][0]}>"
    if isinstance(value, dict) and list(value) == ["Fn::Join"]:
        separator, parts = value["Fn::Join"]
        if separator == "" and len(parts) == 2 and parts[1] == "/*":
            inner = resource_name(parts[0])
            if inner.startswith("<"):
                return f"{inner}/*"
    return json.dumps(value, sort_keys=True)


def _listed(value) -> list:
    return value if isinstance(value, list) else [value]


def called_methods(folders: list[Path]) -> set[str]:
    """Every `x.method(` called in the Python files under `folders` (AST, not text: comments and
    strings do not count)."""
    names: set[str] = set()
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    names.add(node.func.attr)
    return names


def read_functions(template: dict, outdir: Path, stack: str) -> dict[str, Function]:
    resources = template["Resources"]
    functions: dict[str, Function] = {}
    for lid, resource in resources.items():
        if resource["Type"] != "AWS::Lambda::Function":
            continue
        props = resource["Properties"]
        log_group = next(iter(_refs(props.get("LoggingConfig", {}).get("LogGroup"))), None)
        function = Function(
            logical_id=lid,
            role=next(iter(_refs(props["Role"]))),
            tracing=props.get("TracingConfig", {}).get("Mode") == "Active",
            log_group=log_group,
            called=called_methods(shipped_folders(template, lid, outdir, stack)),
        )
        variables = props.get("Environment", {}).get("Variables", {})
        owned = _refs(variables) | ({log_group} if log_group else set())
        text = json.dumps(variables)
        for other, candidate in resources.items():  # named by physical name (the producer's streams)
            name = candidate.get("Properties", {}).get(NAME_PROPERTY.get(candidate["Type"], ""))
            if isinstance(name, str) and json.dumps(name)[1:-1] in text:
                owned.add(other)
        for mapping in resources.values():
            if mapping["Type"] != "AWS::Lambda::EventSourceMapping":
                continue
            if lid not in _refs(mapping["Properties"]["FunctionName"]):
                continue
            streams = _refs(mapping["Properties"]["EventSourceArn"])
            destination = _refs(mapping["Properties"].get("DestinationConfig", {}))
            function.mapped_streams |= streams
            function.on_failure |= destination
            owned |= streams | destination
        for owned_id in list(owned):  # the keys that encrypt what it owns
            owned |= _key_of(resources, owned_id)
        for owned_id in owned:
            function.own.setdefault(resources[owned_id]["Type"], set()).add(owned_id)
        functions[lid] = function
    _read_permissions(template, functions)
    return functions


def shipped_folders(template: dict, lid: str, outdir: Path, stack: str) -> list[Path]:
    """The folders the function's code and its layers were packaged from (the cloud assembly's
    assets): exactly what Lambda unpacks. A layer by ARN (Powertools) is AWS's, not scanned."""
    manifest = json.loads((outdir / f"{stack}.assets.json").read_text())
    by_key = {
        destination["objectKey"]: outdir / entry["source"]["path"]
        for entry in manifest["files"].values()
        for destination in entry["destinations"].values()
    }
    props = template["Resources"][lid]["Properties"]
    keys = [props["Code"]["S3Key"]]
    for layer in props.get("Layers", []):
        for ref in _refs(layer) & set(template["Resources"]):
            keys.append(template["Resources"][ref]["Properties"]["Content"]["S3Key"])
    return [by_key[key] for key in keys]


def _key_of(resources: dict, lid: str) -> set[str]:
    resource = resources[lid]
    props = resource.get("Properties", {})
    if resource["Type"] == "AWS::S3::Bucket":
        rules = props.get("BucketEncryption", {}).get("ServerSideEncryptionConfiguration", [])
        return {k for rule in rules for k in _refs(rule.get("ServerSideEncryptionByDefault", {}))}
    path = KEY_PROPERTY.get(resource["Type"])
    if path is None:
        return set()
    value = props
    for step in path:
        value = value.get(step, {}) if isinstance(value, dict) else {}
    return _refs(value)


def _read_permissions(template: dict, functions: dict[str, Function]) -> None:
    by_role = {f.role: f for f in functions.values()}
    for lid, resource in template["Resources"].items():
        props = resource.get("Properties", {})
        kind = resource["Type"]
        if kind == "AWS::IAM::Role" and lid in by_role:
            by_role[lid].managed = [json.dumps(arn) for arn in props.get("ManagedPolicyArns", [])]
            for policy in props.get("Policies", []):
                _allow(by_role[lid], policy["PolicyDocument"])
        elif kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            for role in _refs(props.get("Roles", [])):
                if role in by_role:
                    _allow(by_role[role], props["PolicyDocument"])
        elif kind in ("AWS::KMS::Key", "AWS::S3::BucketPolicy", "AWS::SQS::QueuePolicy"):
            document = props.get("KeyPolicy") or props.get("PolicyDocument")
            for statement in document["Statement"]:
                principals = _refs(statement.get("Principal", {}))
                for role in principals & set(by_role):
                    on = f"<{lid}>" if kind == "AWS::KMS::Key" else None  # "*" in a key policy: this key
                    _allow(by_role[role], {"Statement": [statement]}, resource=on)


def _allow(function: Function, document: dict, resource: str | None = None) -> None:
    for statement in document["Statement"]:
        if statement["Effect"] != "Allow":
            continue
        assert "NotAction" not in statement and "NotResource" not in statement, statement
        for action in _listed(statement["Action"]):
            for target in _listed(statement.get("Resource", "*")):
                function.permissions.add((action, resource or resource_name(target)))
