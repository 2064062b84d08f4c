"""The local dashboard in a real browser: headless Chromium (Debian's package) driven by
playwright-core through tests/e2e/browser/dashboard.mjs; screenshots go to build/test-output/."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tests.support.node import NODE

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "e2e" / "browser" / "dashboard.mjs"
OUTPUT = ROOT / "build" / "test-output"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def browse(
    url: str,
    name: str,
    until: str,
    timeout_s: float,
    charts: tuple[str, ...] = (),
    *,
    allow_errors: bool = False,
) -> dict[str, Any]:
    """Run the browser script; its report (see dashboard.mjs). `allow_errors`: the page's console
    errors are expected (a file it cannot load), not a failure."""
    assert Path(CHROMIUM).exists(), "Debian's chromium is needed: `make setup` installs it"
    OUTPUT.mkdir(parents=True, exist_ok=True)
    screenshot = OUTPUT / f"{name}.png"
    command = [str(NODE), str(SCRIPT), url, str(screenshot), until, str(timeout_s), "|".join(charts)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s + 120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps({k: v for k, v in report.items() if k != "widgets"}, indent=1)[:4000])
    assert not [e for e in report["errors"] if "left loopback" in e], report["errors"]
    assert allow_errors or not report["errors"], report["errors"]  # no script error
    assert screenshot.stat().st_size > 10_000
    return report
