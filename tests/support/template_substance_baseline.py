"""`python -m tests.support.template_substance_baseline`: synthesize the default app and write its
template's substance as tests/infra/baselines/shardline-dev.substance.json (see test_template_substance)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from tests.support.template_substance import load_template, substance

REPO = Path(__file__).resolve().parents[2]


def main() -> None:
    from app import CDK_JSON, build

    with tempfile.TemporaryDirectory() as outdir:
        app, _ = build(json.loads(CDK_JSON.read_text())["context"], outdir=outdir)
        app.synth()
        kept = substance(load_template(Path(outdir)))
    target = REPO / "tests" / "infra" / "baselines" / "shardline-dev.substance.json"
    target.write_text(json.dumps(kept, indent=1, sort_keys=True) + "\n")
    print(f"wrote {target.relative_to(REPO)} ({len(kept['Resources'])} resources)")


if __name__ == "__main__":
    main()
