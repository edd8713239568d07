"""Where trainmon keeps its data: ``TRAINMON_HOME``, else the per-user data directory; the
database, when it is not the SQLite file there (``TRAINMON_DATABASE_URL``); and the Python that
runs script-mode entry points (``TRAINMON_PYTHON``)."""

from __future__ import annotations

import os
import sys
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


def job_dir(root: Path | None, name: str) -> Path:
    """A job's own directory: its hosts' contract directories, its spool, a detached supervisor's log."""
    return jobs_dir(root) / name


def tuning_dir(root: Path | None, name: str) -> Path:
    """Where a hyperparameter tuning job's tuner writes its log."""
    return (root or home()) / "tuning" / name


def output_dir(root: Path | None = None) -> Path:
    return (root or home()) / "output"


def make_private_dir(path: Path) -> None:
    """Create a directory only its user can enter (0700), with the parents it needs; a directory that
    exists keeps its mode (the user chose it). A StoreError says why it cannot be made."""
    from .errors import StoreError

    missing = []
    for level in (path, *path.parents):
        if level.exists():
            break
        missing.append(level)
    try:
        for level in reversed(missing):  # each one 0700 (mkdir's parents would get the umask's mode)
            level.mkdir(mode=0o700, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create the data directory {path}: {exc.strerror or exc}. Choose another with "
                         "--home or TRAINMON_HOME") from None
    if not path.is_dir():
        raise StoreError(f"the data directory {path} is not a directory: choose another with --home or TRAINMON_HOME")


def write_private(path: Path, text: str) -> None:
    """``text`` as the whole of ``path``, readable by its user only: written to a private temporary
    file beside it, then renamed over it, so a reader finds the old file or the new one."""
    make_private_dir(path.parent)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    os.replace(temporary, path)


def private_file(path: Path, *, create: bool = True) -> None:
    """Make ``path`` readable by its user only (0600): created so when it is missing (and ``create``),
    its mode changed when it exists and is ours. A file that exists is never opened: a process's
    POSIX locks on a file (SQLite's) go when it closes any descriptor of it."""
    try:
        if create:
            try:
                os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
                return
            except FileExistsError:
                pass
        status = path.stat()
        if status.st_uid == os.getuid() and status.st_mode & 0o077:
            path.chmod(0o600)
    except OSError:
        pass  # missing, or not ours to change: the store reports a real problem when it opens the file


DATABASE_URL_VARIABLE = "TRAINMON_DATABASE_URL"


def database_url() -> str | None:
    """The database to use instead of the SQLite file: ``TRAINMON_DATABASE_URL``, when set and not empty."""
    return os.environ.get(DATABASE_URL_VARIABLE, "").strip() or None


PYTHON_VARIABLE = "TRAINMON_PYTHON"


def python_interpreter() -> str:
    """The Python that runs a script-mode job's entry point: ``TRAINMON_PYTHON``, when set and not
    empty, else the one running trainmon."""
    return os.environ.get(PYTHON_VARIABLE, "").strip() or sys.executable
