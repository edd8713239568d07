"""The job's pipes into their spool files, in a process of its own.

A job writes as fast as its pipes are read. Read by a thread of the supervisor, a pipe waits for
Python's lock whenever the ingestor, the rules or the monitor hold it (a switch every 5 ms): a job
flooding its output ran at a fifteenth of a plain pipe's speed. So one small process per job (per
host agent on a Ray node) does nothing but move each pipe's bytes into its spool file, with
``splice`` (the kernel moves them; Python never holds them), framed with their read time
(:data:`FRAME`), and tells the supervisor where each chunk went, in a note of :data:`NOTE` on a
pipe of its own. Its own lock is never wanted by anything else.

The process imports nothing but the standard library and is run by path with ``python -I -S``,
so it starts in milliseconds, before the job's first megabyte fills a pipe. It is started in a
session of its own, so a Ctrl-C or a closed terminal reaches the supervisor, not it; it carries
no job tag, so nothing that ends the job's processes ends it: it ends when every pipe has ended
(the job's last writer closed it), or when the supervisor tells it to give up on the pipes still
open (``abandon`` on its standard input). If the supervisor dies, it goes on spooling until the
pipes end, and whoever reaps the job stores the spool (:mod:`trainmon.runtime.capture.recovery`).

A pipe that is flooded (a read of :data:`FLOOD_BYTES` or more) has its file's blocks reserved
:data:`RESERVE_BYTES` ahead of its end (``fallocate`` keeping the file's size): ext4 writes a
file's new blocks more slowly than blocks reserved beforehand (a gigabyte spliced from a pipe took
1.4 to 2.1 s into new blocks, 0.7 to 1.2 s into reserved ones), and a flooding job waits on the
spooler. What is reserved past the end is released when the pipe ends.

A spool never takes the room the store needs to keep the job's records: a spool file is not
written (nor its blocks reserved ahead) while its file system's free space is short of
:func:`store_reserve` (64 MiB, or a quarter of a small file system), and the supervisor frees
the blocks of what is stored as it goes (:func:`punch`), so a spool holds the backlog, not the
job's whole output. When a spool file cannot be written (a full disk, or room kept for the
store), the read's bytes go to the supervisor in the note itself (:data:`HELD`), to be held in
memory or counted as lost there; the file is tried again every second. If this process dies, the supervisor reads the pipes itself from where the
spool files end (:class:`trainmon.runtime.capture.pipes.PipeReader`).

Run as ``python -I -S spooler.py NOTES_FD CONTROL_FD PIPE_FD:OFFSET:PATH ...``.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import struct
import sys
import time

TYPE_CHECKING = False  # typing costs this process's start 11 ms
if TYPE_CHECKING:
    from collections.abc import Callable

FRAME = struct.Struct("<qI")  # a spool frame's header: read time (ms), length; the bytes follow
NOTE = struct.Struct("<BBxxIqq")  # pipe index, kind, length, read time (ms), spool offset of the frame
SPOOLED, HELD, ENDED, TROUBLE = 0, 1, 2, 3  # note kinds: a frame written; bytes that follow; the pipe ended; why not
READ_BYTES = 1 << 20
FLOOD_BYTES = 256 << 10  # a read this large: the pipe is flooded, and its file's blocks are reserved ahead
RESERVE_BYTES = 16 << 20  # how far ahead (per flooded pipe; released at its end)
KEEP_SIZE = 1  # fallocate's FALLOC_FL_KEEP_SIZE: blocks reserved past the end, the size unchanged
PUNCH_HOLE = 2  # fallocate's FALLOC_FL_PUNCH_HOLE (with KEEP_SIZE): a range's blocks freed, read back as zeros
STORE_RESERVE_BYTES = 64 << 20  # free space a spool leaves to the store (a quarter of a smaller file system)
ROOM_CHECK_BYTES = 1 << 20  # a spool's file system's free space is checked again after this much is written
RETRY_MS = 1000  # a spool file that could not be written is tried again this often
_UNFINISHED = FRAME.pack(0, 0)  # a frame being written: a header of zeros until its length is known


def now_ms() -> int:
    return time.time_ns() // 1_000_000


_fallocate: Callable[[int, int, int, int], int] | None = None  # libc's, once looked up
_looked_up = False  # by the first flood: ctypes costs milliseconds that no other job needs


def _allocate(fd: int, mode: int, offset: int, length: int) -> bool:
    """fallocate(2); False where it cannot be done (no such call, a file system without it, a full disk)."""
    global _fallocate, _looked_up
    if not _looked_up:
        _looked_up = True
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            function = getattr(libc, "fallocate64", None) or libc.fallocate
            function.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
            _fallocate = function
        except (ImportError, OSError, AttributeError):  # not Linux, or no C library to be found
            pass
    return _fallocate is not None and _fallocate(fd, mode, offset, length) == 0


def reserve(fd: int, offset: int, length: int) -> bool:
    """Reserve a file's blocks from ``offset`` on without changing its size; False where that cannot be done."""
    return _allocate(fd, KEEP_SIZE, offset, length)


