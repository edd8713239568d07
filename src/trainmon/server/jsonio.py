"""JSON in and out of the server: one error shape everywhere, times as epoch seconds (as AWS's JSON
protocols send them), non-finite numbers as the strings "NaN", "Infinity" and "-Infinity"."""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..errors import PayloadTooLarge, TrainmonError, ValidationException
from ..plainjson import finite

MAX_BODY_BYTES = 20 << 20  # TestMetricDefinitions takes 16 MiB of sample text
MAX_DEPTH = 64  # arrays and objects within each other: AWS's deepest request shapes are a dozen deep
_NESTING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')  # a string (skipped whole), or a bracket


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.timestamp()
    if hasattr(value, "item"):  # a numpy scalar
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON")


def dumps(value: Any) -> bytes:
    try:
        text = json.dumps(value, default=_plain, allow_nan=False, separators=(",", ":"))
    except ValueError:  # a NaN or an infinity somewhere: rare, so only then walk the value
        text = json.dumps(finite(value), default=_plain, allow_nan=False, separators=(",", ":"))
    return text.encode()


def reply(value: Any, status: int = 200) -> Response:
    return Response(dumps(value), status, media_type="application/json")


def error_reply(exc: TrainmonError) -> Response:
    return reply({"error": exc.brief}, exc.http_status)


async def read_body(request: Request) -> bytes:
    """The request's body, refused past MAX_BODY_BYTES (declared or as it arrives)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise PayloadTooLarge(f"the request body is over {MAX_BODY_BYTES >> 20} MiB.")
    data = bytearray()
    async for piece in request.stream():
        data += piece
        if len(data) > MAX_BODY_BYTES:
            raise PayloadTooLarge(f"the request body is over {MAX_BODY_BYTES >> 20} MiB.")
    return bytes(data)


def nesting(data: bytes) -> int:
    """How deep arrays and objects lie within each other in JSON text (counted up to one past
    MAX_DEPTH), found without parsing: strings are skipped whole."""
    if data.count(b"[") + data.count(b"{") <= MAX_DEPTH:
        return 0  # too few brackets to go deeper (the common case, at the cost of two counts)
    depth = deepest = 0
    for found in _NESTING.finditer(data):
        token = found.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    break
        elif token in (b"]", b"}"):
            depth -= 1
    return deepest


def parse(data: bytes | str, what: str, error: type[TrainmonError] = ValidationException) -> Any:
    """JSON text, its nesting bounded before it is parsed; ``error`` says why it is not JSON (``what``
    names it)."""
    raw = data.encode() if isinstance(data, str) else data
    if nesting(raw) > MAX_DEPTH:
        raise error(f"{what} nests arrays and objects more than {MAX_DEPTH} deep.")
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise error(f"{what} is not JSON: {exc}.") from None


def json_object(data: bytes, error: type[TrainmonError] = ValidationException) -> dict[str, Any]:
    """A body's JSON object (an empty body is an empty object); ``error`` says why it is not one."""
    if not data.strip():
        return {}
    value = parse(data, "the request body", error)
    if not isinstance(value, dict):
        raise error("the request body must be a JSON object.")
    return value


async def body(request: Request) -> dict[str, Any]:
    """The request's JSON object (an empty body is an empty object)."""
    return json_object(await read_body(request))
