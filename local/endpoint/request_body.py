"""A request's JSON body: read from the WSGI input once, put back for moto, kept in the environ."""

from __future__ import annotations

import io
import json
from typing import Any

#: Where the parsed body is kept for the next reader of the same request.
CACHE_KEY = "shardline.body"


def json_body(environ: dict[str, Any]) -> dict[str, Any] | None:
    """The body as a JSON object, or None when it is not one (not JSON, or not an object)."""
    cached: dict[str, Any] | None = environ.get(CACHE_KEY)
    if cached is not None:
        return cached
    length = int(environ.get("CONTENT_LENGTH") or 0)
    raw = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(raw)
    try:
        body = json.loads(raw or b"{}")
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    environ[CACHE_KEY] = body
    return body
