"""The REST API part of reading a template (`local.app.template`): resources, methods, stage, validator.

A mix-in of `local.app.template`'s reader: it leans on the reader's `properties`, `ref`, `get_att`,
`name` and `resources`, and builds a `model.RestApi` with what API Gateway checks before invoking.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from . import model

_INTEGRATION_FUNCTION = re.compile(r"functions/arn:aws:lambda:[^:]+:[^:]+:function:([^/:]+)")


class TemplateError(ValueError):
    """The template asks for something the local runtime cannot resolve."""


class ApiReader:
    resources: dict[str, dict[str, Any]]

    def properties(self, logical_id: str) -> dict[str, Any]:
        raise NotImplementedError

    def ref(self, logical_id: str) -> str:
        raise NotImplementedError

    def get_att(self, logical_id: str, attribute: str) -> str:
        raise NotImplementedError

    def name(self, logical_id: str) -> str:
        raise NotImplementedError

    def rest_api(self, logical_id: str) -> model.RestApi:
        api_id = self.ref(logical_id)
        belongs = [
            other
            for other, resource in self.resources.items()
            if resource["Type"].startswith("AWS::ApiGateway::")
            and _refers_to(resource.get("Properties", {}).get("RestApiId"), logical_id)
        ]
        paths = {self.get_att(logical_id, "RootResourceId"): "/"}
        pending = [other for other in belongs if self.resources[other]["Type"] == "AWS::ApiGateway::Resource"]
        while pending:  # parents before children, in any template order
            progressed = False
            for other in list(pending):
                properties = self.properties(other)
                parent = paths.get(properties["ParentId"])
                if parent is not None:
                    paths[self.ref(other)] = parent.rstrip("/") + "/" + properties["PathPart"]
                    pending.remove(other)
                    progressed = True
            if not progressed:
                raise TemplateError(f"{logical_id}: resources {pending} have no parent in the template")
        stages = [
            self.properties(other)
            for other in belongs
            if self.resources[other]["Type"] == "AWS::ApiGateway::Stage"
        ]
        stage: dict[str, Any] = stages[0] if stages else {"StageName": "prod"}
        throttle: dict[str, Any] = next(
            (
                s
                for s in stage.get("MethodSettings", [])
                if s.get("ResourcePath") == "/*" and s.get("HttpMethod") == "*"
            ),
            {},
        )
        methods = tuple(
            self.method(other, paths)
            for other in belongs
            if self.resources[other]["Type"] == "AWS::ApiGateway::Method"
        )
        return model.RestApi(
            logical_id=logical_id,
            name=self.name(logical_id),
            api_id=api_id,
            stage=stage["StageName"],
            methods=methods,
            throttle_rate=throttle.get("ThrottlingRateLimit"),
            throttle_burst=throttle.get("ThrottlingBurstLimit"),
            policy=self.properties(logical_id).get("Policy"),
            keys=self.key_plans(logical_id),
            # CloudFormation writes a `/` in a media type as `~1` (a JSON Pointer escape) or as is.
            binary_media_types=tuple(
                str(kind).replace("~1", "/")
                for kind in self.properties(logical_id).get("BinaryMediaTypes", [])
            ),
        )

    def key_plans(self, api_logical_id: str) -> tuple[model.KeyPlan, ...]:
        """The keys of the usage plans on this API: each with its plan's throttle and quota."""
        plans = {
            other: self.properties(other)
            for other, resource in self.resources.items()
            if resource["Type"] == "AWS::ApiGateway::UsagePlan"
            and any(
                _refers_to(stage.get("ApiId"), api_logical_id)
                for stage in resource.get("Properties", {}).get("ApiStages", [])
            )
        }
        found = []
        for resource in self.resources.values():
            if resource["Type"] != "AWS::ApiGateway::UsagePlanKey":
                continue
            raw = resource.get("Properties", {})
            plan_id, key_id = raw.get("UsagePlanId", {}).get("Ref"), raw.get("KeyId", {}).get("Ref")
            if plan_id not in plans or key_id not in self.resources:
                continue
            plan, key = plans[plan_id], self.properties(key_id)
            throttle, quota = plan.get("Throttle", {}), plan.get("Quota", {})
            name = str(key.get("Name") or self.name(key_id))
            found.append(
                model.KeyPlan(
                    name=name,
                    # API Gateway makes a key's value when the template gives none: one per name here.
                    value=str(key.get("Value") or "local-" + hashlib.sha256(name.encode()).hexdigest()[:32]),
                    throttle_rate=throttle.get("RateLimit"),
                    throttle_burst=throttle.get("BurstLimit"),
                    quota_limit=quota.get("Limit"),
                    quota_period=quota.get("Period", "DAY"),
                )
            )
        return tuple(found)

    def method(self, logical_id: str, paths: Mapping[str, str]) -> model.Method:
        properties = self.properties(logical_id)
        integration = properties.get("Integration", {})
        match = _INTEGRATION_FUNCTION.search(str(integration.get("Uri", "")))
        proxy = integration.get("Type") == "AWS_PROXY" and match is not None
        validator = {}
        validator_id = self.resources[logical_id]["Properties"].get("RequestValidatorId")
        if isinstance(validator_id, dict) and "Ref" in validator_id:
            validator = self.properties(validator_id["Ref"])
        models = {}
        for content_type, reference in (
            self.resources[logical_id]["Properties"].get("RequestModels", {}).items()
        ):
            if isinstance(reference, dict) and reference.get("Ref") in self.resources:
                models[content_type] = self.properties(reference["Ref"])["Schema"]
        return model.Method(
            path=paths[properties["ResourceId"]],
            http_method=properties["HttpMethod"],
            function_name=match.group(1) if proxy and match else None,
            authorization=properties.get("AuthorizationType", "NONE"),
            api_key_required=bool(properties.get("ApiKeyRequired", False)),
            validate_body=bool(validator.get("ValidateRequestBody", False)),
            validate_parameters=bool(validator.get("ValidateRequestParameters", False)),
            request_models=models,
            required_parameters={
                key: bool(value) for key, value in properties.get("RequestParameters", {}).items()
            },
        )


def _refers_to(value: Any, logical_id: str) -> bool:
    return isinstance(value, dict) and value.get("Ref") == logical_id
