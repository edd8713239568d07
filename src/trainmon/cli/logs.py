"""``trainmon logs``: a job's log records."""

from __future__ import annotations

import argparse
import sys
import time

from ..api import sagemaker, trainmon
from ..errors import ValidationException
from ..jobs.status import TERMINAL
from ..store import Store
from . import render
from .common import Commands, exit_status, store

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
