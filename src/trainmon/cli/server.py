"""``trainmon server``: the JSON API, the AWS endpoint, live updates, ``/metrics`` and the console, in
one process; ``trainmon credentials``: the access keys AWS clients sign with."""

from __future__ import annotations

import argparse
import errno
import getpass
import logging
import shlex
import signal
import socket
import sys
from datetime import UTC, datetime
from pathlib import Path

from .. import config
from ..errors import TrainmonError, ValidationException
from .common import Commands, store


def register(commands: Commands) -> None:
    command = commands.add("server", cmd_server, "Serve the web console, the JSON API, the AWS endpoint and "
                           "/metrics; every request needs credentials (docs/server.md#access).")
    command.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    command.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 picks a free one)")
    command.add_argument("--token-file", type=Path,
                         help="the access token's file (default: server-token in the data directory, made on the "
                              "first start)")
    command.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                         help="a name the server answers to besides its addresses, localhost and this machine's "
                              "name (a reverse proxy's, say); repeat for more; '*' for any name")
    command.add_argument("--tls-cert", type=Path, metavar="FILE",
                         help="serve HTTPS with this certificate (PEM, its chain after it); with --tls-key")
    command.add_argument("--tls-key", type=Path, metavar="FILE",
                         help="the certificate's private key (PEM; default: in --tls-cert's file)")
    command.add_argument("--no-credentials", action="store_true",
                         help="serve every request without credentials: anyone who reaches the port may run "
                              "commands as this user (warned at every start)")
    commands.add("console", cmd_console, "Print a link that signs this machine's browser in to the server's console "
                 "once.").add_argument("--url", help="the server's address (default: the one that last started "
                                                     "over this data directory)")

    credentials = commands.add("credentials", cmd_credentials,
                               "Issue, list or delete the access keys that boto3 and the AWS CLI sign requests to "
                               "the server with.")
    actions = credentials.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="issue a key and print it (its secret is shown this once)")
    create.add_argument("--description", default="", help="what the key is for")
    actions.add_parser("list", help="the issued keys (ids only)")
    env = actions.add_parser("env", help="the environment an AWS client needs to reach the server: AWS_ENDPOINT_URL "
                                         "and a key (issued now if there is none); eval \"$(trainmon credentials "
                                         "env)\"")
    env.add_argument("--url", help="the server's address (default: the one that last started over this data "
                                   "directory)")
    env.add_argument("--key", metavar="ACCESS_KEY_ID", help="which issued key (default: the oldest)")
    delete = actions.add_parser("delete", help="revoke a key")
    delete.add_argument("access_key_id", metavar="ACCESS_KEY_ID")


