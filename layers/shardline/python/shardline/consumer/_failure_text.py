"""What shardline writes about a failed handler: a bounded field, never the record's data by default.

A handler's exception text (`str(exc)`) often quotes the record it failed on — `KeyError: 'card
4111…'`, a `ValueError` with the payload. shardline writes about a failure in three places that
outlive the invocation: the lease row (`lastError`, `stalledCause`), the dead letter (`error`,
`errorType`, `errorFingerprint`, `errorMessage`) and the function's log. All of them get the
exception through `failure_text`, and nothing else of it (no traceback, no `repr`, no `args`):

- `errorType`: the exception's class, qualified by its module (`ValueError` for a builtin,
  `orders.errors.BadOrder` for one of yours), at most `MAX_TYPE_CHARS` characters. Always.
- `errorFingerprint`: the first 12 hex digits (48 bits) of the SHA-256 of the type and the
  message. Always. Identical failures share it, so an operator can count and group them without
  reading them. It is no encryption: a message drawn from a small set (a 4-digit PIN, an enum)
  can be found by hashing the candidates; a team for whom that matters raises exceptions whose
  messages hold no data.
- `errorMessage`: the message itself (`str(exc)`, control characters replaced by spaces so it
  stays one log line), cut to `MAX_MESSAGE_CHARS` (256) characters (a cut one ends in `…`).
  Only with `failure_detail="message"` (the consumer's setting; `FAILURE_DETAIL=message` for
  `ConsumerFunction`): for a team that knows its messages carry no record data.

Where one string is written (`lastError`, the dead letter's `error`, a log line) it is
`FailureText.text`: `ValueError [3f2a9c0b1d2e]`, or with the message opted in
`ValueError [3f2a9c0b1d2e]: bad order` — at most MAX_TYPE_CHARS + 15 + MAX_MESSAGE_CHARS
characters. `FailureText.parse` reads it back (the dead letter's fields come from it, so a
record condemned by an earlier delivery's lease row gets the same fields).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

#: How much of an exception's message is written when `failure_detail="message"`.
MAX_MESSAGE_CHARS = 256
#: How much of an exception's qualified class name is written.
MAX_TYPE_CHARS = 128
#: Hex digits of the fingerprint.
FINGERPRINT_HEX = 12
#: `failure_detail` values: the type and fingerprint only (default), or also the bounded message.
FAILURE_DETAIL_CHOICES = ("fingerprint", "message")

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_TEXT = re.compile(r"(?P<type>[^\s\[\]]+) \[(?P<fingerprint>[0-9a-f]{12})\](?:: (?P<message>.*))?", re.DOTALL)


@dataclass(frozen=True, slots=True)
class FailureText:
    """The bounded account of one failure: `error_type`, `fingerprint`, and `message` (None unless
    opted in)."""

    error_type: str
    fingerprint: str
    message: str | None = None

    @property
    def text(self) -> str:
        """The one-string form: `<type> [<fingerprint>]`, then `: <message>` when there is one."""
        head = f"{self.error_type} [{self.fingerprint}]"
        return head if self.message is None else f"{head}: {self.message}"

    def fields(self) -> dict[str, str]:
        """The dead letter's fields: `errorType`, `errorFingerprint`, and `errorMessage` if any."""
        fields = {"errorType": self.error_type, "errorFingerprint": self.fingerprint}
        if self.message is not None:
            fields["errorMessage"] = self.message
        return fields

    @classmethod
    def parse(cls, text: str) -> FailureText | None:
        """`text` read back (None: it is not in that form, e.g. the note of a crash)."""
        match = _TEXT.fullmatch(text)
        if match is None:
            return None
        return cls(match["type"], match["fingerprint"], match["message"])


def failure_text(exc: BaseException, detail: str = "fingerprint") -> FailureText:
    """`exc` as shardline writes it: its qualified type and fingerprint, and with
    `detail="message"` its message, bounded (see the module's docstring)."""
    if detail not in FAILURE_DETAIL_CHOICES:
        raise ValueError(f"failure detail must be one of {', '.join(FAILURE_DETAIL_CHOICES)}, got {detail!r}")
    kind = type(exc)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    name = _CONTROL.sub(" ", name).replace(" ", "_").replace("[", "(").replace("]", ")")[:MAX_TYPE_CHARS]
    try:
        said = str(exc)
    except Exception:  # a __str__ that raises says nothing
        said = ""
    digest = hashlib.sha256(f"{name}\n{said}".encode(errors="replace")).hexdigest()[:FINGERPRINT_HEX]
    if detail != "message":
        return FailureText(name, digest)
    message = _CONTROL.sub(" ", said)
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[: MAX_MESSAGE_CHARS - 1] + "…"
    return FailureText(name, digest, message)
