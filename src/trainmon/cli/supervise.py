"""The process CreateTrainingJob starts for a job (``python -m trainmon.cli.supervise NAME``, by
:func:`trainmon.runtime.job.detached.start`): the job's supervisor, in a session of its own, or,
for a launcher whose jobs are supervised elsewhere, the job's hand-over to that supervisor.

It lives at the top, with the commands, because it puts together what the layers below may not
import: the supervisor and the profiling report's writer."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..report import write_job_report
from ..runtime.job.supervisor import JobLeft, Supervisor
from ..runtime.launchers import registry
from ..store import open_store


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainmon.cli.supervise")
    parser.add_argument("name")
    parser.add_argument("--home", type=Path)
    args = parser.parse_args(argv)
    store = open_store(args.home)
    job = store.get_job(args.name)
    if job is None:
        print(f"trainmon: no job named {args.name!r} to supervise", file=sys.stderr)
        return 1
    submit = registry.of(job.doc).submit
    if submit is not None:
        submit(store, args.name, write_job_report)
        return 0
    try:
        Supervisor(store, args.name, hosts=registry.job_hosts, report=write_job_report, echo=False).run()
    except JobLeft as exc:
        print(f"trainmon: {exc.message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
