"""The ``trainmon`` command: parse, call the operations layer, print.

Each group of commands is a module that registers its commands, their options and their handlers
together: :mod:`.jobs` (run, describe, rules, list, stop, delete, demo), :mod:`.logs` (logs, parse) and
:mod:`.metrics` (metrics, export, profile, put-metric-data, maintain), :mod:`.report` (report),
:mod:`.alarms` (alarm) and :mod:`.server` (server, credentials).

Errors print one line that says what went wrong and what to do next; the exit status is 2 for
invalid input, 1 for other failures (and for a job that Failed), 3 for a job that was Stopped.
``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from ..errors import CloudWatchError, LogsError, TrainmonError, ValidationException
from . import alarms, jobs, logs, metrics, report, server
from .common import EXIT_FAILED, EXIT_USAGE, Commands

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainmon",
        description="Run training jobs, capture their logs, turn log lines into metrics with SageMaker metric "
        "definitions, and report final metrics.",
    )
    parser.add_argument("--home", type=Path, help="data directory (default: $TRAINMON_HOME or ~/.local/share/trainmon)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    commands = Commands(parser.add_subparsers(dest="cmd", metavar="COMMAND", required=True))
    for group in (jobs, logs, metrics, report, alarms, server):
        group.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.home is not None:
        args.home = args.home.expanduser().resolve()
        os.environ["TRAINMON_HOME"] = str(args.home)  # detached supervisors and defaults follow it
    try:
        status: int = args.handler(args)
        return status
    except TrainmonError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"trainmon: {exc.code}: {exc.message}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, (ValidationException, CloudWatchError, LogsError)) else EXIT_FAILED
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
