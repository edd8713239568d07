"""What every command module of the CLI shares: registering a command beside its handler, the store
of the invocation, options that hold KEY=VALUE pairs or times, and printing JSON."""

from __future__ import annotations

import argparse
import json
import math
import sys
import traceback
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import CloudWatchError, InvalidParameterValue, LogsError, TrainmonError, ValidationException

if TYPE_CHECKING:  # the store and CloudWatch's model are imported by the commands that use them
    from ..store import Store

EXIT_FAILED, EXIT_USAGE, EXIT_STOPPED = 1, 2, 3
Handler = Callable[[argparse.Namespace], int]


def handled(args: argparse.Namespace, command: Callable[[], int]) -> int:
    """A command's exit status: a TrainmonError as its message on stderr (its traceback too with
    ``--debug``), Ctrl-C as 130, a reader that went away (a closed pipe) as done."""
    try:
        return command()
    except TrainmonError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"trainmon: {exc.code}: {exc.message}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, (ValidationException, CloudWatchError, LogsError)) else EXIT_FAILED
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


class Commands:
    """The ``trainmon`` subcommands: each module adds its own with :meth:`add`, next to its handler."""

    def __init__(self, subparsers: Any) -> None:
        self._subparsers = subparsers

    def add(self, name: str, handler: Handler, help_text: str) -> argparse.ArgumentParser:
        command: argparse.ArgumentParser = self._subparsers.add_parser(name, help=help_text, description=help_text)
        command.set_defaults(handler=handler)
        return command


def store(args: argparse.Namespace) -> Store:
    from ..store import open_store

    return open_store(args.home)


def exit_status(status: str) -> int:
    """A command's exit status for how a job ended: 0 Completed, 3 Stopped, 1 otherwise."""
    return {"Completed": 0, "Stopped": EXIT_STOPPED}.get(status, EXIT_FAILED)


def pairs(items: Sequence[str] | None, flag: str) -> dict[str, str]:
    result = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValidationException(f"{flag} {item!r} must look like KEY=VALUE.")
        result[key] = value
    return result


def read_text(path: str, flag: str) -> str:
    try:
        return Path(path).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ValidationException(f"{flag} {path!r} is neither JSON nor a readable file: {reason}.") from None


def timestamp(text: str | None, flag: str) -> float | None:
    """An option's time: ISO 8601 (UTC when it names no zone, as the API and the AWS CLI read it)
    or epoch seconds."""
    if text is None:
        return None
    try:
        from ..cloudwatch.model import epoch_seconds

        return float(text) if text.replace(".", "", 1).isdigit() else epoch_seconds(text, flag)
    except InvalidParameterValue:
        raise ValidationException(f"{flag} {text!r} is neither ISO 8601 (2026-11-30T10:00:00Z; UTC when no zone is "
                                  "given) nor epoch seconds.") from None


def json_number(value: float) -> float | str:
    """A number for JSON output: NaN and infinities as text (JSON has no literal for them)."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"not JSON serializable: {type(value)}")


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=_json_default))


def warn(message: str) -> None:
    print(f"trainmon: warning: {message}", file=sys.stderr)


def every_page(operation: Callable[..., dict[str, Any]], items: str, **request: Any) -> list[Any]:
    """Every page of a paged operation's ``items``, following NextToken (as boto3's paginators do)."""
    found: list[Any] = []
    token = None
    while True:
        page = operation(**request, NextToken=token)
        found += page[items]
        token = page.get("NextToken")
        if token is None:
            return found
