"""Lazy re-exports for shardline's packages (PEP 562): a name's module loads on first access.

A package lists `{public name: private module}` once; `from shardline.producer import Producer`
then imports only what `Producer` needs, and a Lambda cold start pays for nothing it never uses.
Type checkers read the package's `if TYPE_CHECKING:` imports instead.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for `package`. `exports` maps each public name to the module that
    defines it: a submodule of `package` (`"_records"`) or an absolute name (`"shardline.errors"`)."""

    def __getattr__(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module if "." in module else f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
