"""``trainmon logs`` (a job's log records) and ``trainmon parse`` (definitions tried on saved logs)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from ..api import sagemaker, trainmon
from ..errors import ValidationException
from ..jobs.status import TERMINAL
from ..parsing.definitions import definition_warnings, validate_definitions
from ..parsing.extract import Extractor, scan_file, scan_stream
from ..parsing.framing import Mode
from ..store import Store
from . import render
from .common import Commands, exit_status, json_number, store, warn
from .definitions import add_definition_options, definitions_given

FOLLOW_POLL_S = 0.25
PAGE_RECORDS = 100_000  # a few megabytes of text a read: memory the allocator reuses, page after page


def register(commands: Commands) -> None:
    logs = commands.add("logs", cmd_logs, "Print a job's log records (control characters shown escaped on a "
                        "terminal, exact otherwise).")
    logs.add_argument("name")
    logs.add_argument("--follow", "-f", action="store_true",
                      help="keep printing until the job ends; the exit status then says how it ended")
    logs.add_argument("--host", metavar="HOST", help="only this host, e.g. algo-2")
    logs.add_argument("--tail", type=int, metavar="N", help="start with the last N records of each host")

    parse = commands.add("parse", cmd_parse, "Apply metric definitions to saved logs and print every point (test "
                         "before you run).")
    add_definition_options(parse)
    parse.add_argument("--json", action="store_true", help='one {"line", "offset", "name", "value"} object per line')
    parse.add_argument("logs", nargs="+", metavar="LOG", help="log files; - reads standard input")


def cmd_logs(args: argparse.Namespace) -> int:
    if args.tail is not None and args.tail < 0:
        raise ValidationException("--tail must be a number of records, 0 or more.")
    return follow(store(args), args.name, host=args.host, tail=args.tail, forever=args.follow)


def follow(db: Store, name: str, *, host: str | None = None, tail: int | None = None, forever: bool = True) -> int:
    """Print a job's records (each prefixed by its host when it has several) to stdout; with
    ``forever``, until the job has ended, then say how it ended; the exit status."""
    positions: dict[str, int] | None = None
    terminal = sys.stdout.isatty()
    out = sys.stdout
    while True:
        page = trainmon.get_job_log_records(db, TrainingJobName=name, Host=host, After=positions,
                                            TailRecords=tail if positions is None else None, Format="text",
                                            Limit=PAGE_RECORDS)
        positions = page["After"]
        prefix = page["InstanceCount"] > 1 and not host
        for block in page["Text"]:
            text = render.terminal_safe(block["Text"], keep_newlines=True) if terminal else block["Text"]
            if prefix:
                head = f"{block['Host']} | "
                text = head + text[:-1].replace("\n", "\n" + head) + "\n"
            out.write(text)
        out.flush()
        if not page["Complete"]:
            continue  # more is there already
        if not forever:
            return 0
        status = page["TrainingJobStatus"]
        if status in TERMINAL:  # read after the job ended: that was everything
            return _ended(db, name, status)
        time.sleep(FOLLOW_POLL_S)


def _ended(db: Store, name: str, status: str) -> int:
    """Say how a followed job ended; the exit status too (0 only when it Completed)."""
    description = sagemaker.describe_training_job(db, TrainingJobName=name)
    reason = description.get("FailureReason", "").splitlines()
    how = description["SecondaryStatus"] if description["SecondaryStatus"] != status else status
    detail = f": {render.terminal_safe(reason[0])}" if reason else ""
    print(f"trainmon: job {name} ended {how}{detail}", file=sys.stderr)
    return exit_status(status)


def cmd_parse(args: argparse.Namespace) -> int:
    mode = Mode(args.mode)
    definitions = validate_definitions(definitions_given(args))
    if not definitions:
        raise ValidationException("no metric definitions: give --metric-definitions or --metric NAME=REGEX")
    for warning in definition_warnings(definitions, escapes_control=mode.escapes):
        warn(warning)
    out = sys.stdout
    several = len(args.logs) > 1
    for path in args.logs:
        extractor = Extractor(definitions, mode)
        if several and not args.json:
            print(f"== {path}", file=out)
        if path != "-" and not os.access(path, os.R_OK):
            raise ValidationException(f"cannot read log {path!r}: it does not exist or is not readable.")
        names = {d.name: json.dumps(d.name) for d in definitions}
        file_field = f'"file": {json.dumps(path)}, ' if several else ""
        try:
            lines = []
            found = scan_stream(sys.stdin.buffer, extractor) if path == "-" else scan_file(path, extractor)
            for line, offset, name, value in found:
                if args.json:
                    number = repr(value) if value - value == 0.0 else json.dumps(json_number(value))
                    lines.append(f'{{{file_field}"line": {line}, "offset": {offset}, '
                                 f'"name": {names[name]}, "value": {number}}}')
                else:
                    lines.append(f"line {line}\t{name}\t{render.number(value)}")
                if len(lines) >= 4096:
                    out.write("\n".join(lines) + "\n")
                    lines.clear()
            if lines:
                out.write("\n".join(lines) + "\n")
        except OSError as exc:
            raise ValidationException(f"cannot read log {path!r}: {exc.strerror or exc}.") from None
        print(f"Summary for {path} ({mode.value} mode):", file=sys.stderr)
        print("\n".join(render.definition_report([s.to_json() for s in extractor.stats],
                                                 [d.to_api() for d in definitions], escapes=mode.escapes)),
              file=sys.stderr)
    return 0
