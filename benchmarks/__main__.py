"""``python3 -m benchmarks [extraction] [capture] [latency] [monitor] [store] [series] [readback] [server] [aws] [rules] [alarms] [report] [debug_hook] [cluster] [listing] [containers] [search] [workbench] [tuning] [--scale S] [--flood-mb N] [--strict]``"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time

from . import (
    alarms,
    aws,
    capture,
    cluster,
    containers,
    debug_hook,
    extraction,
    latency,
    listing,
    monitor,
    readback,
    rules,
    search,
    series,
    server,
    store,
    tuning,
    workbench,
)
from . import report as profiling_report  # not `report`: main() names each Report so
from .common import ROOT, Report

BENCHMARKS = ("extraction", "capture", "latency", "monitor", "store", "series", "readback", "server", "aws", "rules",
              "alarms", "report", "debug_hook", "cluster", "listing", "containers",
              "search", "workbench", "tuning")


def _revision() -> str:
    """The checkout's commit, and whether src/ has uncommitted changes (figures belong to a revision)."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src"], cwd=ROOT, capture_output=True,
                               text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    if not commit:
        return ""
    return f", commit {commit}" + (" with uncommitted changes in src/" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m benchmarks", description=__doc__)
    parser.add_argument("names", nargs="*", metavar="BENCHMARK",
                        help=f"which to run: {', '.join(BENCHMARKS)} (default: all)")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiply every size by this (e.g. 0.1 for a quick smoke run; ratios then mean less)")
    parser.add_argument("--flood-mb", type=float, default=capture.FLOOD_MB,
                        help=f"megabytes the flood job writes (default {capture.FLOOD_MB:g})")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed, not only on a failed check")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark {unknown[0]!r}; choose from {', '.join(BENCHMARKS)}")
    names = args.names or list(BENCHMARKS)

    import trainmon

    print(f"trainmon {getattr(trainmon, '__version__', '?')} from {os.path.dirname(trainmon.__file__)}{_revision()}")
    print(f"Python {platform.python_version()} on {platform.platform()}, {os.cpu_count()} CPUs"
          + (f", scale {args.scale:g}" if args.scale != 1.0 else ""))
    start = time.perf_counter()
    reports: list[Report] = []
    modules = {"extraction": extraction, "capture": capture, "latency": latency, "monitor": monitor,
               "store": store, "series": series, "readback": readback, "server": server, "aws": aws,
               "rules": rules, "alarms": alarms, "report": profiling_report, "debug_hook": debug_hook,
               "cluster": cluster, "listing": listing, "containers": containers, "search": search,
               "workbench": workbench, "tuning": tuning}
    for name in names:
        if name == "capture":
            reports.append(capture.run(args.scale, args.flood_mb))
        else:
            reports.append(modules[name].run(args.scale))
    print()
    print(f"Summary ({time.perf_counter() - start:.0f} s)")
    print("-------")
    missed = failed = 0
    for report in reports:
        for figure in report.figures:
            print(f"  {report.benchmark}: {figure.line()}")
            missed += figure.met is False
        for failure in report.failures:
            print(f"  {report.benchmark}: FAILED check: {failure}")
            failed += 1
    print(f"  {missed} target(s) missed, {failed} check(s) failed")
    return 1 if failed or (args.strict and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
