"""Local handlers run without the power to remount or write the repository (issue 40, the security
review): a real handler, run by the local runtime's workers, in a temp copy of a project folder,
tries to write the project, to remount its code read-write and to mount a tmpfs; each is refused
with the errno Lambda gives, and nothing is written. As root (this process), as a normal user (uid
65534, by `setpriv`), and on a machine that refuses user namespaces (said plainly)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from local.app.model import Function, WorkerService
from local.lambda_.runtimes import find_interpreter
from tests.support.workers import REPO, wait_until

ATTEMPTS = """
    import ctypes, errno, os, tempfile

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    MS_REMOUNT, MS_BIND = 32, 4096

    def outcome(result):
        return "done" if result == 0 else errno.errorcode[ctypes.get_errno()]

    def write(path):
        try:
            with open(path, "w") as out:
                out.write("written by the handler")
        except OSError as exc:
            return errno.errorcode[exc.errno]
        return "written"

    def attempts(code):
        project = os.path.dirname(os.path.dirname(code))
        remount = outcome(libc.mount(None, code.encode(), None, MS_REMOUNT | MS_BIND, None))
        mount = outcome(libc.mount(b"tmpfs", code.encode(), b"tmpfs", 0, None))
        if mount == "done":  # not sandboxed (the old code): leave no mount behind on the host
            libc.umount2(code.encode(), 2)
        return {
            "project": write(os.path.join(project, "README.md")),
            "venv": write(os.path.join(project, ".venv", "planted.py")),
            "code": write(os.path.join(code, "app.py")),
            "remount": remount,
            "code_after_remount": write(os.path.join(code, "planted.txt")),
            "mount": mount,
            "tmp": write(os.path.join(tempfile.gettempdir(), "scratch")),  # unsandboxed: a private TMPDIR
        }

    def handler(event, context):
        return attempts(os.environ["LAMBDA_TASK_ROOT"])
"""
#: The module of a worker task or a redrive worker: the attempts at import, told on stderr (its log).
AT_IMPORT = """
import json, sys
print("ATTEMPTS " + json.dumps(attempts(os.getcwd())), file=sys.stderr, flush=True)
"""

REFUSED = {
    "project": "EROFS",
    "venv": "EROFS",
    "code": "EROFS",
    "remount": "EPERM",
    "code_after_remount": "EROFS",
    "mount": "EPERM",
    "tmp": "written",
}


def make_project(root: Path, source: str = ATTEMPTS) -> Function:
    """A temp copy of a project folder: its marker, a venv, a README, and one function's code."""
    (root / "pyproject.toml").write_text("[project]\nname = 'probe'\n")
    (root / ".venv").mkdir()
    (root / "README.md").write_text("the project's\n")
    code = root / "functions" / "probe"
    code.mkdir(parents=True)
    (code / "app.py").write_text(textwrap.dedent(source))
    return Function("Probe", "probe", "app.handler", code)


def untouched(root: Path, source: str = ATTEMPTS) -> None:
    assert (root / "README.md").read_text() == "the project's\n"
    assert not (root / ".venv" / "planted.py").exists()
    assert not (root / "functions" / "probe" / "planted.txt").exists()
    assert (root / "functions" / "probe" / "app.py").read_text() == textwrap.dedent(source)


@pytest.fixture
def attempts(make_functions: Any, tmp_path: Path) -> Iterator[dict[str, str]]:
    root = tmp_path / "project"
    root.mkdir()
    functions = make_functions(make_project(root))
    assert functions.stats()["probe"]["not_as_deployed"] is None or "not sandboxed" not in str(
        functions.stats()["probe"]["not_as_deployed"]
    )
    result = functions.invoke("probe", {})
    assert result.function_error is None, result.payload
    yield result.payload
    untouched(root)


def test_local_handler_cannot_write_the_repository(attempts: dict[str, str]) -> None:
    assert {key: attempts[key] for key in ("project", "venv", "code", "tmp")} == {
        "project": "EROFS",
        "venv": "EROFS",
        "code": "EROFS",
        "tmp": "written",
    }


def test_local_handler_cannot_remount_its_code(attempts: dict[str, str]) -> None:
    assert (attempts["remount"], attempts["code_after_remount"]) == ("EPERM", "EROFS")


def test_local_handler_cannot_mount(attempts: dict[str, str]) -> None:
    assert attempts["mount"] == "EPERM"


def told_attempts(log: Path) -> dict[str, str] | None:
    lines = log.read_text().splitlines() if log.exists() else []
    found = [json.loads(line.removeprefix("ATTEMPTS ")) for line in lines if line.startswith("ATTEMPTS ")]
    return found[0] if found else None


def _probe_worker(tmp_path: Path) -> tuple[Path, str, WorkerService]:
    """A worker group whose code tries the escapes at import: its project, source and service."""
    root = tmp_path / "project"
    root.mkdir()
    source = textwrap.dedent(ATTEMPTS) + AT_IMPORT + "handle = None\n"
    code = make_project(root, source).code_dir
    environment = {"SHARDLINE_STREAM": "s", "SHARDLINE_GROUP": "probe", "LEASE_TABLE": "t"}
    spec = WorkerService(
        "Probe", "probe", 1, code, REPO / "layers" / "shardline" / "python",
        environment={**environment, "SHARDLINE_HANDLER": "app:handle"},
    )  # fmt: skip
    return root, source, spec


def test_local_ecs_worker_task_cannot_remount_mount_or_write_the_repository(tmp_path: Path) -> None:
    """A worker group's task (local ECS) imports the group's code, which tries the same at import."""
    from local.ecs.services import WorkerServices

    root, source, spec = _probe_worker(tmp_path)
    services = WorkerServices((spec,), endpoint_url="http://127.0.0.1:9", log_dir=tmp_path / "logs").start()
    try:
        log = spec.log_files(tmp_path / "logs")[0]
        assert wait_until(lambda: told_attempts(log) is not None), log.read_text()
    finally:
        services.stop()
    assert told_attempts(log) == REFUSED
    untouched(root, source)


