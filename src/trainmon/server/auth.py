"""Who may talk to the server: one rule for every door, on loopback as on any other address.

A request is served only when all three hold:

1. **It names this server.** Its ``Host`` is an address (any IP literal), ``localhost``, this
   machine's own name, or a name the operator allowed (``--allow-host``). A page whose name an
   attacker rebound to this machine's address sends its own name and is answered 421, so DNS
   rebinding reaches nothing.
2. **A request that changes state comes from no page, or from this server's own.** Its ``Origin``,
   when it sends one, is ``http(s)://`` and its own (allowed) ``Host``, and its ``Sec-Fetch-Site``
   is not another site's (another port of ``localhost`` is another site).
3. **It carries credentials its door accepts.** The AWS protocols and S3 (presigned URLs too): a
   Signature Version 4 (or, for S3 URLs, 2) by a key ``trainmon credentials`` issued, checked by
   :mod:`.aws`. Every other door (the console's pages, the JSON API, event streams, ``/metrics``,
   static files): the access token as ``Authorization: Bearer``, or the console's session cookie,
   which signing in sets. Only ``/login`` is open.

The token lives in the data directory (``server-token``, mode 0600), made on the first start. A
session cookie and a one-time sign-in link are both signed with it (HMAC-SHA256): neither holds
the token, and making a new token ends every session. A sign-in link is good for 15 minutes and
once per server process; whoever can read the token (this machine's user) can make one, which is
what ``trainmon console`` does.

``--no-credentials`` turns rule 3 off, for an operator who chose it; rules 1 and 2 still hold.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import secrets
import socket
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from .. import config
from ..errors import Forbidden, HttpError, TrainmonError, Unauthorized
from .jsonio import dumps

TOKEN_FILE = "server-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
OPEN_PATHS = frozenset({"/login"})  # the one page a visitor without credentials may see
SESSION_S = 30 * 86_400
SIGN_IN_S = 15 * 60


class Misdirected(HttpError):
    code = "MisdirectedRequest"
    http_status = 421


def load_token(home: Path, token_file: Path | None) -> tuple[str, bool]:
    """The access token and whether it was made just now. ``token_file`` must exist when given; the
    default one is made on first use. A token file that others may read is refused."""
    path = token_file or home / TOKEN_FILE
    if token_file is None and not path.exists():
        config.make_private_dir(home)
        token = secrets.token_urlsafe(32)
        written = home / f".{TOKEN_FILE}.{os.getpid()}"
        fd = os.open(written, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(token + "\n")
        try:
            os.link(written, path)  # whole or not at all, and only if no other server made one meanwhile
            return token, True
        except FileExistsError:
            pass
        finally:
            written.unlink()
    try:
        mode = path.stat().st_mode
        token = path.read_text().strip()
    except OSError as exc:
        raise Unauthorized(f"no access token could be read from {path} ({exc.strerror})") from None
    if mode & 0o077:
        raise Unauthorized(f"the access token {path} may be read by other users (mode {mode & 0o777:o}): "
                           f"chmod 600 {path}")
    if len(token) < 16:
        raise Unauthorized(f"the access token in {path} is empty or shorter than 16 characters")
    return token, False


def read_token(home: Path) -> str | None:
    """The data directory's token, or None when no server has made one yet."""
    return load_token(home, None)[0] if (home / TOKEN_FILE).exists() else None


# -- what the token signs ---------------------------------------------------------------------------


def _mac(token: str, purpose: str) -> str:
    return hmac.new(token.encode(), purpose.encode(), hashlib.sha256).hexdigest()


def session_value(token: str, now: float | None = None) -> str:
    """A session cookie's value: its expiry and the token's signature of it."""
    expiry = int((time.time() if now is None else now) + SESSION_S)
    return f"{expiry}.{_mac(token, f'session {expiry}')}"


def valid_session(token: str, value: str, now: float | None = None) -> bool:
    expiry, _, mac = value.partition(".")
    if not expiry.isdigit() or len(expiry) > 12:
        return False
    fresh = int(expiry) > (time.time() if now is None else now)
    return hmac.compare_digest(mac, _mac(token, f"session {expiry}")) and fresh


def sign_in_code(token: str, now: float | None = None) -> str:
    """A code that signs a browser in once, within SIGN_IN_S: ``/login?code=...``."""
    expiry = int((time.time() if now is None else now) + SIGN_IN_S)
    nonce = secrets.token_urlsafe(12)
    return f"{expiry}.{nonce}.{_mac(token, f'sign-in {expiry} {nonce}')}"


@dataclass
class SignIns:
    """The sign-in codes this server took, each kept until it would have expired anyway."""

    used: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, token: str, code: str, now: float | None = None) -> bool:
        """Whether ``code`` is good, and never taken before (it is taken now)."""
        moment = time.time() if now is None else now
        expiry, _, rest = code.partition(".")
        nonce, _, mac = rest.partition(".")
        if not expiry.isdigit() or len(expiry) > 12 or int(expiry) <= moment:
            return False
        if not hmac.compare_digest(mac, _mac(token, f"sign-in {expiry} {nonce}")):
            return False
        with self.lock:
            for old in [n for n, e in self.used.items() if e <= moment]:
                del self.used[old]
            if nonce in self.used:
                return False
            self.used[nonce] = int(expiry)
        return True


def cookie_name(port: int) -> str:
    """Cookies are kept per host name, not per port: each server's session has its port's name."""
    return f"trainmon_session_{port}"


