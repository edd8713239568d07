"""A pipe's spool file: each read of the job's output appended as a frame (its read time and length,
then the bytes), named by host and pipe in the job's directory, read back frame by frame
(:func:`spool_frames`) and released from the front as the ingestor stores it
(:func:`release_spool`), so a long job's spool holds only what is not yet stored.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

from . import spooler

FRAME = spooler.FRAME  # a spool frame's header: read time (ms), length; the bytes follow


NOTE = spooler.NOTE


RELEASE_BYTES = 4 << 20  # a spool's stored blocks are freed this much at a time


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def pipe_name(is_stderr: bool) -> str:
    return "stderr" if is_stderr else "stdout"


def spool_path(directory: Path, host: str, is_stderr: bool) -> Path:
    """The spool file of a host's stdout or stderr, in the job's spool directory."""
    return directory / f"{host}-{pipe_name(is_stderr)}"


def spool_files(directory: Path) -> Iterator[Path]:
    """Every spool file in a job's spool directory (the names :func:`spool_path` gives)."""
    return directory.glob("*-std*")


def release_spool(path: Path, frame: int) -> None:
    """Free a spool file's blocks before the frame at ``frame``, whose records are stored (no one
    reads them again): a header at the start says where the frames go on (a negative read time),
    and the bytes between are punched out, the file's size unchanged. A file system that cannot
    punch keeps them (as every spool did before)."""
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError:
        return
    try:
        os.pwrite(fd, FRAME.pack(-frame, 0), 0)
        if frame > FRAME.size:
            spooler.punch(fd, FRAME.size, frame - FRAME.size)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_all(fd: int, header: bytes, data: bytes) -> None:
    """Both parts, whole: a frame is only ever followed by its bytes."""
    written = os.writev(fd, [header, data])
    if written < len(header) + len(data):
        rest = memoryview(header + data)[written:]
        while rest:
            rest = rest[os.write(fd, rest):]


def spool_frames(path: Path, from_offset: int) -> Iterator[tuple[int, int, int]]:
    """(offset, read time in ms, length) of a spool file's chunks from ``from_offset`` on; a chunk
    that ``from_offset`` falls inside comes without its first part. A frame cut short at the end
    (the reader died writing it) ends the file; so does one whose header is still zeros (the
    spooler writes it once the read's bytes are in: it died in between), but for those bytes,
    read at the file's last change."""
    status = path.stat()
    size = status.st_size
    with open(path, "rb") as spool:
        position = 0
        while position + FRAME.size <= size:
            spool.seek(position)
            stamp, length = FRAME.unpack(spool.read(FRAME.size))
            if stamp < 0 and -stamp > position:  # the frames before were released (release_spool): on from there
                position = -stamp
                continue
            start = position + FRAME.size
            if length == 0:  # a frame begun: what follows it is its read
                if size > max(start, from_offset):
                    yield max(start, from_offset), int(status.st_mtime * 1000), size - max(start, from_offset)
                return
            end = start + length
            if end > size:
                return
            if end > from_offset:
                yield max(start, from_offset), stamp, end - max(start, from_offset)
            position = end
