"""Functions run as Lambda packages them (issue 27, item 1): the runtime's Python, only the code, the
layers and the runtime's own packages importable, the code read-only, /tmp private and bounded.

Each handler is written by the test into a folder of its own; the worker that runs it is real."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from local.app.model import Function
from local.lambda_ import sandbox
from local.lambda_.runtimes import find_interpreter, packaging_for, public_layer_dir
from tests.support.workers import POWERTOOLS_LAYER, REPO

POWERTOOLS = POWERTOOLS_LAYER
NEEDS_312 = pytest.mark.skipif(
    find_interpreter("python3.12") is None, reason="no Python 3.12 on this machine"
)


def handler_function(tmp_path: Path, source: str, **settings: Any) -> Function:
    code = tmp_path / "code"
    code.mkdir()
    (code / "app.py").write_text(textwrap.dedent(source))
    return Function("Probe", "probe", "app.handler", code, **settings)


def log_of(functions: Any) -> str:
    return functions.log_path("probe").read_text()


def test_a_package_the_handler_imports_without_shipping_it_fails_as_in_lambda(make_functions, tmp_path):
    """jsonschema is in the project's venv, not in the function's package: Runtime.ImportModuleError."""
    functions = make_functions(
        handler_function(tmp_path, "import jsonschema\n\ndef handler(e, c):\n    return 1\n")
    )
    result = functions.invoke("probe", {})
    assert result.function_error == "Unhandled"
    assert result.payload["errorType"] == "Runtime.ImportModuleError"
    assert result.payload["errorMessage"] == "Unable to import module 'app': No module named 'jsonschema'"
    assert "Runtime.ImportModuleError" in log_of(functions)
    assert functions.stats()["probe"]["init_errors"] >= 1


def test_the_runtimes_own_boto3_and_the_powertools_layer_are_importable(make_functions, tmp_path):
    source = """
        import boto3, aws_lambda_powertools

        def handler(event, context):
            return [boto3.__file__, aws_lambda_powertools.__file__]
    """
    functions = make_functions(handler_function(tmp_path, source, public_layers=(POWERTOOLS,)))
    boto3_file, powertools_file = functions.invoke("probe", {}).payload
    layer = public_layer_dir(POWERTOOLS)
    assert layer is not None and powertools_file.startswith(str(layer / "python"))
    assert boto3_file.startswith(str(REPO / ".local" / "lambda" / "python3.12" / "site"))


@NEEDS_312
def test_the_function_runs_on_its_runtimes_python(make_functions, tmp_path):
    """`type` statements are Python 3.12 syntax: they run because the worker is 3.12, as deployed."""
    source = """
        import sys
        type Pair = tuple[int, int]

        def handler(event, context):
            return list(sys.version_info[:2])
    """
    functions = make_functions(handler_function(tmp_path, source))
    assert functions.invoke("probe", {}).payload == [3, 12]
    assert "Runtime Version: python3.12 (local, CPython 3.12" in log_of(functions)
    assert packaging_for(functions_function(functions)).as_deployed


def functions_function(functions: Any) -> Function:
    return functions._pools["probe"].function  # the Function the pool runs


WRITES = """
    import errno, os

    def attempt(path, size=1):
        try:
            with open(path, "wb") as out:
                out.write(b"x" * size)
        except OSError as exc:
            return errno.errorcode[exc.errno]
        return "written"

    def handler(event, context):
        if event["where"] == "code":
            return attempt(os.path.join(os.environ["LAMBDA_TASK_ROOT"], "new.txt"))
        if event["where"] == "cwd":
            return attempt("relative.txt")
        if event["where"] == "tmp":
            return attempt("/tmp/scratch", event.get("size", 1))
        return sorted(os.listdir("/tmp"))
