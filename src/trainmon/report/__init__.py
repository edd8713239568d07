"""The profiling report: one self-contained HTML file per job, as SageMaker Debugger's profiler report.

``render(store, job)`` gives the page; ``write_job_report(store, job)`` writes it where SageMaker
puts it, ``<location>/<job>/rule-output/ProfilerReport/profiler-output/profiler-report.html``, the
location being the job's profile location (ProfilerConfig ``S3OutputPath``: a local directory or
a URL fsspec can write), or ``<home>/profiles`` for a job that ran without the profiler.

The report is made in three steps: :mod:`.gather` reads the job, its rules, its metrics and its
hosts' readings (:mod:`.sources`: the profile, else CloudWatch system metrics), through the
operations layer and the read layer (:mod:`trainmon.read.series`); :mod:`.analysis` computes the figures and :mod:`.page` writes the
HTML with its charts (:mod:`.charts`), both pure. A report of a job that is still running shows
what was stored so far, and says so. The ProfilerReport rule writes one at the end of every
profiled job, so it must stay cheap: a 10-second job's report takes a few tens of milliseconds,
and however long the job what it reads is bounded (:class:`Budget`).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..clock import REAL_CLOCK, Clock
from ..store import Store, profiles
from .gather import BUDGET, Budget, JobData, gather, report_location
from .page import page

__all__ = ["BUDGET", "Budget", "default_path", "render", "write_job_report"]

REPORT_PATH = "rule-output/ProfilerReport/profiler-output/profiler-report.html"


def render(store: Store, job_name: str, *, clock: Clock = REAL_CLOCK, budget: Budget = BUDGET) -> str:
    """The report of ``job_name`` as HTML; ValidationException for a job that does not exist.
    What it reads is bounded by ``budget`` (:class:`~.gather.Budget`); the page says what it left out."""
    return _made(store, job_name, clock, budget)[1]


def _made(store: Store, job_name: str, clock: Clock, budget: Budget) -> tuple[JobData, str]:
    """The job's data and its page, NumPy's warnings silenced (hostile values make NaN, not noise)."""
    with np.errstate(all="ignore"):
        data = gather(store, job_name, clock, budget)
        return data, page(data)


def default_path(store: Store, job_name: str) -> str:
    """Where the report of a job goes by default (SageMaker's layout under its profile location)."""
    from ..api.sagemaker import job

    row = job(store, job_name)
    return _under(report_location(store, row.doc), row.name)


def _under(place: str, job_name: str) -> str:
    return f"{place.rstrip('/')}/{job_name}/{REPORT_PATH}"


def write_job_report(store: Store, job_name: str, path: str | None = None, *, clock: Clock = REAL_CLOCK,
                     budget: Budget = BUDGET) -> str:
    """Write the report (to ``path``, a file or URL, else :func:`default_path`) and return where it
    went. The file is written whole and then renamed into place, so a reader never sees half of it."""
    data, html = _made(store, job_name, clock, budget)
    target = path if path is not None else _under(data.location, data.name)
    if "://" not in target:
        file = Path(target).expanduser().resolve()
        file.parent.mkdir(parents=True, exist_ok=True)
        part = file.with_name(f".{file.name}.{os.urandom(4).hex()}.part")
        part.write_text(html, encoding="utf-8")
        os.replace(part, file)
        return str(file)
    fs, resolved = profiles._filesystem(target)  # the one resolution of a location (own bucket, fsspec URL)
    fs.makedirs(resolved.rsplit("/", 1)[0], exist_ok=True)
    with fs.open(resolved + ".part", "wb") as handle:
        handle.write(html.encode())
    fs.mv(resolved + ".part", resolved)
    return target
