"""A synthesized template in substance: what a deploy would create, name and allow, without what
changes with every build (asset hashes, CDK's own metadata). Two templates equal in substance
deploy the same resources under the same logical ids with the same properties and policies."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

ASSET_HASH = re.compile(r"[0-9a-f]{64}")


def substance(template: dict[str, Any]) -> dict[str, Any]:
    """The template without CDK's metadata and with every asset hash replaced by `<asset>`."""
    resources = {
        logical_id: {key: value for key, value in resource.items() if key != "Metadata"}
        for logical_id, resource in template.get("Resources", {}).items()
        if resource.get("Type") != "AWS::CDK::Metadata"
    }
    kept = {
        "Resources": resources,
        "Parameters": template.get("Parameters", {}),
        "Outputs": template.get("Outputs", {}),
    }
    return json.loads(ASSET_HASH.sub("<asset>", json.dumps(kept, sort_keys=True)))


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What differs, resource by resource: added, removed, changed (type or properties)."""
    lines = []
    old, new = before["Resources"], after["Resources"]
    lines += [f"removed {lid} ({old[lid]['Type']})" for lid in sorted(old.keys() - new.keys())]
    lines += [f"added {lid} ({new[lid]['Type']})" for lid in sorted(new.keys() - old.keys())]
    for lid in sorted(old.keys() & new.keys()):
        if old[lid] != new[lid]:
            keys = sorted(
                key
                for key in old[lid].get("Properties", {}).keys() | new[lid].get("Properties", {}).keys()
                if old[lid].get("Properties", {}).get(key) != new[lid].get("Properties", {}).get(key)
            )
            lines.append(f"changed {lid} ({new[lid]['Type']}): {', '.join(keys) or 'type or attributes'}")
    for part in ("Parameters", "Outputs"):
        if before[part] != after[part]:
            lines.append(f"changed {part}")
    return lines


def load_template(cdk_out: Path, stack: str = "shardline-dev") -> dict[str, Any]:
    return dict(json.loads((cdk_out / f"{stack}.template.json").read_text()))
