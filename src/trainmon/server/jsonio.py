"""JSON in and out of the server: one error shape everywhere, times as epoch seconds (as AWS's JSON
protocols send them), non-finite numbers as the strings "NaN", "Infinity" and "-Infinity"."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..errors import PayloadTooLarge, TrainmonError, ValidationException
from ..plainjson import finite

MAX_BODY_BYTES = 20 << 20  # TestMetricDefinitions takes 16 MiB of sample text



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
    return reply({"error": {"code": exc.code, "message": exc.message}}, exc.http_status)


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


def json_object(data: bytes, error: type[TrainmonError] = ValidationException) -> dict[str, Any]:
    """A body's JSON object (an empty body is an empty object); ``error`` says why it is not one."""
    if not data.strip():
        return {}
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise error(f"the request body is not JSON: {exc}.") from None
    if not isinstance(value, dict):
        raise error("the request body must be a JSON object.")
    return value


async def body(request: Request) -> dict[str, Any]:
    """The request's JSON object (an empty body is an empty object)."""
    return json_object(await read_body(request))
