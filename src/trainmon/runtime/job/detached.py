"""Starting a job's supervisor as a process of its own (:data:`ENTRY`), in its own session, writing
to ``<home>/jobs/<job>/supervisor.log``: what CreateTrainingJob does. For a job whose launcher
supervises it elsewhere (a Ray job's, in its cluster), the process hands the job over and exits."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import psutil

from ... import config
from ...jobs.document import SupervisorIdentity
from ...store import JobRow, Store
from .orphans import identity

ENTRY = "trainmon.cli.supervise"  # the process's module: at the top, it gives the supervisor the report's writer


def start(store: Store, name: str) -> None:
    """Start the supervisor of job ``name`` (or its hand-over) and record it as the job's, until it
    claims the job itself."""
    job_dir = config.job_dir(store.home, name)
    started = spawn(ENTRY, name, store, job_dir / "supervisor.log")
    if started is None:
        return  # it ended already: it claimed the job (and finished), or the next reader reaps it

    def adopt(row: JobRow) -> None:
        if row.supervisor is None:
            row.supervisor = started

    store.update_job(name, adopt)


def spawn(module: str, name: str, store: Store, log: Path, **environment: str) -> SupervisorIdentity | None:
    """``python -m MODULE NAME --home HOME`` as a process of its own session, on this store (its
    data directory and database), writing to ``log`` (0600), reaped when it ends; its identity,
    None when it has ended already."""
    config.make_private_dir(log.parent)
    with open(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", module, name, "--home", str(store.home)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "TRAINMON_HOME": str(store.home),  # the process opens this same store
                 config.DATABASE_URL_VARIABLE: store.database_url or "", **environment},
        )
    threading.Thread(target=process.wait, name=f"trainmon-reap-{name}", daemon=True).start()  # no zombie
    try:
        return identity(process.pid)
    except psutil.Error:
        return None
