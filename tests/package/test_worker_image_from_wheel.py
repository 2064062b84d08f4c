"""Issue 42, property 2: a `WorkerGroup` builds from the installed package.

shardline's wheel (built once for the module, as tests/package/test_local_install.py builds it) is
installed into a fresh virtualenv outside the repository, which borrows only the `cdk` extra's
packages from .venv (a `.pth`; .venv holds no shardline). A team's app there is a folder with
`app.py` and its handler folder, nothing copied out of shardline's repository; `python app.py`
synthesizes it, and the image asset's staged build context is read back:

- it holds the Dockerfile and the worker's lock shipped in the package, a wheel of the shardline
  package the app imported, the lock pinning that wheel by its sha256, and the handler's folder;
- the Dockerfile's own install step of that wheel (`pip install --require-hashes --no-deps
  --no-index -r shardline.lock`) runs for real from the staged folder, and the installed
  `shardline worker` answers; every COPY source of the Dockerfile is in the context;
- an unchanged app stages the same context (the same asset hash: the workers do not roll), an edit
  to the handler changes it, an edit to `shardline.cdk` (not in the image) does not, an edit to the
  library the worker runs does.

Docker is not run here (no daemon, no registry): the image's other install (the worker's packages
for the tasks' platform, from PyPI) is checked against the project's locks in tests/infra.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from shardline.cdk._worker_wheel import build_wheel
from tests.support.wheel import build_shardline_wheel, run, venv_with

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]

APP = """
import sys
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb

import shardline
from shardline.cdk import Sink, Stream, WorkerGroup

# Installed, not the repository's: the package is the venv's, and no path of the repository is read.
repository = Path(sys.argv[1]).resolve()
assert Path(shardline.__file__).resolve().is_relative_to(Path(sys.prefix).resolve()), shardline.__file__
ours = (repository, repository / "layers" / "shardline" / "python")
assert not [p for p in sys.path if p and Path(p).resolve() in ours], sys.path

app = cdk.App(outdir="cdk.out")
stack = cdk.Stack(app, "tally")
stream = Stream(stack, "Orders", stream_name="orders", shards=1)
WorkerGroup(
    stack, "Workers", name="tally", stream=stream, code="handler", handler_object="app:handle",
    sinks=[Sink.create(dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING))],
)
app.synth()
"""
HANDLER = "def handle(record):\n    return []\n"


class TeamApp:
    """The team's folder (app.py, handler/) and the venv's interpreter that synthesizes it."""

    def __init__(self, folder: Path, python: Path) -> None:
        self.folder, self.python = folder, python
        (folder / "handler").mkdir(parents=True)
        (folder / "handler" / "app.py").write_text(HANDLER)
        (folder / "app.py").write_text(APP)

    def synth(self) -> tuple[str, Path, dict[str, Any]]:
        """`python app.py`: the image asset's hash, its staged folder and its source entry."""
        run([str(self.python), "app.py", str(ROOT)], self.folder)
        assets = json.loads((self.folder / "cdk.out" / "tally.assets.json").read_text())
        [(asset_hash, image)] = assets["dockerImages"].items()
        return asset_hash, self.folder / "cdk.out" / image["source"]["directory"], image["source"]

    def site_packages(self) -> Path:
        found = run([str(self.python), "-c", "import shardline; print(shardline.__file__)"], self.folder)
        return Path(found.stdout.strip()).parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_shardline_wheel(tmp_path_factory.mktemp("worker-wheel"))