def cut_to(fd: int, size: int) -> None:
    """The file ends at ``size``, with no blocks reserved past it: truncated only when it does not
    already. A truncation to nothing makes ext4 write every dirty page of the file back when a
    descriptor of it is next closed (its heuristic for a file rewritten from scratch), so a new
    spool truncated to its own empty size had a flood written to disk (a gigabyte in under a second,
    beside the store's own writes) that freeing its blocks as it is stored keeps in memory, never
    written. Blocks reserved past the end (a spooler that died mid-flood) are freed by truncating."""
    status = os.fstat(fd)
    blocks = -(-size // status.st_blksize) * status.st_blksize if status.st_blksize else size
    if status.st_size != size or status.st_blocks * 512 > blocks:
        os.ftruncate(fd, size)


def punch(fd: int, offset: int, length: int) -> bool:
    """Free a range of a file's blocks (it reads back as zeros; the size is unchanged); False where
    the file system cannot."""
    return _allocate(fd, PUNCH_HOLE | KEEP_SIZE, offset, length)


def store_reserve(total_bytes: int) -> int:
    """The free space a spool leaves to the store on a file system of ``total_bytes``."""
    return min(STORE_RESERVE_BYTES, total_bytes // 4)


def room(fd: int) -> tuple[int, int]:
    """(free bytes a spool may take, the store's reserve) on the file system of file ``fd``."""
    found = os.fstatvfs(fd)
    reserve_bytes = store_reserve(found.f_blocks * found.f_frsize)
    return found.f_bavail * found.f_frsize - reserve_bytes, reserve_bytes


class Spool:
    """One pipe and its spool file."""

    def __init__(self, index: int, fd: int, offset: int, path: str) -> None:
        self.index, self.fd, self.offset, self.path = index, fd, offset, path
        self.file = -1
        self.retry_ms = 0  # while the file fails: when to try it again
        self.flooded = False  # the last read was large: reserve the file's blocks ahead
        self.reserved = 0  # the file's blocks are reserved up to here (0: none past its end)
        self.room = 0  # what the file may still take before its file system's free space is checked again
        self.may_reserve = False  # whether blocks may be reserved ahead (far from the store's reserve)

    def open(self) -> None:
        self.file = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
        cut_to(self.file, self.offset)  # a frame cut short by an earlier failure goes
        self.reserved = 0
        self.room = 0

    def _make_room(self) -> None:
        """Room for one more read (OSError ENOSPC when taking it would eat into the store's reserve;
        blocks reserved ahead count as taken)."""
        if self.room >= FRAME.size + READ_BYTES:
            return
        free, reserve_bytes = room(self.file)
        if free < FRAME.size + READ_BYTES:
            raise OSError(errno.ENOSPC, f"the spool leaves the last {reserve_bytes >> 20} MiB of its file system's "
                          "free space to the store")
        self.room = min(free, ROOM_CHECK_BYTES)
        self.may_reserve = free >= 2 * RESERVE_BYTES  # blocks reserved ahead only far from the store's reserve

    def _reserve(self) -> None:
        """Keep a flooded file's blocks reserved at least a read ahead of its end."""
        if self.offset + FRAME.size + READ_BYTES <= self.reserved:
            return
        start = max(self.offset, self.reserved)
        if reserve(self.file, start, self.offset + RESERVE_BYTES - start):
            self.reserved = self.offset + RESERVE_BYTES
        else:
            self.flooded = False  # written as it comes, until the next large read

    def release(self) -> None:
        """Free the blocks reserved past the file's end (truncating it where it ends does)."""
        if self.file >= 0 and self.reserved > self.offset:
            try:
                os.ftruncate(self.file, self.offset)
            except OSError:
                pass
        self.reserved = 0

    def move(self, notes: Notes) -> bool:
        """One read of the pipe into the file (or, the file failing, to the supervisor); False at
        the pipe's end."""
        stamp = now_ms()
        if self.file < 0 and stamp >= self.retry_ms:
            try:
                self.open()
            except OSError as exc:
                self._failed(notes, exc, stamp)
        if self.file >= 0:
            try:
                self._make_room()
                if self.flooded and self.may_reserve:
                    self._reserve()
                os.pwrite(self.file, _UNFINISHED, self.offset)  # the frame's room: a full disk fails here
                moved = self._to_file()
            except OSError as exc:  # nothing was taken from the pipe: it is read below
                self._failed(notes, exc, stamp)
            else:
                return self._framed(notes, moved)
        try:
            data = os.read(self.fd, READ_BYTES)
        except OSError:
            data = b""
        if data:
            notes.send(NOTE.pack(self.index, HELD, len(data), now_ms(), self.offset) + data)
        return bool(data)

    def _to_file(self) -> int:
        """A read's bytes after the frame's header; how many (0: the pipe ended)."""
        if hasattr(os, "splice"):  # Linux: the kernel moves the pages, Python never holds them
            return os.splice(self.fd, self.file, READ_BYTES, offset_dst=self.offset + FRAME.size)
        data = os.read(self.fd, READ_BYTES)
        if data:
            os.pwrite(self.file, data, self.offset + FRAME.size)
        return len(data)

    def _framed(self, notes: Notes, moved: int) -> bool:
        """The frame's header written (its read time, its length) and noted; False at the pipe's end."""
        stamp = now_ms()
        if not moved:
            os.ftruncate(self.file, self.offset)  # which releases what was reserved
            self.reserved = 0
            return False
        try:
            os.pwrite(self.file, FRAME.pack(stamp, moved), self.offset)
        except OSError as exc:  # the bytes are in the file, not framed: they go to the supervisor
            try:
                data = os.pread(self.file, moved, self.offset + FRAME.size)
            except OSError:
                data = b""
            self._failed(notes, exc, stamp)
            if data:
                notes.send(NOTE.pack(self.index, HELD, len(data), stamp, self.offset) + data)
            return True
        notes.send(NOTE.pack(self.index, SPOOLED, moved, stamp, self.offset))
        self.offset += FRAME.size + moved
        self.room -= FRAME.size + moved
        self.flooded = moved >= FLOOD_BYTES
        return True

    def _failed(self, notes: Notes, exc: OSError, stamp: int) -> None:
        if self.file >= 0:
            try:
                os.ftruncate(self.file, self.offset)  # no frame cut short: the next follows the last whole one
            except OSError:
                pass
            os.close(self.file)
            self.file = -1
        self.retry_ms = stamp + RETRY_MS
        why = str(exc).encode("utf-8", "replace")
        notes.send(NOTE.pack(self.index, TROUBLE, len(why), stamp, self.offset) + why)


class Notes:
    """The pipe to the supervisor; when nobody reads it any more (the supervisor died), notes are
    not sent, and the spooling goes on."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def send(self, note: bytes) -> None:
        if self.fd < 0:
            return
        view = memoryview(note)
        try:
            while view:
                view = view[os.write(self.fd, view):]
        except OSError:
            os.close(self.fd)
            self.fd = -1


def run(notes: Notes, control: int, spools: list[Spool]) -> None:
    poller = select.poll()
    by_fd = {spool.fd: spool for spool in spools}
    for fd in by_fd:
        poller.register(fd, select.POLLIN | select.POLLHUP)
    poller.register(control, select.POLLIN | select.POLLHUP)
    while by_fd:
        for fd, _events in poller.poll(RETRY_MS):
            if fd == control:
                if b"abandon" in os.read(control, 64):
                    for spool in by_fd.values():
                        spool.release()
                    return  # the job is over; what is still in the pipes is not read
                poller.unregister(control)  # the supervisor is gone: spool until the pipes end
                continue
            spool = by_fd[fd]
            if not spool.move(notes):
                poller.unregister(fd)
                del by_fd[fd]
                notes.send(NOTE.pack(spool.index, ENDED, 0, now_ms(), spool.offset))


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor stops the job; this drains its pipes
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    notes, control = Notes(int(argv[0])), int(argv[1])
    spools = []
    for index, given in enumerate(argv[2:]):
        fd, offset, path = given.split(":", 2)
        spools.append(Spool(index, int(fd), int(offset), path))
    run(notes, control, spools)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
