"""Constructs whose `help()` and `inspect.signature` show their own props.

jsii's metaclass (`JSIIMeta.__call__(cls, *args, **kwargs)`) hides every construct's `__init__` from
`inspect.signature(ConsumerGroup)`, so `help(ConsumerGroup)` and an editor's hover showed
`(*args, **kwargs)`. A class's `__signature__` is what `inspect` reads first."""

from __future__ import annotations

import inspect
from typing import TypeVar

_Construct = TypeVar("_Construct", bound=type)


def shows_its_props(cls: _Construct) -> _Construct:
    """Class decorator: `inspect.signature(cls)` is its `__init__`'s, without `self`."""
    init = inspect.signature(cls.__init__)  # type: ignore[misc]
    cls.__signature__ = init.replace(parameters=list(init.parameters.values())[1:])  # type: ignore[attr-defined]
    return cls
