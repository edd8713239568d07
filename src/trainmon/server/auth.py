"""Who may talk to the server: on loopback anyone on this machine; on any other address only a
holder of the access token (a bearer token, or the cookie the login page sets). Either way, a
request that changes state must come from the server's own pages, not another site's.

The token lives in the data directory (``server-token``, mode 0600), made on the first start that
needs it and printed then, once."""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
import socket
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from .. import config
from ..errors import Forbidden, TrainmonError, Unauthorized
from .jsonio import dumps

COOKIE = "trainmon_token"
TOKEN_FILE = "server-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
OPEN_PATHS = frozenset({"/login"})  # the one page a visitor without the token may see



def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:  # a name: loopback only if every address it names is
            infos = socket.getaddrinfo(host, None)
        except OSError:
            return False
        return bool(infos) and all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


def load_token(home: Path, token_file: Path | None) -> tuple[str, bool]:
    """The access token and whether it was made just now. ``token_file`` must exist when given; the
    default one is made on first use. A token file that others may read is refused."""
    path = token_file or home / TOKEN_FILE
    if token_file is None and not path.exists():
        config.make_private_dir(home)
        token = secrets.token_urlsafe(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(token + "\n")
        return token, True
    try:
        mode = path.stat().st_mode
        token = path.read_text().strip()
    except OSError as exc:
        raise Unauthorized(f"no access token could be read from {path} ({exc.strerror}): a server on an address "
                           "other than loopback needs one") from None
    if mode & 0o077:
        raise Unauthorized(f"the access token {path} may be read by other users (mode {mode & 0o777:o}): "
                           f"chmod 600 {path}")
    if len(token) < 16:
        raise Unauthorized(f"the access token in {path} is empty or shorter than 16 characters")
    return token, False


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _cookie(scope: Scope, name: str) -> str | None:
    for part in (_header(scope, b"cookie") or "").split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


def presented_token(scope: Scope) -> str | None:
    authorization = _header(scope, b"authorization") or ""
    if authorization.lower().startswith("bearer "):
        return authorization[7:].strip()
    return _cookie(scope, COOKIE) or None  # (never the URL: a token there ends up in logs and histories)


def same_origin(scope: Scope) -> bool:
    """Whether a request that changes state comes from the server's own pages (or from no page at
    all, as a script's does): its Origin, when it sends one, is the server's."""
    if _header(scope, b"sec-fetch-site") == "cross-site":
        return False
    origin = _header(scope, b"origin")
    if origin is None:
        return True
    host = _header(scope, b"host")
    return host is not None and origin in (f"http://{host}", f"https://{host}")


class Guard:
    """ASGI middleware: the token (when one is required) and the same-origin rule."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if scope["method"] not in SAFE_METHODS and not same_origin(scope):
            await _refuse(send, Forbidden("a request that changes state must come from this server's own pages, "
                                          "not from another site"))
            return
        if self.token is not None and path not in OPEN_PATHS:
            given = presented_token(scope)
            if given is None or not hmac.compare_digest(given.encode(), self.token.encode()):
                if scope["method"] == "GET" and not path.startswith(("/api/", "/metrics", "/static/")):
                    await _redirect(send, "/login")
                else:
                    await _refuse(send, Unauthorized("this server needs its access token: send it as "
                                                     "'Authorization: Bearer TOKEN', or sign in at /login"))
                return
        await self.app(scope, receive, send)


async def _refuse(send: Send, exc: TrainmonError) -> None:
    payload = dumps({"error": {"code": exc.code, "message": exc.message}})
    await _respond(send, exc.http_status, [(b"content-type", b"application/json")], payload)


async def _redirect(send: Send, location: str) -> None:
    await _respond(send, 303, [(b"location", location.encode())], b"")


async def _respond(send: Send, status: int, headers: list[tuple[bytes, bytes]], payload: bytes) -> None:
    start: dict[str, Any] = {"type": "http.response.start", "status": status,
                             "headers": [*headers, (b"content-length", str(len(payload)).encode())]}
    await send(start)
    await send({"type": "http.response.body", "body": payload})
