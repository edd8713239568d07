"""``trainmon server``: the JSON API, the AWS endpoint, live updates, ``/metrics`` and the console, in
one process; ``trainmon credentials``: the access keys AWS clients sign with."""

from __future__ import annotations

import argparse
import signal
import socket
from datetime import UTC, datetime
from pathlib import Path

from .. import config
from ..errors import TrainmonError, ValidationException
from .common import Commands, store


def register(commands: Commands) -> None:
    command = commands.add("server", cmd_server, "Serve the web console, the JSON API and /metrics.")
    command.add_argument("--host", default="127.0.0.1",
                         help="address to listen on (default 127.0.0.1; any other needs the access token)")
    command.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 picks a free one)")
    command.add_argument("--token-file", type=Path,
                         help="the access token's file (default: server-token in the data directory, made on the "
                              "first start on an address other than loopback); given, it is required on loopback too")


    credentials = commands.add("credentials", cmd_credentials,
                               "Issue, list or delete the access keys that boto3 and the AWS CLI sign requests to "
                               "the server with.")
    actions = credentials.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="issue a key and print it (its secret is shown this once)")
    create.add_argument("--description", default="", help="what the key is for")
    actions.add_parser("list", help="the issued keys (ids only)")
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
    else:
        access_keys.delete(home, args.access_key_id)
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
    token = None
    if args.token_file is not None or not auth.is_loopback(args.host):
        token, made = auth.load_token(home, args.token_file)
        if made:
            print(f"trainmon server: the access token (shown this once; it is kept in {home / auth.TOKEN_FILE}):\n"
                  f"  {token}", flush=True)
    listener = _listen(args.host, args.port)
    db = store(args)
    host, port = listener.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"trainmon server: http://{shown}:{port}/ (data in {db.database_url or db.home})", flush=True)
    settings = Settings(token=token, require_signatures=not auth.is_loopback(args.host))
    server = uvicorn.Server(uvicorn.Config(create_app(db, settings), log_level="warning", lifespan="on",
                                           timeout_graceful_shutdown=2))
    previous = signal.signal(signal.SIGTERM, _stopped)  # uvicorn shuts down gracefully, then raises it again
    try:
        server.run(sockets=[listener])
    except (KeyboardInterrupt, _Stopped):
        pass  # stopping a server on request is its normal end
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0


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
        raise TrainmonError(f"cannot listen on {host}:{port}: {exc.strerror or exc}", code="ServerError") from None
    listener.set_inheritable(False)
    return listener