def cmd_credentials(args: argparse.Namespace) -> int:
    from .. import access_keys

    home = args.home or config.home()
    if args.action == "create":
        key = access_keys.create(home, args.description)
        print(f"AWS_ACCESS_KEY_ID={key.AccessKeyId}\nAWS_SECRET_ACCESS_KEY={key.SecretAccessKey}\n"
              f"# kept in {access_keys.path(home)}; from now on `trainmon server` checks every AWS request's "
              "signature against the issued keys")
    elif args.action == "list":
        for key in sorted(access_keys.load(home).values(), key=lambda key: key.CreateDate):
            created = datetime.fromtimestamp(key.CreateDate, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
            print(f"{key.AccessKeyId}  {created}  {key.Description}".rstrip())
    elif args.action == "env":
        chosen = access_keys.load(home).get(args.key) if args.key else \
            access_keys.oldest(home) or access_keys.create(home, "made by trainmon credentials env")
        if chosen is None:
            raise ValidationException(f"there is no access key {args.key!r}; `trainmon credentials list` shows them.")
        url = args.url or _last_address(home)
        print(f"export AWS_ENDPOINT_URL={shlex.quote(url)}\nexport AWS_ACCESS_KEY_ID={chosen.AccessKeyId}\n"
              f"export AWS_SECRET_ACCESS_KEY={shlex.quote(chosen.SecretAccessKey)}\n"
              f"export AWS_DEFAULT_REGION=${{AWS_DEFAULT_REGION:-us-east-1}}")
    else:
        access_keys.delete(home, args.access_key_id)
    return 0


ADDRESS_FILE = "server-address"


def _last_address(home: Path) -> str:
    """The address the last server over this data directory printed (it writes it on starting)."""
    try:
        return (home / ADDRESS_FILE).read_text().strip()
    except OSError:
        raise ValidationException(f"no server has started over {home} yet: start one with `trainmon server`, or "
                                  "give its address with --url") from None


def cmd_console(args: argparse.Namespace) -> int:
    from ..server import auth

    home = args.home or config.home()
    token = auth.read_token(home)
    if token is None:
        raise ValidationException(f"there is no access token in {home} yet: `trainmon server` makes it on its first "
                                  "start")
    url = (args.url or _last_address(home)).rstrip("/")
    print(f"{url}/login?code={auth.sign_in_code(token)}\n# signs one browser in, once, within "
          f"{auth.SIGN_IN_S // 60} minutes")
    return 0


def cmd_server(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from ..server import auth
        from ..server.app import Settings, create_app
    except ImportError as exc:
        raise TrainmonError(f"the server needs packages that are not installed ({exc.name}): "
                            "pip install 'trainmon[server]'") from None
    if not 0 <= args.port <= 65535:
        raise ValidationException(f"--port must be from 0 to 65535, not {args.port}.")
    home = args.home or config.home()
    tls = _tls(args.tls_cert, args.tls_key)
    token, made = _credentials(home, args.token_file) if not args.no_credentials else (None, False)
    listener = _listen(args.host, args.port)
    db = store(args)
    host, port = listener.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    if host in ("0.0.0.0", "::"):
        shown = "127.0.0.1"  # the address this machine's browser and clients reach it by
    url = f"{'https' if tls else 'http'}://{shown}:{port}"
    print(f"trainmon server: {url}/ (data in {db.database_url or db.home})", flush=True)
    _write_address(home, url)
    hosts, any_host = auth.allowed_hosts(args.allow_host)
    access = auth.Access(token, port=port, hosts=hosts, any_host=any_host)
    if token is None:
        print("trainmon server: WARNING: --no-credentials: every request is served without credentials, so anyone "
              f"who can reach port {port} (every user of this machine, at least) can run commands as "
              f"{getpass.getuser()}", file=sys.stderr, flush=True)
    else:
        if made:
            print(f"trainmon server: made the access token (kept in {home / auth.TOKEN_FILE}, shown this once):\n"
                  f"  {token}", flush=True)
        print(f"trainmon server: sign this machine's browser in: {url}/login?code={auth.sign_in_code(token)}\n"
              f"  (once, within {auth.SIGN_IN_S // 60} minutes; `trainmon console` prints another)\n"
              "trainmon server: AWS clients: eval \"$(trainmon credentials env)\"", flush=True)
    settings = Settings(access)
    logging.basicConfig(level=logging.WARNING, format="trainmon server: %(levelname)s %(name)s: %(message)s")
    server = uvicorn.Server(uvicorn.Config(create_app(db, settings), log_level="warning", lifespan="on",
                                           timeout_graceful_shutdown=2, ssl_certfile=tls and tls[0],
                                           ssl_keyfile=tls and tls[1]))
    previous = signal.signal(signal.SIGTERM, _stopped)  # uvicorn shuts down gracefully, then raises it again
    try:
        server.run(sockets=[listener])
    except (KeyboardInterrupt, _Stopped):
        pass  # stopping a server on request is its normal end
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0


def _tls(cert: Path | None, key: Path | None) -> tuple[str, str | None] | None:
    """The certificate and key files of ``--tls-cert``/``--tls-key`` (None: plain HTTP), checked here so that a wrong file is
    told as such before anything listens."""
    import ssl

    if cert is None:
        if key is not None:
            raise ValidationException("--tls-key needs --tls-cert: the certificate the key belongs to.")
        return None
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key, password=lambda: b"")  # never a prompt
    except FileNotFoundError as exc:
        raise ValidationException(f"cannot read {exc.filename}: no such file") from None
    except (OSError, ssl.SSLError) as exc:
        which = f"{cert} and {key}" if key else str(cert)
        raise ValidationException(f"{which} hold no certificate with its unencrypted private key in PEM ({exc.strerror or exc}); "
                                  "--tls-cert takes the certificate (and its chain), --tls-key its key") from None
    return str(cert), str(key) if key else None


def _credentials(home: Path, token_file: Path | None) -> tuple[str, bool]:
    """The server's token (and whether it was made now), and an access key for AWS clients: both
    made on the first start."""
    from .. import access_keys
    from ..server import auth

    token, made = auth.load_token(home, token_file)
    if not access_keys.load(home):
        access_keys.create(home, "made by the server's first start")
    return token, made


def _write_address(home: Path, url: str) -> None:
    """Where this server listens, for `trainmon console` and `trainmon credentials env`."""
    config.write_private(home / ADDRESS_FILE, url + "\n")


class _Stopped(Exception):
    pass


def _stopped(signum: int, frame: object) -> None:
    raise _Stopped


def _listen(host: str, port: int) -> socket.socket:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        listener = socket.socket(family, kind, proto)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(128)
    except OSError as exc:
        busy = exc.errno == errno.EADDRINUSE and port != 0
        hint = (": another program (or another trainmon server) listens there; give another --port, or --port 0 "
                "for any free one (the server prints its address)" if busy else "")
        raise TrainmonError(f"cannot listen on {host}:{port}: {exc.strerror or exc}{hint}", code="ServerError") from None
    listener.set_inheritable(False)
    return listener

