"""What every benchmark shares: where data goes, clocks, subprocess environments and reporting.

Every figure is printed twice: as absolute numbers, and as a ratio against a baseline measured
in the same run, on the same machine, moments apart. Only the ratio is compared with a target.
"""

from __future__ import annotations

import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = Path(__file__).resolve().parent / ".data"  # git-ignored


def data_dir() -> Path:
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    return DATA_DIR


@contextmanager
def scratch_dir(prefix: str) -> Iterator[Path]:
    """A temporary directory under benchmarks/.data/, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=data_dir()))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a subprocess: trainmon importable from the checkout, output unbuffered."""
    env = dict(os.environ)
    src = str(ROOT / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def best_of(repeats: int, fn: Callable[[], object]) -> tuple[float, object]:
    """The fastest of ``repeats`` runs (the least disturbed by the rest of the machine) and its result."""
    best, result = math.inf, None
    for _ in range(max(1, repeats)):
        elapsed, result = timed(fn)
        best = min(best, elapsed)
    return best, result


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (``fraction`` in 0..1) of a non-empty sequence."""
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


# -- reporting -------------------------------------------------------------------------------


@dataclass
class Figure:
    """One headline number: measured / baseline, and whether it meets its target."""

    name: str
    ratio: float
    target: str
    met: bool
    detail: str = ""


@dataclass
class Report:
    benchmark: str
    figures: list[Figure] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # correctness checks that did not hold

    def figure(self, name: str, ratio: float, target: str, met: bool, detail: str = "") -> None:
        self.figures.append(Figure(name, ratio, target, met, detail))
        mark = "ok" if met else "MISSED"
        print(f"  => {name}: {ratio:.2f}x  (target {target}: {mark}){'  ' + detail if detail else ''}")

    def check(self, ok: bool, message: str) -> bool:
        print(f"  check: {message}: {'ok' if ok else 'FAILED'}")
        if not ok:
            self.failures.append(message)
        return ok


def heading(title: str) -> None:
    print()
    print(title)
    print("-" * len(title))
    sys.stdout.flush()


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    cells = [list(map(str, headers))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        print("  " + "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))))
    sys.stdout.flush()


def rate(count: float, seconds: float) -> str:
    if seconds <= 0:
        return "inf"
    value = count / seconds
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.2f}{unit}"
    return f"{value:.1f}"


def mb_per_s(size: int, seconds: float) -> str:
    return f"{size / 1e6 / seconds:.1f}" if seconds > 0 else "inf"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"
