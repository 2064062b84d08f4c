"""Reading the `shardline` context: typed values from one mapping, every error naming its key."""

from __future__ import annotations

import builtins
import re
from collections.abc import Mapping
from typing import Any

NAME = re.compile(r"^[a-zA-Z0-9_.-]{1,64}$")
ROLE_OR_USER_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:(role|user)/[A-Za-z0-9+=,.@_/-]+$")


def logical_id(name: str) -> str:
    """A name as a CloudFormation logical id part (letters and digits only): `event-sink` ->
    `EventSink`, as the stack's outputs spell it (`EventSinkLeaseTable`)."""
    return "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", name))


class ConfigError(ValueError):
    """The pipeline configuration is invalid; the message names the key."""


class Reader:
    """Reads typed values from one mapping, naming the key in every error."""

    def __init__(self, data: Any, path: str) -> None:
        if not isinstance(data, Mapping):
            raise ConfigError(f"{path}: must be an object, got {type(data).__name__}")
        self.data, self.path = data, path

    def _fail(self, key: str, message: str) -> ConfigError:
        return ConfigError(f"{self.path}.{key}: {message}")

    def int(self, key: str, default: int | None = None, *, low: int, high: int) -> int:
        value = self.data.get(key, default)
        if value is None:
            raise self._fail(key, "is required")
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._fail(key, f"must be an integer, got {value!r}")
        if not low <= value <= high:
            raise self._fail(key, f"must be within {low}..{high}, got {value}")
        return value

    def number(self, key: str, default: float, *, low: float, high: float) -> float:
        value = self.data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
            raise self._fail(key, f"must be a number within {low}..{high}, got {value!r}")
        return float(value)

    def str(self, key: str, default: str | None = None, *, choices: tuple[str, ...] = ()) -> str:
        value = self.data.get(key, default)
        if value is None:
            raise self._fail(key, "is required")
        if not isinstance(value, str):
            raise self._fail(key, f"must be a string, got {value!r}")
        if choices and value not in choices:
            raise self._fail(key, f"must be one of {', '.join(choices)}, got {value!r}")
        return value

    def name(self, key: builtins.str) -> builtins.str:
        value = self.str(key)
        if not NAME.match(value):
            raise self._fail(key, f"must be 1-64 letters, digits, '_', '.' or '-', got {value!r}")
        return value

    def bool(self, key: builtins.str, default: builtins.bool) -> builtins.bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            raise self._fail(key, f"must be true or false, got {value!r}")
        return value

    def list(self, key: builtins.str) -> builtins.list[Any]:
        value = self.data.get(key, [])
        if not isinstance(value, list):
            raise self._fail(key, "must be a list")
        return value


def principal_arns(read: Reader, key: str) -> tuple[str, ...]:
    """The list at `key`, each an IAM role or user ARN."""
    arns = read.list(key)
    for index, arn in enumerate(arns):
        if not isinstance(arn, str) or not ROLE_OR_USER_ARN.match(arn):
            raise ConfigError(f"{read.path}.{key}[{index}]: not an IAM role or user ARN: {arn!r}")
    return tuple(arns)
