"""Where trainmon keeps its data: ``TRAINMON_HOME``, else the per-user data directory."""

from __future__ import annotations

import os
from pathlib import Path

DATABASE_FILE = "trainmon.db"


def home() -> Path:
    explicit = os.environ.get("TRAINMON_HOME")
    if explicit:
        return Path(explicit).expanduser().resolve()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return (Path(base) / "trainmon").resolve()


def database_path(root: Path | None = None) -> Path:
    return (root or home()) / DATABASE_FILE


def jobs_dir(root: Path | None = None) -> Path:
    return (root or home()) / "jobs"


def output_dir(root: Path | None = None) -> Path:
    return (root or home()) / "output"
