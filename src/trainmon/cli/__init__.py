"""The ``trainmon`` command: parse, call the operations layer, print.

Each group of commands is a module that registers its commands, their options and their handlers
together (``GROUPS`` lists them). Only the group of the command given is imported, so a command
pays for what it uses: ``trainmon parse`` never loads the store or the operations layer. Help
and mistakes (no command, an unknown one) load every group.

Errors print one line that says what went wrong and what to do next; the exit status is 2 for
invalid input, 1 for other failures (and for a job that Failed), 3 for a job that was Stopped.
``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from .common import Commands, handled

__all__ = ["GROUPS", "build_parser", "main"]

GROUPS = {  # each module of commands, and the commands it adds, in the order `trainmon --help` lists them
    "jobs": ("run", "describe", "rules", "list", "search", "stop", "delete", "demo", "tune", "tuning", "images"),
    "logs": ("logs",),
    "parse": ("parse",),
    "metrics": ("metrics", "export", "profile", "put-metric-data", "maintain"),
    "report": ("report",),
    "alarms": ("alarm",),
    "server": ("server", "console", "credentials"),
}


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose "unrecognized arguments" names the option meant (``--metrics``:
    did you mean --metric?) among the command's own."""

    words: Sequence[str] = ()  # the command line being parsed (main sets it on the parser it parses with)

    def error(self, message: str) -> NoReturn:
        unknown = message.removeprefix("unrecognized arguments: ")
        if unknown != message:
            hints = [f"{token}: did you mean {found[0]}?" for token in unknown.split()
                     if token.startswith("--") and (found := difflib.get_close_matches(
                         token.split("=")[0], self._options(), n=1, cutoff=0.7))]
            if hints:
                message += " (" + "; ".join(hints) + ")"
        super().error(message)

    def _options(self) -> list[str]:
        """The long options of this parser and of the command given (the first of its words that
        names one)."""
        options = [o for action in self._actions for o in action.option_strings if o.startswith("--")]
        commands = next((action.choices for action in self._actions
                         if isinstance(action, argparse._SubParsersAction)), {})
        given = next((commands[word] for word in self.words if word in commands), None)
        if isinstance(given, _Parser):
            options += given._options()
        return options


def build_parser(command: str | None = None) -> _Parser:
    """The command line's parser: every command, or (``command``) the group that holds that one."""
    parser = _Parser(
        prog="trainmon",
        description="Run training jobs, capture their logs, turn log lines into metrics with SageMaker metric "
        "definitions, and report final metrics.",
    )
    parser.add_argument("--home", type=Path, help="data directory (default: $TRAINMON_HOME or ~/.local/share/trainmon)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    commands = Commands(parser.add_subparsers(dest="cmd", metavar="COMMAND", required=True))
    for group, names in GROUPS.items():
        if command is None or command in names:
            importlib.import_module(f"{__name__}.{group}").register(commands)
    return parser


def _command(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names, if it names one before anything that needs every group (help)."""
    tokens = iter(argv)
    for token in tokens:
        if token == "--home":
            next(tokens, None)
        elif token in ("-h", "--help"):
            return None
        elif not token.startswith("-"):
            return token if any(token in names for names in GROUPS.values()) else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else list(argv)
    command = _command(arguments)
    held: dict[int, Any] = {}
    if command in ("run", "demo") and threading.current_thread() is threading.main_thread():
        from ..runtime.processes.sessions import hold_stop_signals

        held = hold_stop_signals()  # a Ctrl-C while the command starts stops the job, however early it comes
    try:
        parser = build_parser(command)
        parser.words = arguments
        args = parser.parse_args(arguments)
        if args.home is not None:
            args.home = args.home.expanduser().resolve()
            os.environ["TRAINMON_HOME"] = str(args.home)  # detached supervisors and defaults follow it
        return handled(args, lambda: args.handler(args))
    finally:
        for sig, handler in held.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