# -- the three rules ----------------------------------------------------------------------------------


@dataclass
class Access:
    """What a server takes: its token (None with ``--no-credentials``), the names it answers to
    besides addresses, ``localhost`` and this machine's names, and its port (for the cookie)."""

    token: str | None
    port: int = 0
    hosts: frozenset[str] = frozenset()
    any_host: bool = False  # --allow-host '*': the operator vouches for every name
    sign_ins: SignIns = field(default_factory=SignIns)

    @property
    def credentials_required(self) -> bool:
        return self.token is not None

    @property
    def cookie(self) -> str:
        return cookie_name(self.port)


def own_names() -> frozenset[str]:
    """This machine's names, as a browser on the network would name it."""
    names = {"localhost"}
    for name in (socket.gethostname(), socket.getfqdn()):
        if name:
            names.add(name.lower().rstrip("."))
    return frozenset(names)


def allowed_hosts(extra: Iterable[str]) -> tuple[frozenset[str], bool]:
    """The names a server answers to (beyond addresses): its own and ``extra``; and whether ``*``
    (every name) is among them."""
    given = {name.strip().lower().rstrip(".") for name in extra if name.strip()}
    return own_names() | (given - {"*"}), "*" in given


def host_name(header: str) -> str:
    """The name in a Host header, without its port: ``[::1]:8080`` is ``::1``."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    name, colon, port = header.rpartition(":")
    return (name if colon and port.isdigit() else header).rstrip(".")


def is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def names_this_server(access: Access, host: str | None) -> bool:
    """Rule 1. An address in Host cannot come of a rebound name: the browser sends the name it resolved."""
    if host is None:
        return False
    name = host_name(host)
    return access.any_host or is_address(name) or name in access.hosts


def header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return str(value.decode("latin-1"))
    return None


def cookie(scope: Scope, name: str) -> str | None:
    for part in (header(scope, b"cookie") or "").split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


def same_origin(scope: Scope) -> bool:
    """Rule 2: a request that changes state comes from this server's own pages, or from no page at
    all (a script's, a CLI's). The Host it is compared with has passed rule 1."""
    if header(scope, b"sec-fetch-site") in ("cross-site", "same-site"):
        return False
    origin = header(scope, b"origin")
    if origin is None:
        return True
    host = header(scope, b"host")
    return host is not None and origin.lower() in (f"http://{host.lower()}", f"https://{host.lower()}")


def credentialed(access: Access, scope: Scope) -> bool:
    """Rule 3 for the native doors: the token as a bearer token, or a good session cookie."""
    if access.token is None:
        return True
    authorization = header(scope, b"authorization") or ""
    if authorization[:7].lower() == "bearer ":
        return hmac.compare_digest(authorization[7:].strip().encode(), access.token.encode())
    session = cookie(scope, access.cookie)  # never the token in the URL: URLs end up in logs and histories
    return session is not None and valid_session(access.token, session)


class Guard:
    """ASGI middleware: rules 1 and 2 for every request, then AWS's protocols to ``aws`` (which checks
    their signatures) and everything else to ``app`` once rule 3 holds."""

    def __init__(self, app: ASGIApp, aws: Any, access: Access) -> None:
        self.app = app
        self.aws = aws
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":  # no door speaks anything else
            return
        from .aws import classify

        send = _with_security_headers(send)
        if not names_this_server(self.access, header(scope, b"host")):
            await refuse(send, Misdirected("this server does not answer to that name: it answers to its addresses, "
                                           "localhost, its machine's name and the names given with --allow-host"))
            return
        if scope["method"] not in SAFE_METHODS and not same_origin(scope):
            await refuse(send, Forbidden("a request that changes state must come from this server's own pages, "
                                         "not from another site"))
            return
        kind = classify(scope)
        if kind is not None:
            await self.aws(kind, scope, receive, send)
            return
        path = scope["path"]
        if path in OPEN_PATHS or credentialed(self.access, scope):
            await self.app(scope, receive, send)
        elif scope["method"] == "GET" and not path.startswith(("/api/", "/metrics", "/static/")):
            await _respond(send, 303, [(b"location", b"/login")], b"")
        else:
            await refuse(send, Unauthorized("this server needs credentials: the access token as 'Authorization: "
                                            "Bearer TOKEN' (the data directory's server-token), or sign in at "
                                            "/login; AWS clients sign with a key (trainmon credentials env)"))


# On every answer: no type guessed from the bytes, and no other site's page may embed one.
SECURITY_HEADERS = ((b"x-content-type-options", b"nosniff"), (b"cross-origin-resource-policy", b"same-origin"))


def _with_security_headers(send: Send) -> Send:
    async def sending(message: Any) -> None:
        if message["type"] == "http.response.start":
            names = {name.lower() for name, _ in message.get("headers", ())}
            message = {**message, "headers": [*message.get("headers", ()),
                                              *(pair for pair in SECURITY_HEADERS if pair[0] not in names)]}
        await send(message)

    return sending


async def refuse(send: Send, exc: TrainmonError) -> None:
    payload = dumps({"error": exc.brief})
    await _respond(send, exc.http_status, [(b"content-type", b"application/json")], payload)


async def _respond(send: Send, status: int, headers: list[tuple[bytes, bytes]], payload: bytes) -> None:
    start: dict[str, Any] = {"type": "http.response.start", "status": status,
                             "headers": [*headers, (b"content-length", str(len(payload)).encode())]}
    await send(start)
    await send({"type": "http.response.body", "body": payload})
