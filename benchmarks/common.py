"""What every benchmark shares: where data goes, clocks, subprocess environments and reporting.

Every figure is printed twice: as absolute numbers, and as a ratio against a baseline measured
in the same run, on the same machine, moments apart. Only the ratio is compared with a target.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

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


T = TypeVar("T")


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def best_of(repeats: int, fn: Callable[[], T]) -> tuple[float, T]:
    """The fastest of ``repeats`` runs (the least disturbed by the rest of the machine) and its result."""
    best, result = timed(fn)
    for _ in range(repeats - 1):
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
    """One headline result; ``met`` is None for a figure without a target (informational)."""

    name: str
    value: str
    target: str | None
    met: bool | None
    detail: str = ""

    def line(self) -> str:
        verdict = "informational" if self.met is None else f"target {self.target}: {'ok' if self.met else 'MISSED'}"
        return f"{self.name}: {self.value}  ({verdict}){'  ' + self.detail if self.detail else ''}"


def ratio_text(value: float) -> str:
    if value >= 0.095 or value == 0:
        return f"{value:.2f}x"
    return f"{value:.2g}x (1/{1 / value:,.0f})"


@dataclass
class Report:
    benchmark: str
    figures: list[Figure] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # correctness checks that did not hold

    def _add(self, figure: Figure) -> None:
        self.figures.append(figure)
        print("  => " + figure.line())
        sys.stdout.flush()

    def ratio(self, name: str, value: float, target: str | None = None, met: bool | None = None,
              detail: str = "") -> None:
        """A ratio against the baseline measured in the same run."""
        self._add(Figure(name, ratio_text(value), target, met, detail))

    def absolute(self, name: str, value: str, target: str | None = None, met: bool | None = None,
                 detail: str = "") -> None:
        """An absolute figure, with an absolute target or none (printed next to its ratio)."""
        self._add(Figure(name, value, target, met, detail))

    def check(self, ok: bool, message: str) -> bool:
        """A correctness check: a failed one makes the whole run exit non-zero."""
        print(f"  check: {message}: {'ok' if ok else 'FAILED'}")
        sys.stdout.flush()
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
        print("  " + "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))))
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


def sqlite_files_bytes(home: Path) -> int:
    """The store's SQLite file with its write-ahead log and index, and the log chunks kept beside it
    (``trainmon.db-logs/``), as they are now."""
    return sum(path.stat().st_size for path in [*home.glob("trainmon.db*"), *home.glob("trainmon.db-logs/*")]
               if path.is_file())


def checkpointed_bytes(home: Path) -> int:
    """:func:`sqlite_files_bytes` once the write-ahead log is copied into the file and emptied: what
    the data takes at rest (after the store's checkpointing thread, if it is copying the log then)."""
    import sqlite3

    db = sqlite3.connect(home / "trainmon.db")
    deadline = time.monotonic() + 60.0
    while db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] and time.monotonic() < deadline:
        time.sleep(0.05)  # busy: another checkpoint is under way
    db.close()
    return sqlite_files_bytes(home)


@dataclass(frozen=True)
class Served:
    """A running ``trainmon server`` and the credentials it made on its first start."""

    url: str
    home: Path

    @property
    def token(self) -> str:
        from trainmon.server import auth

        token = auth.read_token(self.home)
        assert token is not None, "the server made no token"
        return token

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    @property
    def key(self) -> tuple[str, str]:
        from trainmon import access_keys

        key = access_keys.oldest(self.home)
        assert key is not None, "the server issued no key"
        return key.AccessKeyId, key.SecretAccessKey

    def sign_in(self, context: Any) -> None:
        """A browser context given the session cookie signing in sets, without loading a page (whose
        files would then come from the context's cache)."""
        from trainmon.server import auth

        port = int(self.url.rsplit(":", 1)[1])
        context.add_cookies([{"name": auth.cookie_name(port), "value": auth.session_value(self.token),
                              "url": self.url, "httpOnly": True, "sameSite": "Strict"}])


@contextmanager
def running_server(home: Path) -> Iterator[Served]:
    process = subprocess.Popen([sys.executable, "-m", "trainmon", "server", "--port", "0"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env=child_env(TRAINMON_HOME=str(home)))
    assert process.stdout is not None
    try:
        line = process.stdout.readline()
        found = re.search(r"(http://\S+)/ ", line)
        if found is None:
            raise RuntimeError(f"trainmon server did not start: {line}{process.stdout.read()}")
        threading.Thread(target=process.stdout.read, daemon=True).start()  # keep its pipe drained
        yield Served(found.group(1), home)
    finally:
        process.send_signal(2)
        process.wait(30)
