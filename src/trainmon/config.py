"""Where trainmon keeps its data: ``TRAINMON_HOME``, else the per-user data directory; and the
database, when it is not the SQLite file there (``TRAINMON_DATABASE_URL``)."""

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


DATABASE_URL_VARIABLE = "TRAINMON_DATABASE_URL"


def database_url() -> str | None:
    """The database to use instead of the SQLite file: ``TRAINMON_DATABASE_URL``, when set and not empty."""
    return os.environ.get(DATABASE_URL_VARIABLE, "").strip() or None
