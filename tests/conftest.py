from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from trainmon.store import SqliteStore, open_store


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh data directory; subprocesses inherit it through TRAINMON_HOME."""
    root = tmp_path / "home"
    root.mkdir()
    monkeypatch.setenv("TRAINMON_HOME", str(root))
    return root


@pytest.fixture
def store(home: Path) -> SqliteStore:
    s = open_store(home)
    yield s
    s.close()


@pytest.fixture
def script(tmp_path: Path) -> Callable[[str], Path]:
    """Write a small Python training script and return its path."""
    counter = iter(range(1000))

    def write(body: str) -> Path:
        path = tmp_path / f"job_{next(counter)}.py"
        path.write_text(textwrap.dedent(body), encoding="utf-8")
        return path

    return write


def run_cli(*args: str, input: bytes | None = None, timeout: float = 120, check: bool = False,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m trainmon ARGS`` as a user would, in a real process."""
    result = subprocess.run(
        [sys.executable, "-m", "trainmon", *args],
        input=input.decode() if input is not None else None,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    if check and result.returncode != 0:
        raise AssertionError(f"trainmon {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


@pytest.fixture
def cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    return run_cli


PY = sys.executable
