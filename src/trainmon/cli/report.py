"""``trainmon report``: a job's profiling report, one self-contained HTML file (:mod:`trainmon.report`)."""

from __future__ import annotations

import argparse

from .common import Commands, store


def register(commands: Commands) -> None:
    command = commands.add("report", cmd_report, "Write a job's profiling report, one self-contained HTML file, "
                           "as SageMaker Debugger's profiler report (a running job's: what is there so far).")
    command.add_argument("name", metavar="JOB")
    command.add_argument("--output", "-o", metavar="FILE", help="write it here (a path, or a URL fsspec can write) "
                         "instead of <profile location>/JOB/rule-output/ProfilerReport/profiler-output/"
                         "profiler-report.html")


def cmd_report(args: argparse.Namespace) -> int:
    from .. import report

    where = report.write_job_report(store(args), args.name, args.output)
    print(where)
    return 0