@pytest.fixture(scope="module")
def team(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> TeamApp:
    root = tmp_path_factory.mktemp("team")
    bin_dir = venv_with(root / "venv", wheel, with_extra=True)
    return TeamApp(root / "orders-app", bin_dir / "python")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def pinned(lock: Path) -> tuple[str, str]:
    """The one requirement of shardline.lock: its file name and its hash."""
    text = lock.read_text()
    entries = re.findall(r"^(\S+\.whl)\s*\\\s*\n\s*--hash=sha256:([0-9a-f]{64})\s*$", text, re.MULTILINE)
    assert len(entries) == 1, text
    return entries[0][0], entries[0][1]


def test_2_a_worker_group_synthesizes_from_the_wheel_with_only_its_handler_folder(
    team: TeamApp, tmp_path: Path
) -> None:
    assert sorted(p.name for p in team.folder.iterdir()) == ["app.py", "handler"], "nothing copied in"
    _, staged, source = team.synth()
    files = sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file())
    [wheel_name] = [f for f in files if f.endswith(".whl")]
    assert files == sorted(
        ["Dockerfile", "requirements.lock", "shardline.lock", wheel_name, "handler/app.py"]
    ), files
    assert source["dockerBuildArgs"] == {"HANDLER": "handler"} and source.get("dockerFile", "Dockerfile") == (
        "Dockerfile"
    )
    installed = team.site_packages()
    # The package's own Dockerfile and lock, byte for byte (one copy: the package data).
    for name in ("Dockerfile", "requirements.lock"):
        assert (staged / name).read_bytes() == (installed / "cdk" / "worker_image" / name).read_bytes()
    # The wheel is pinned by its hash, and it is the installed package's code (less what a worker never
    # runs: the constructs and the local runtime), with the `shardline` command.
    name, digest = pinned(staged / "shardline.lock")
    assert name == f"./{wheel_name}" and digest == sha256(staged / wheel_name)
    assert re.fullmatch(r"shardline-\d+(\.\d+)*([a-z0-9.+]*)?-py3-none-any\.whl", wheel_name), wheel_name
    with zipfile.ZipFile(staged / wheel_name) as archive:
        names = archive.namelist()
        assert names == sorted(names)
        assert {info.date_time for info in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}
        dist_info = wheel_name.split("-py3")[0] + ".dist-info"
        assert {f"{dist_info}/{n}" for n in ("METADATA", "WHEEL", "entry_points.txt", "RECORD")} <= set(names)
        assert b"shardline = shardline._cli:main" in archive.read(f"{dist_info}/entry_points.txt")
        code = {n.removeprefix("shardline/") for n in names if n.startswith("shardline/")}
        for path in installed.rglob("*"):
            relative = path.relative_to(installed).as_posix()
            if (
                path.is_file()
                and "__pycache__" not in relative
                and relative.split("/")[0] not in ("cdk", "local")
            ):
                assert relative in code and archive.read(f"shardline/{relative}") == path.read_bytes(), (
                    relative
                )
        assert not [n for n in code if n.split("/")[0] in ("cdk", "local") or n.endswith(".pyc")]
    # The same package gives the same wheel from the repository's source (one path for everyone).
    ours = build_wheel(tmp_path / "from-the-repository")  # this process imports the repository's
    assert ours.name == wheel_name and ours.read_bytes() == (staged / wheel_name).read_bytes()


def copy_sources(dockerfile: str, handler: str) -> list[str]:
    """Every COPY's sources (not `--from` a stage), continuation lines joined, HANDLER substituted."""
    joined = re.sub(
        r"\\\n", " ", "\n".join(x for x in dockerfile.splitlines() if not x.lstrip().startswith("#"))
    )
    sources = []
    for line in joined.splitlines():
        words = shlex.split(line)
        if words and words[0].upper() == "COPY" and not any(w.startswith("--from") for w in words):
            sources += [w.replace("${HANDLER}", handler) for w in words[1:-1] if not w.startswith("--")]
    return sources


def test_2_the_staged_context_installs_with_pip_require_hashes(team: TeamApp, tmp_path: Path) -> None:
    _, staged, source = team.synth()
    dockerfile = (staged / "Dockerfile").read_text()
    sources = copy_sources(dockerfile, source["dockerBuildArgs"]["HANDLER"])
    assert sources and all(list(staged.glob(pattern)) for pattern in sources), sources
    # The Dockerfile installs the wheel from its lock, hash-checked, with nothing fetched.
    assert re.search(
        r"pip .*install --require-hashes --no-deps --no-index -r (\S*/)?shardline\.lock",
        re.sub(r"\\\n\s*", "", dockerfile),
    ), dockerfile
    target = tmp_path / "target"
    run([sys.executable, "-m", "pip", "install", "--quiet", "--require-hashes", "--no-deps", "--no-index",
          "--target", str(target), "-r", "shardline.lock"], staged)  # fmt: skip
    assert (target / "bin" / "shardline").is_file()
    answer = run([sys.executable, "-I", "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                   "from shardline._cli import main; sys.exit(main(['worker', '--help']))", str(target)],
                  tmp_path)  # fmt: skip
    assert "--lease-table" in answer.stdout and "--handler" in answer.stdout, answer.stdout
    # A wheel that is not the pinned one is refused.
    [wheel_file] = staged.glob("*.whl")
    tampered = tmp_path / "tampered"
    tampered.mkdir()
    (tampered / "shardline.lock").write_text((staged / "shardline.lock").read_text())
    (tampered / wheel_file.name).write_bytes(wheel_file.read_bytes() + b"\0")
    again = ["--target", str(tmp_path / "again"), "-r", "shardline.lock"]
    refused = run([sys.executable, "-m", "pip", "install", "--require-hashes", "--no-deps", "--no-index",
                    *again], tampered, check=False)  # fmt: skip
    assert refused.returncode != 0 and "DO NOT MATCH" in refused.stderr.upper(), refused.stderr


def test_2_an_unchanged_app_stages_the_same_context(team: TeamApp) -> None:
    first, _, _ = team.synth()
    again, _, _ = team.synth()
    assert again == first, "an unchanged app must not roll the workers"
    (team.folder / "handler" / "app.py").write_text(HANDLER + "# changed\n")
    edited, _, _ = team.synth()
    assert edited != first, "an edit to the handler is a new image"
    installed = team.site_packages()
    constructs = installed / "cdk" / "_stream.py"
    constructs.write_text(constructs.read_text() + "\n# an edit to the constructs\n")
    assert team.synth()[0] == edited, "the constructs are not in the image: no new one"
    library = installed / "consumer" / "__init__.py"
    library.write_text(library.read_text() + "\n# an edit to the library the worker runs\n")
    assert team.synth()[0] != edited, "the library the worker runs is in the image"