def test_local_redrive_worker_cannot_remount_mount_or_write_the_repository(tmp_path: Path) -> None:
    """The redrive command's process imports the group's code: the same attempts, the same refusals
    (the module defines no consumer: the redrive itself is then refused, with its reason)."""
    from local.commands.redrive import RedriveError, _Worker

    root = tmp_path / "project"
    root.mkdir()
    source = textwrap.dedent(ATTEMPTS) + AT_IMPORT
    function = make_project(root, source)
    with pytest.raises(RedriveError, match="function probe: "):
        _Worker(function, "http://127.0.0.1:9", tmp_path / "logs")
    assert told_attempts(tmp_path / "logs" / "probe.log") == REFUSED
    untouched(root, source)


#: Run by the tests below in a process of their own: the local runtime's workers run the probe of
#: the project at argv[1]; the invocation's result and the function's status on stdout.
RUN_PROBE = """
import json, sys
from pathlib import Path
sys.path.insert(0, {repo!r})
from local.lambda_.workers import Functions
from tests.local.lambda_.test_sandbox import make_project

root = Path(sys.argv[1])
functions = Functions([make_project(root)], endpoint_url="http://127.0.0.1:9", log_dir=root.parent / "logs")
try:
    result = functions.invoke("probe", {{}})
    print(json.dumps({{"payload": result.payload, "status": functions.stats()["probe"]}}))
finally:
    functions.close()
"""


def run_probe(prefix: list[str], root: Path) -> dict[str, Any]:
    script = root.parent / "run_probe.py"
    script.write_text(RUN_PROBE.format(repo=str(REPO)))
    done = subprocess.run(
        [*prefix, sys.executable, str(script), str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return answer


@pytest.mark.skipif(os.getuid() != 0, reason="runs the normal user's case from root (setpriv)")
def test_local_handler_as_a_normal_user_cannot_remount_mount_or_write_the_repository() -> None:
    """The same attempts with the runtime run by uid 65534 in a temp folder it owns. The
    interpreter lives under /root (0700 here): the test's own mount namespace shows it to that uid."""
    python312 = find_interpreter("python3.12")
    prefixes = {
        os.path.realpath(sys.base_prefix),
        *([str(Path(python312).resolve().parents[1])] if python312 else []),
    }
    hidden = sorted(prefix for prefix in prefixes if prefix.startswith("/root/"))
    folder = Path(tempfile.mkdtemp(prefix="sandbox-nobody-", dir="/tmp"))
    try:
        root = folder / "project"
        root.mkdir()
        steps = [f"mkdir -p {folder}/.{n} && mount --bind {p} {folder}/.{n}" for n, p in enumerate(hidden)]
        steps += ["mount -t tmpfs -o mode=755 tmpfs /root"] if hidden else []
        steps += [f"mkdir -p {p} && mount --move {folder}/.{n} {p}" for n, p in enumerate(hidden)]
        steps += [
            f"chown -R 65534:65534 {folder}",
            'exec setpriv --reuid=65534 --regid=65534 --clear-groups "$@"',
        ]
        answer = run_probe(["unshare", "--mount", "sh", "-c", " && ".join(steps), "sh"], root)
        assert answer["payload"] == REFUSED
        assert (
            answer["status"]["not_as_deployed"] is None
            or "not sandboxed" not in answer["status"]["not_as_deployed"]
        )
        untouched(root)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_local_handler_told_plainly_when_the_machine_refuses(tmp_path: Path) -> None:
    """A machine whose kernel refuses user namespaces (here: a namespace whose
    user.max_user_namespaces is 0): status and the function's log name the setting and what is then
    not enforced; the handler runs, unsandboxed, as the runtime said."""
    from local.lambda_ import sandbox

    root = tmp_path / "project"
    root.mkdir()
    refuse = 'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"'
    answer = run_probe(["unshare", "--user", "--map-root-user", "sh", "-c", refuse, "sh"], root)
    note = answer["status"]["not_as_deployed"]
    setting = "user namespaces are off (/proc/sys/user/max_user_namespaces is 0)"
    assert f"not sandboxed: unshare(CLONE_NEWUSER|CLONE_NEWNS): No space left on device: {setting}" in note
    assert sandbox.NOT_ENFORCED in note
    log = (tmp_path / "logs" / "probe.log").read_text()
    assert "local runtime: not sandboxed: unshare(CLONE_NEWUSER|CLONE_NEWNS)" in log and setting in log
    assert answer["payload"]["project"] == "written", "not enforced, as said"


def test_a_worker_task_without_its_runtimes_interpreter_runs_on_this_one_sandboxed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No python3.12 on the machine (a team's HOME without pyenv's): the tasks run on this runtime's
    interpreter, by its path, which the sandbox execs without a PATH search (a bare "python3" made
    every task of a team's worker group fail with FileNotFoundError)."""
    from local.ecs import services as ecs_services

    monkeypatch.setattr(ecs_services.runtimes, "find_interpreter", lambda runtime: None)
    *_, spec = _probe_worker(tmp_path)
    logs = tmp_path / "logs"
    services = ecs_services.WorkerServices((spec,), endpoint_url="http://127.0.0.1:9", log_dir=logs)
    assert services.interpreter == sys.executable
    assert "the workers run on Python 3." in (services.note or "")
    services.start()
    try:
        log = spec.log_files(logs)[0]
        assert wait_until(lambda: told_attempts(log) is not None), log.read_text()
    finally:
        services.stop()
    assert told_attempts(log) == REFUSED
