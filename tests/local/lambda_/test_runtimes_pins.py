"""The pins an installed runtime installs the Lambda runtime's packages from (`local/lambda_/pins.txt`,
shipped in the wheel) are the lock's: the same versions and hashes as `make setup` installs here."""

from __future__ import annotations

from local import home
from local.lambda_ import runtimes


def test_pins_txt_is_the_locks_entries_for_the_runtime_and_powertools_packages() -> None:
    assert home.IN_REPOSITORY and runtimes.LOCK.name == "requirements-dev.lock"
    assert runtimes.PINS.read_text() == runtimes.pins_text(), (
        "local/lambda_/pins.txt is stale: run `.venv/bin/python -m local.lambda_.runtimes pins`"
    )
    for package in (*runtimes.RUNTIME_PACKAGES, *runtimes.POWERTOOLS_PACKAGES):
        assert f"\n{package}==" in "\n" + runtimes.PINS.read_text(), package
    assert "--hash=sha256:" in runtimes.PINS.read_text()


def test_in_the_repository_state_stays_under_dot_local() -> None:
    assert home.state_dir().as_posix() == ".local"
    assert runtimes.ROOT == home.REPOSITORY / ".local" / "lambda"  # type: ignore[operator]
    assert home.module("endpoint") == "local.endpoint"
