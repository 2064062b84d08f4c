"""Read the template's IAM into `model.Iam`: each role with every identity policy attached to it, the
resource policies of queues, buckets and keys, and which customer-managed key encrypts what.

The endpoint authorizes each request against these (`local.iam`), so a policy the runtime cannot
read is never skipped quietly: it is listed in `Iam.unreadable` with the reason, and whatever it
would allow stays refused locally (refusing at least what AWS refuses).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from . import model
from .template_api import TemplateError

#: Where each resource policy type names its policy and the resources it applies to.
RESOURCE_POLICIES = {
    "AWS::SQS::QueuePolicy": ("PolicyDocument", "Queues"),
    "AWS::S3::BucketPolicy": ("PolicyDocument", "Bucket"),
}
#: Where each resource type names the customer-managed KMS key that encrypts it.
KEY_PROPERTY = {
    "AWS::Kinesis::Stream": ("StreamEncryption", "KeyId"),
    "AWS::DynamoDB::Table": ("SSESpecification", "KMSMasterKeyId"),
    "AWS::SQS::Queue": ("KmsMasterKeyId",),
    "AWS::S3::Bucket": ("BucketEncryption",),  # read below: the first rule's KMSMasterKeyID
}


class IamReader:
    """The `_Reader` mixin that reads `model.Iam` (see the module docstring)."""

    resources: dict[str, dict[str, Any]]

    def resolve_part(self, logical_id: str, value: Any) -> Any:
        raise NotImplementedError  # the reader's

    def get_att(self, logical_id: str, attribute: str) -> str:
        raise NotImplementedError  # the reader's

    def name(self, logical_id: str) -> str:
        raise NotImplementedError  # the reader's

    def iam(self) -> model.Iam:
        unreadable: list[tuple[str, str]] = []
        attached: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
        for logical_id, resource in self.resources.items():
            if resource["Type"] not in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
                continue
            properties = resource.get("Properties", {})
            document = self._document(logical_id, properties.get("PolicyDocument"), unreadable)
            for role in properties.get("Roles", []):
                target = role.get("Ref") if isinstance(role, Mapping) else None
                if document is not None and target in self.resources:
                    attached.setdefault(target, []).append((logical_id, document))
        roles = tuple(
            self._role(logical_id, attached.get(logical_id, []), unreadable)
            for logical_id, resource in self.resources.items()
            if resource["Type"] == "AWS::IAM::Role"
        )
        return model.Iam(
            roles=roles,
            resource_policies=self._resource_policies(unreadable),
            keys=self._keys(),
            unreadable=tuple(unreadable),
        )

    def _role(
        self,
        logical_id: str,
        attached: list[tuple[str, Mapping[str, Any]]],
        unreadable: list[tuple[str, str]],
    ) -> model.Role:
        properties = self.resources[logical_id].get("Properties", {})
        policies = list(attached)
        for inline in properties.get("Policies", []):
            where = f"{logical_id}/{inline.get('PolicyName', 'inline')}"
            document = self._document(where, inline.get("PolicyDocument"), unreadable)
            if document is not None:
                policies.append((where, document))
        managed = []
        for reference in properties.get("ManagedPolicyArns", []):
            target = reference.get("Ref") if isinstance(reference, Mapping) else None
            if target in self.resources:  # a customer-managed policy of this template: attached above
                continue
            managed.append(str(self.resolve_part(logical_id, reference)))
        trust = self.resolve_part(logical_id, properties.get("AssumeRolePolicyDocument"))
        return model.Role(
            logical_id=logical_id,
            name=self.name(logical_id),
            arn=self.get_att(logical_id, "Arn"),
            policies=tuple(policies),
            trust=trust,
            managed_arns=tuple(managed),
        )

    def _document(
        self, where: str, document: Any, unreadable: list[tuple[str, str]]
    ) -> Mapping[str, Any] | None:
        try:
            resolved = self.resolve_part(where, document)
        except TemplateError as error:
            unreadable.append((where, str(error)))
            return None
        if not isinstance(resolved, Mapping):
            unreadable.append((where, "its PolicyDocument is not a JSON object"))
            return None
        return _local_streams(where, resolved, unreadable)

    def _resource_policies(
        self, unreadable: list[tuple[str, str]]
    ) -> dict[str, tuple[str, Mapping[str, Any]]]:
        found: dict[str, tuple[str, Mapping[str, Any]]] = {}
        for logical_id, resource in self.resources.items():
            kind, properties = resource["Type"], resource.get("Properties", {})
            if kind == "AWS::KMS::Key":
                document = self._document(logical_id, properties.get("KeyPolicy"), unreadable)
                if document is not None:
                    found[self.get_att(logical_id, "Arn")] = (f"key policy of {logical_id}", document)
                continue
            if kind not in RESOURCE_POLICIES:
                continue
            document_property, targets_property = RESOURCE_POLICIES[kind]
            document = self._document(logical_id, properties.get(document_property), unreadable)
            targets = self.resolve_part(logical_id, properties.get(targets_property))
            if document is None:
                continue
            for target in targets if isinstance(targets, list) else [targets]:
                arn = _queue_arn(str(target)) if kind == "AWS::SQS::QueuePolicy" else f"arn:aws:s3:::{target}"
                found[arn] = (logical_id, document)
        return found

    def _keys(self) -> dict[str, str]:
        keys: dict[str, str] = {}
        for logical_id, resource in self.resources.items():
            path = KEY_PROPERTY.get(resource["Type"])
            if path is None:
                continue
            value: Any = resource.get("Properties", {})
            for step in path:
                value = value.get(step) if isinstance(value, Mapping) else None
            if resource["Type"] == "AWS::S3::Bucket" and isinstance(value, Mapping):
                rules = value.get("ServerSideEncryptionConfiguration") or [{}]
                value = rules[0].get("ServerSideEncryptionByDefault", {}).get("KMSMasterKeyID")
            key = _key_arn(self.resolve_part(logical_id, value)) if value is not None else None
            if key is not None:
                keys[self.get_att(logical_id, "Arn")] = key
        return keys


#: A stream's (or its consumer's) ARN in another account or region than the local one.
_FOREIGN_STREAM = re.compile(r"arn:aws:kinesis:(?P<region>[a-z0-9-]+):(?P<account>\d{12}):stream/")


def _local_streams(
    where: str, document: Mapping[str, Any], notes: list[tuple[str, str]]
) -> Mapping[str, Any]:
    """`document` with another account's (or region's) stream ARNs made the local ones: such an
    existing stream is created locally in the local account (`template_streams.undefined_streams`),
    so the role's grants on its real ARN apply to it; that account's stream policy is not evaluated."""
    text = json.dumps(document)
    foreign = {
        match.group(0)
        for match in _FOREIGN_STREAM.finditer(text)
        if (match["account"], match["region"]) != (model.ACCOUNT, model.REGION)
    }
    for prefix in sorted(foreign):
        text = text.replace(prefix, f"arn:aws:kinesis:{model.REGION}:{model.ACCOUNT}:stream/")
        notes.append(
            (where, f"grants on {prefix}… (another account's or region's streams) apply to the local "
             "streams of those names; that account's stream policies are not evaluated")
        )  # fmt: skip
    local: Mapping[str, Any] = json.loads(text)
    return local


def _queue_arn(url: str) -> str:
    """A queue's ARN from its local URL (`Queues` lists URLs: the Ref of a queue)."""
    return model.queue_arn(url.rstrip("/").rsplit("/", 1)[-1])


def _key_arn(value: Any) -> str | None:
    """A customer-managed key's ARN; None for an AWS-managed key (`alias/aws/...`), which every
    principal of the account may use through its service."""
    text = str(value)
    if text.startswith("arn:aws:kms:") and ":key/" in text:
        return text
    return None