"""


def isolated_or_said_not(functions: Any) -> bool:
    """True when the workers are sandboxed (`local.lambda_.sandbox`: this machine allows a user
    namespace); otherwise the function is reported not as deployed."""
    if sandbox.refused() is None:
        return True
    note = functions.stats()["probe"]["not_as_deployed"]
    assert note is not None and "not sandboxed" in note, note
    return False


def test_the_code_folder_is_read_only_to_the_handler(make_functions, tmp_path):
    functions = make_functions(handler_function(tmp_path, WRITES))
    functions.invoke("probe", {"where": "list"})
    if not isolated_or_said_not(functions):
        pytest.skip("this machine refuses user namespaces: the function is reported not as deployed")
    assert functions.invoke("probe", {"where": "code"}).payload == "EROFS"
    assert functions.invoke("probe", {"where": "cwd"}).payload == "EROFS"
    assert not (tmp_path / "code" / "new.txt").exists()


def test_tmp_is_private_to_each_environment_and_bounded_by_ephemeral_storage(make_functions, tmp_path):
    host_only = Path("/tmp") / f"host-only-{tmp_path.name}"
    host_only.write_text("the host's")
    function = handler_function(tmp_path, WRITES, ephemeral_storage_mb=2)
    functions = make_functions(function)
    functions.invoke("probe", {"where": "code"})
    if not isolated_or_said_not(functions):
        pytest.skip("this machine refuses user namespaces: the function is reported not as deployed")
    # Empty, but for the way to the folders bound read-only into it when they live under the host's
    # /tmp (a test's code folder; a clone of the repository there, with its runtime site).
    packaging = packaging_for(function)
    bound = [tmp_path / "code", *filter(None, [packaging.site]), *packaging.public_layers]
    way_to_code = sorted(
        {
            path.resolve().relative_to("/tmp").parts[0]
            for path in bound
            if path.resolve().is_relative_to("/tmp")
        }
    )
    assert host_only.name not in way_to_code
    assert functions.invoke("probe", {"where": "list"}).payload == way_to_code
    assert functions.invoke("probe", {"where": "tmp"}).payload == "written"
    assert functions.invoke("probe", {"where": "list"}).payload == sorted([*way_to_code, "scratch"])
    assert not Path("/tmp/scratch").exists(), "not the host's /tmp"
    assert functions.invoke("probe", {"where": "tmp", "size": 3 * 1024 * 1024}).payload == "ENOSPC"
    host_only.unlink()


def test_a_public_layer_without_a_local_copy_is_said_not_as_deployed(make_functions, tmp_path):
    unknown = "arn:aws:lambda:us-east-1:123456789012:layer:someone-elses:7"
    function = handler_function(tmp_path, "def handler(e, c):\n    return 1\n", public_layers=(unknown,))
    functions = make_functions(function)
    assert functions.invoke("probe", {}).payload == 1
    note = functions.stats()["probe"]["not_as_deployed"]
    assert note is not None and unknown in note
    assert f"layer {unknown} has no local copy" in log_of(functions)


SLOW_START = """
    import time
    time.sleep(1.0)  # an init longer than the phase's limit (shortened to 0.3 s for the test)

    def handler(event, context):
        return "ready"
"""


def test_an_init_over_the_phases_limit_is_retried_under_the_function_timeout(make_functions, tmp_path):
    """Lambda: an on-demand init that outlasts its 10 s runs again in the first invocation, bounded by
    the function's timeout; the invocation succeeds, slowly."""
    functions = make_functions(handler_function(tmp_path, SLOW_START, timeout_seconds=5), init_timeout=0.3)
    result = functions.invoke("probe", {})
    assert (result.function_error, result.payload) == (None, "ready")
    assert "Phase: init\tStatus: timeout" in log_of(functions)


def test_an_init_over_the_function_timeout_too_is_a_timeout(make_functions, tmp_path):
    slower = SLOW_START.replace("time.sleep(1.0)", "time.sleep(4.0)")
    functions = make_functions(handler_function(tmp_path, slower, timeout_seconds=1), init_timeout=0.3)
    result = functions.invoke("probe", {})
    assert (result.function_error, result.payload["errorType"]) == ("Unhandled", "Sandbox.Timedout")
