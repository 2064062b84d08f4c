"""Private build folders for the code the constructs package (shardline's layer, a function's
allow-listed files) before CDK stages it as an asset.

Each folder is `tempfile.mkdtemp`'s: created atomically, mode 0700, a name nobody can guess, under the
temporary folder of the moment. A fixed or per-process path under a shared /tmp is one another local
user could create first (or point elsewhere with a symlink) and so read or replace what is deployed.
Once CDK has staged the asset (copied it into the cloud assembly, when the construct binds the code),
the folder is removed; when staging is off (`aws:cdk:disable-asset-staging`, SAM's local tooling),
the template points at the folder itself, so it stays until the process exits.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from constructs import Construct

__all__ = ["private_build_folder", "release_build_folder"]

#: The context key with which CDK leaves assets where they are instead of copying them.
STAGING_OFF = "aws:cdk:disable-asset-staging"


def private_build_folder(purpose: str) -> Path:
    """A new empty folder of this process only: `<tmp>/shardline-<purpose>-<random>`, mode 0700."""
    return Path(tempfile.mkdtemp(prefix=f"shardline-{purpose}-"))


def release_build_folder(scope: Construct, folder: Path) -> None:
    """`folder` has been bound as the code of a construct in `scope`: removed now if CDK copied it into
    the cloud assembly, at exit otherwise (the assembly refers to it)."""
    if scope.node.try_get_context(STAGING_OFF):
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
    else:
        shutil.rmtree(folder, ignore_errors=True)
