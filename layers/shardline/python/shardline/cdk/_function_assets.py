"""What a function's code asset ships: an allow-list, never the whole folder.

A handler folder on a developer's machine holds more than the handler: `.env` files, credentials a
script left, caches, tests, editor swap files. Shipping the folder ships them to S3 and into every
execution environment. The asset is instead built from:

- the folder's Python modules (`*.py`, in subfolders too), outside `tests`/`test` folders, hidden
  files and folders (`.name`), `__pycache__`, and test modules (`test_*.py`, `*_test.py`,
  `conftest.py`);
- the data files the folder declares in `shardline-assets.txt`: one glob a line, relative to the
  folder (`schema/*.json`, `templates/**/*.html`), `#` comments. A glob that matches nothing is an
  error naming the file and the line, and a declared file is still never hidden nor under
  `__pycache__`/tests.

Only regular files are copied (a symlink, which could point anywhere on the machine, is not
followed), into a private build folder (`shardline.cdk._staging`), which CDK stages as the asset.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from shardline.cdk._staging import private_build_folder

__all__ = ["ASSETS_FILE", "handler_files", "stage_handler"]

#: The file in a handler folder declaring its data files (never shipped itself).
ASSETS_FILE = "shardline-assets.txt"
#: Folders whose files never ship, whatever the patterns say.
NEVER_FOLDERS = frozenset({"__pycache__", "tests", "test"})


def _shippable(relative: Path) -> bool:
    return not any(part.startswith(".") or part in NEVER_FOLDERS for part in relative.parts)


def _is_module(relative: Path) -> bool:
    name = relative.name
    return (
        relative.suffix == ".py"
        and not name.startswith("test_")
        and not name.endswith("_test.py")
        and name != "conftest.py"
    )


def _regular_files(folder: Path) -> list[Path]:
    """Every regular file under `folder`, relative, without following symlinks."""
    found = []
    for path in folder.rglob("*"):
        relative = path.relative_to(folder)
        if (
            path.is_file()
            and not path.is_symlink()
            and not any(
                (folder / Path(*relative.parts[:depth])).is_symlink()
                for depth in range(1, len(relative.parts))
            )
        ):
            found.append(relative)
    return sorted(found)


def _matching(folder: Path, pattern: str) -> set[Path]:
    """The paths under `folder` that glob `pattern` (relative to it) names; none for an absolute one."""
    if Path(pattern).is_absolute() or ".." in Path(pattern).parts:
        return set()
    return {path.relative_to(folder) for path in folder.glob(pattern)}


def handler_files(folder: Path) -> list[Path]:
    """The files of handler folder `folder` its asset ships, relative to it."""
    files = [relative for relative in _regular_files(folder) if _shippable(relative)]
    shipped = {relative for relative in files if _is_module(relative)}
    declaration = folder / ASSETS_FILE
    if declaration.is_file():
        for number, line in enumerate(declaration.read_text().splitlines(), start=1):
            pattern = line.split("#", 1)[0].strip()
            if not pattern:
                continue
            matched = _matching(folder, pattern) & set(files)
            if not matched:
                raise ValueError(
                    f"{declaration}:{number}: {pattern!r} matches no file of the handler folder "
                    "(hidden files, caches and tests never ship)"
                )
            shipped |= matched
    shipped.discard(Path(ASSETS_FILE))
    return sorted(shipped)


def stage_handler(folder: Path) -> Path:
    """A private build folder holding `folder`'s allow-listed files (`handler_files`)."""
    files = handler_files(folder)
    if not files:
        raise ValueError(f"{folder}: no Python module to ship (a handler folder holds its app.py)")
    staged = private_build_folder("function")
    for relative in files:
        target = staged / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(folder / relative, target)
    return staged
