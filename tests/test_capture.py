"""The pieces of capture and the runtime that the end-to-end tests reach only through a whole job."""

from __future__ import annotations

import fcntl
import os
import select
import signal
import threading
import time
from pathlib import Path

import pytest

from trainmon.errors import StoreError, StoreFull
from trainmon.parsing.definitions import validate_definitions
from trainmon.parsing.framing import Mode
from trainmon.runtime.capture import pipes, records
from trainmon.runtime.capture.loss import Loss, LossCounter
from trainmon.runtime.capture.pipes import MemoryBudget, PipeOutput, PipeReader, Spooler, start_spool
from trainmon.runtime.capture.records import RecordCutter
from trainmon.runtime.capture.spool import FRAME, spool_files, spool_frames, spool_path
from trainmon.runtime.processes.procfs import descendants, parse_process_stat, read_process_stat
from trainmon.runtime.retry import Backoff
from trainmon.store.sql import store_error

from .conftest import wait_for


def test_a_full_disk_is_its_own_store_error_in_the_same_words() -> None:
    full = store_error("full", "/data/trainmon.db", "database or disk is full")
    assert isinstance(full, StoreFull)
    assert full.message == ("the disk holding /data/trainmon.db is full: free some space; what was stored so far "
                            "stays readable")
    assert not isinstance(store_error("locked", "/data/trainmon.db", "database is locked"), StoreFull)
    assert type(store_error("other", "/data/trainmon.db", "the disk is full of surprises")) is StoreError


def test_backoff_doubles_up_to_its_most_and_starts_again() -> None:
    backoff = Backoff()
    assert [backoff.next_delay() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    backoff.reset()
    assert backoff.next_delay() == 0.5


@pytest.mark.parametrize("after_cr", [False, True])
def test_a_restarted_cutter_cuts_like_a_new_one(after_cr: bool) -> None:
    cutter = RecordCutter(Mode.TERMINAL)
    assert cutter.feed(b"half a rec") == b""
    cutter.restart(after_cr=after_cr)
    fresh = RecordCutter(Mode.TERMINAL, after_cr=after_cr)
    for data in (b"\nnext\r", b"\nlast"):
        assert cutter.feed(data) == fresh.feed(data)
        assert cutter.after_cr == fresh.after_cr
    assert cutter.finish() == fresh.finish() == b"last"


def test_a_loss_is_recorded_only_when_something_was_lost() -> None:
    assert Loss().unstored() is None
    assert Loss(3, 2, 40, "the disk is full").unstored() == {"Records": 3, "Points": 2, "Bytes": 40,
                                                             "Reason": "the disk is full"}
    assert Loss(0, 0, 5, "cut short").unstored() is not None  # bytes of a record never finished


def test_a_loss_counter_compiles_its_definitions_only_when_output_is_dropped() -> None:
    definitions = validate_definitions([{"Name": "loss", "Regex": r"loss=(\S+)"}])
    counter = LossCounter(definitions, Mode.TERMINAL)
    counter.finish()
    assert counter._extractor is None and counter.loss == Loss()
    counter.begin(b"o", b"step 3 lo", "the spool could not be written")  # mid-record: its first part was kept
    counter.drop(b"ss=9\nloss=1\nloss=")
    counter.drop(b"2\n")
    counter.finish()
    # "step 3 lo" is stored as a record; its lost point (loss=9, cut in two) and the next two records are not
    assert counter.loss == Loss(2, 3, 19, "the spool could not be written")


def test_a_loss_counter_counts_the_points_of_records_a_drop_cuts_once() -> None:
    definitions = validate_definitions([{"Name": "loss", "Regex": r"loss=([0-9.]+)"}, {"Name": "acc", "Regex": r"acc=(\S+)"}])
    counter = LossCounter(definitions, Mode.TERMINAL)
    counter.begin(b"5", b"loss=0.5", "full")  # the kept start has its point: the drop adds acc's only
    counter.drop(b" acc=0.9\nloss=1 acc=1\nloss=0.")
    assert counter.end(b"25 acc=0.8\nloss=3\n") is False  # kept again mid-record: "25 acc=0.8" is stored
    # the drop's own record (2 points), acc=0.9 of the first cut record, and loss=0.25 of the second (what is
    # stored of it, "25 acc=0.8", gives its acc point but a loss of 25 nowhere: "loss=0." was dropped)
    assert counter.loss == Loss(1, 4, 29, "full")
    counter.begin(b"=", b"lo", "full")
    counter.drop(b"ss")  # dropped and kept again inside one record: two stored pieces, one record's points
    counter.end(b"=7\n")
    assert counter.loss == Loss(1, 5, 31, "full")


def test_spool_files_are_named_by_host_and_stream(tmp_path: Path) -> None:
    paths = [spool_path(tmp_path, "algo-1", False), spool_path(tmp_path, "algo-1", True)]
    assert [p.name for p in paths] == ["algo-1-stdout", "algo-1-stderr"]
    for path in paths:
        path.write_bytes(b"")
    (tmp_path / "other").write_bytes(b"")
    assert sorted(spool_files(tmp_path)) == sorted(paths)


def _output(path: Path, wake: threading.Event | None = None) -> PipeOutput:
    return PipeOutput(path, wake or threading.Event(), budget=MemoryBudget(),
                      losses=LossCounter(validate_definitions([]), Mode.TERMINAL))


def test_a_spool_that_could_not_be_opened_is_tried_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipes, "SPOOL_RETRY_MS", 0)
    directory = tmp_path / "spool"  # missing at first: the spool cannot be opened
    path = spool_path(directory, "algo-1", False)
    read_end, write_end = os.pipe()
    output = _output(path)
    reader = PipeReader(read_end, output)
    reader.start()
    try:
        os.write(write_end, b"held in memory\n")
        wait_for(lambda: output.chunks, "the first read")
        assert output.spool_error is not None
        assert [c.data for c in output.chunks] == [b"held in memory\n"]
        directory.mkdir()
        os.write(write_end, b"spooled\n")
        wait_for(lambda: len(output.chunks) >= 2, "the second read")
    finally:
        os.close(write_end)
        reader.join(10)
        os.close(read_end)
    first, second = output.chunks
    assert second.data is None and output.spool_error is None and output.eof.is_set()
    assert [(offset, length) for offset, _, length in spool_frames(path, FRAME.size)] == [(second.start, 8)]
    assert path.read_bytes()[second.start:] == b"spooled\n"


def test_the_spooler_process_frames_every_read_and_notes_where(tmp_path: Path) -> None:
    """Two pipes spooled by the process: every byte in order, each noted read a frame of the file
    (the first after a preamble trainmon wrote), a pipe's end noted."""
    pipes = [os.pipe(), os.pipe()]
    outputs = [_output(spool_path(tmp_path, "algo-1", is_stderr)) for is_stderr in (False, True)]
    offsets = [start_spool(outputs[0], b"trainmon: about the job\n"), start_spool(outputs[1], b"")]
    spooled = Spooler([(read_end, output, offset) for (read_end, _), output, offset in
                       zip(pipes, outputs, offsets, strict=True)])
    spooled.start()
    assert spooled.process is not None
    written = [bytearray(), bytearray()]
    for index in range(400):
        line = f"line {index} ".encode() + b"x" * (index * 37 % 3000) + b"\n"
        os.write(pipes[index % 2][1], line)
        written[index % 2] += line
    for _, write_end in pipes:
        os.close(write_end)
    wait_for(lambda: all(output.eof.is_set() for output in outputs), "both pipes' ends")
    spooled.join(5)
    assert spooled.process.returncode == 0 and not spooled.readers
    for output, expected, first in zip(outputs, written, (b"trainmon: about the job\n", b""), strict=True):
        data = output.spool_path.read_bytes()
        assert b"".join(data[c.start:c.start + c.length] for c in output.chunks) == first + expected
        assert [(c.start, c.length) for c in output.chunks] == [(start, length) for start, _, length in
                                                                 spool_frames(output.spool_path, FRAME.size)]


def test_a_flooded_pipes_spool_has_its_blocks_reserved_ahead_until_the_pipe_ends(tmp_path: Path) -> None:
    """Reads of a megabyte (a flood) make the spooler reserve the file's blocks ahead of its end,
    its size unchanged; the pipe's end releases them. A small read reserves nothing."""
    from trainmon.runtime.capture import spooler

    probe = os.open(tmp_path / "probe", os.O_WRONLY | os.O_CREAT)
    can_reserve = spooler.reserve(probe, 0, 1 << 20)  # not every file system can
    os.close(probe)
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 1 << 20)  # as the launcher's pipes
    output = _output(spool_path(tmp_path, "algo-1", False))
    spooled = Spooler([(read_end, output, start_spool(output, b""))])
    spooled.start()

    def allocated() -> int:
        return os.stat(output.spool_path).st_blocks * 512

    def wrote(data: bytes, chunks: int) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(write_end, view):]
        wait_for(lambda: len(output.chunks) >= chunks, f"{chunks} reads")

    sent = b"small\n"
    wrote(sent, 1)
    assert allocated() < spooler.FLOOD_BYTES  # a small read reserves nothing
    for number in range(3):
        block = (b"%d" % number) * (1 << 20)
        sent += block
        wrote(block, 1 + len(output.chunks))  # whole or in parts, each a read
    size = output.spool_path.stat().st_size
    assert size == sum(FRAME.size + c.length for c in output.chunks) and sum(c.length for c in output.chunks) == len(sent)
    if can_reserve:
        assert allocated() >= size + spooler.RESERVE_BYTES // 2  # reserved past the end, the size unchanged
    os.close(write_end)
    wait_for(output.eof.is_set, "the pipe's end")
    spooled.join(5)
    assert allocated() < size + (1 << 20)  # released (a file system may keep a little)
    data = output.spool_path.read_bytes()
    assert b"".join(data[c.start:c.start + c.length] for c in output.chunks) == sent


def test_a_spool_is_truncated_only_where_a_frame_was_cut_short(tmp_path: Path) -> None:
    """Opening a spool cuts off a frame an earlier failure cut short, and blocks reserved past its
    end, and leaves a whole one alone: ext4 writes every dirty page of a file truncated to nothing
    back to disk when a descriptor of it is next closed, so a new spool truncated to its own empty
    size had a flood written to disk that freeing its blocks as it is stored keeps in memory. A
    truncation changes the file's time even where it changes nothing else, which is how this sees
    one."""
    from trainmon.runtime.capture import spooler

    path = spool_path(tmp_path, "algo-1", False)
    offset = start_spool(_output(path), b"trainmon: about the job\n")
    os.utime(path, (1000, 1000))
    spool = spooler.Spool(0, -1, offset, str(path))
    spool.open()
    os.close(spool.file)
    assert path.stat().st_mtime == 1000 and path.stat().st_size == offset  # whole: not truncated
    with open(path, "ab") as cut_short:
        cut_short.write(FRAME.pack(0, 0) + b"half a re")
    spool.open()
    os.close(spool.file)
    assert path.stat().st_size == offset and path.stat().st_mtime > 1000
    reserving = os.open(path, os.O_WRONLY)
    reserved = spooler.reserve(reserving, offset, spooler.RESERVE_BYTES)  # (a spooler that died mid-flood)
    os.close(reserving)
    if reserved:  # (not every file system can)
        assert path.stat().st_blocks * 512 >= spooler.RESERVE_BYTES
        spool.open()
        os.close(spool.file)
        assert path.stat().st_size == offset and path.stat().st_blocks * 512 < spooler.RESERVE_BYTES // 2  # freed


def test_when_the_spooler_process_dies_this_one_reads_on_losing_nothing(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    output = _output(spool_path(tmp_path, "algo-1", False))
    spooled = Spooler([(read_end, output, start_spool(output, b""))])
    spooled.start()
    assert spooled.process is not None
    os.write(write_end, b"before\n")
    wait_for(lambda: output.chunks, "the first read")
    spooled.process.kill()
    wait_for(lambda: spooled.readers, "a reader of this process")
    os.write(write_end, b"after\n")
    os.close(write_end)
    wait_for(output.eof.is_set, "the pipe's end")
    spooled.join(5)
    data = output.spool_path.read_bytes()
    assert b"".join(data[c.start:c.start + c.length] for c in output.chunks) == b"before\nafter\n"
    assert [c.length for c in output.chunks] == [length for _, _, length in spool_frames(output.spool_path, 0)]


def test_a_spool_the_spooler_cannot_write_sends_its_reads_to_be_held(tmp_path: Path) -> None:
    """The spool's directory is missing: the process sends the reads themselves (held in memory
    here); once it exists, reads are spooled again."""
    directory = tmp_path / "spool"
    read_end, write_end = os.pipe()
    output = _output(spool_path(directory, "algo-1", False))
    spooled = Spooler([(read_end, output, start_spool(output, b""))])
    spooled.start()
    os.write(write_end, b"held in memory\n")
    wait_for(lambda: output.chunks, "the first read")
    assert [c.data for c in output.chunks] == [b"held in memory\n"] and output.spool_error is not None
    directory.mkdir()
    deadline = time.monotonic() + 20
    while len(output.chunks) < 2 or output.chunks[-1].data is not None:  # tried again within a second
        assert time.monotonic() < deadline
        os.write(write_end, b"later\n")
        time.sleep(0.1)
    os.close(write_end)
    wait_for(output.eof.is_set, "the pipe's end")
    spooled.join(5)
    last = output.chunks[-1]
    assert output.spool_path.read_bytes()[last.start:last.start + last.length] == b"later\n" * (last.length // 6)


def test_a_process_stat_is_read_past_its_command_name(tmp_path: Path) -> None:
    line = b"42 (a) b (c)) R 7 42 42 0 -1 4194304 0 0 0 0 5 6 0 0 20 0 3 0 12345 1000 200 0\n"
    assert parse_process_stat(line) == ("R", 7, 42, 12345)
    me = read_process_stat(os.getpid())
    assert me is not None and me.ppid == os.getppid() and me.pgrp == os.getpgrp()
    assert read_process_stat(0, tmp_path) is None


def test_descendants_come_once_each_depth_first() -> None:
    children = {1: [2, 3], 3: [4], 4: [1]}  # a loop (a reused id) ends, too
    assert descendants([1], children) == [1, 3, 4, 2]
    assert descendants([5], children) == [5]


def test_a_frame_the_spooler_began_holds_the_rest_of_the_spool(tmp_path: Path) -> None:
    """The spooler writes a frame's header once the read's bytes are in: a spool whose last header is
    still zeros (it died in between) holds those bytes after it, read at the file's last change."""
    path = tmp_path / "algo-1-stdout"
    path.write_bytes(FRAME.pack(5, 6) + b"first\n" + FRAME.pack(0, 0) + b"second\n")
    changed_ms = int(path.stat().st_mtime * 1000)
    assert list(spool_frames(path, 0)) == [(FRAME.size, 5, 6), (2 * FRAME.size + 6, changed_ms, 7)]
    path.write_bytes(FRAME.pack(5, 6) + b"first\n" + FRAME.pack(0, 0))  # begun, no bytes in yet
    assert list(spool_frames(path, 0)) == [(FRAME.size, 5, 6)]


def test_a_record_cut_at_the_size_limit_stays_whole_among_reads_of_its_millisecond(tmp_path: Path, monkeypatch) -> None:
    """Reads of one millisecond are stored as one block, but a record cut at MAX_RECORD_BYTES ends
    without a break: the read after it starts a record of its own, however the reads are joined."""
    from trainmon.parsing.extract import Extractor
    from trainmon.runtime.capture.ingestor import HostStream, Ingestor, Pipe
    from trainmon.runtime.capture.records import RecordCutter
    from trainmon.runtime.capture.recovery import SpoolSource
    from trainmon.store import SqliteStore

    monkeypatch.setattr(records, "MAX_RECORD_BYTES", 100)
    reads = [b"loss=1\n", b"x" * 150, b"loss=2\n", b"loss=3\n"]
    spool = tmp_path / "algo-1-stdout"
    with spool.open("wb") as handle:
        for data in reads:
            handle.write(FRAME.pack(5000, len(data)) + data)  # all in one millisecond
    store = SqliteStore(tmp_path / "trainmon.db")
    try:
        job = store.create_job("cut", {"TrainingJobStatus": "InProgress"}, 1000.0)
        stream = store.add_stream(job.id, "algo-1", "cut/algo-1-1", 0)
        definitions = validate_definitions([{"Name": "loss", "Regex": r"loss=(\S+)"}])
        pipe = Pipe(SpoolSource(spool, FRAME.size), RecordCutter(Mode.TERMINAL), False)
        ingestor = Ingestor(store, job.id, [HostStream("algo-1", stream.id, [pipe])], Extractor(definitions, Mode.TERMINAL),
                            threading.Event(), on_error=lambda message: None)
        ingestor.finish_in_this_thread()
        ingestor.close()
        assert [e.message for e in store.events(stream.id)] == ["loss=1", "x" * 150, "loss=2", "loss=3"]
        assert [(p.seq, p.value) for p in store.points(job.id)] == [(0, 1.0), (2, 2.0), (3, 3.0)]
    finally:
        store.close()


@pytest.mark.parametrize("mode", list(Mode))
@pytest.mark.parametrize("crlf", [True, False], ids=["with-crlf", "cr-and-lf-only"])
@pytest.mark.parametrize("map_bytes", [1 << 40, 1], ids=["runs-read", "runs-mapped"])
def test_reads_ingested_together_give_each_read_its_records_time_and_points(tmp_path: Path, mode: Mode,
                                                                            crlf: bool, map_bytes: int,
                                                                            monkeypatch) -> None:
    """Many reads of one pipe, small and large (matched together by the ingestor), with "\\r", "\\r\\n"
    and a "\\r\\n" split between two reads (or, without any "\\r\\n", reads large enough to be matched
    on their own, stored with their "\\r" breaks as read), the runs of reads read back from the spool
    or mapped: every record stored as the mode cuts the whole output, each with the time of the read
    that completed it, each point on its record. Reads of the same millisecond are stored as one log
    chunk."""
    import bisect
    import random
    import re

    import trainmon.runtime.capture.ingestor as ingestor_module
    from trainmon.parsing.extract import Extractor
    from trainmon.parsing.framing import decode, split_text
    from trainmon.runtime.capture.ingestor import HostStream, Ingestor, Pipe
    from trainmon.runtime.capture.records import RecordCutter
    from trainmon.runtime.capture.recovery import SpoolSource
    from trainmon.store import SqliteStore, codec

    monkeypatch.setattr(ingestor_module, "MAP_BYTES", map_bytes)  # (a flood's runs are mapped from the spool)
    rng = random.Random(5)
    output = bytearray()
    for index in range(30_000):
        output += rng.choice([b"step %d loss=%d.5" % (index, index % 7), b"epoch %d 50%%|###" % index, b"noise"])
        output += rng.choice([b"\n", b"\n", b"\r", b"\r\n"] if crlf else [b"\n", b"\n", b"\r"])
    output += b"\n"
    if crlf:
        cuts = sorted(rng.sample(range(1, len(output)), 60)) + [output.index(b"\r\n") + 1]  # one "\r\n" in two reads
    else:
        cuts = sorted(rng.sample(range(1, len(output)), 8))  # reads of about 70 kB
    reads = [bytes(output[start:end]) for start, end in zip([0, *sorted(cuts)], [*sorted(cuts), len(output)],
                                                             strict=True)]
    spool = tmp_path / "algo-1-stdout"
    stamps = [1000 + index // 3 for index in range(len(reads))]  # three reads a millisecond
    with spool.open("wb") as handle:
        for stamp, data in zip(stamps, reads, strict=True):
            handle.write(FRAME.pack(stamp, len(data)) + data)
    store = SqliteStore(tmp_path / "trainmon.db")
    try:
        job = store.create_job("reads", {"TrainingJobStatus": "InProgress"}, 1000.0)
        stream = store.add_stream(job.id, "algo-1", "reads/algo-1-1", 0)
        definitions = validate_definitions([{"Name": "loss", "Regex": r"loss=(\S+)"}])
        pipe = Pipe(SpoolSource(spool, FRAME.size), RecordCutter(mode), False)
        ingestor = Ingestor(store, job.id, [HostStream("algo-1", stream.id, [pipe])], Extractor(definitions, mode),
                            threading.Event(), on_error=lambda message: None)
        ingestor.finish_in_this_thread()
        ingestor.close()
        events = store.events(stream.id, limit=10**6)
        assert [e.message for e in events] == split_text(decode(bytes(output)), mode)
        ends, position = [], 0  # where each read ended in the output
        for data in reads:
            position += len(data)
            ends.append(position)
        pattern = rb"\r\n|\r|\n" if mode.splits_on_cr else rb"\n"
        completed = [bisect.bisect_left(ends, match.start() + 1) for match in re.finditer(pattern, bytes(output))]
        assert [e.timestamp_ms for e in events] == [stamps[read] for read in completed]  # (the last has a break)
        [(chunks,)] = store._read("SELECT count(*) FROM log_chunks")
        assert chunks <= len(set(stamps))
        flagged = store._read("SELECT count(*) FROM log_chunks WHERE packing >= ?", (codec.TEXT_CR_BREAKS,))[0][0]
        assert bool(flagged) == (mode.splits_on_cr and not crlf)  # "\\r" breaks kept as read where no "\\r\\n" is
        whole = Extractor(definitions, mode).scan_columns(bytes(output))  # the whole output at once
        assert [(p.seq, p.value) for p in store.points(job.id)] == list(zip(whole.records.tolist(),
                                                                           whole.values.tolist(), strict=True))
    finally:
        store.close()


def test_the_job_shares_its_supervisors_session_and_never_a_shells(tmp_path: Path) -> None:
    """Linux schedules a session as one group (autogroup): in the supervisor's session the lower
    priority of its storing threads counts against the job's, as it would not across two sessions.
    A supervisor that leads a session with no terminal (a detached one) takes the job in; ``trainmon
    run`` in someone else's session (a shell's, with a terminal or not) supervises from a process
    of its own that leads a new session, and the job joins that one, without the terminal. The job
    always leads a process group of its own; Ctrl-C in the terminal still stops it."""
    import subprocess
    import sys

    import pexpect

    job = ("import os, sys, time\n"
           "try:\n    os.close(os.open('/dev/tty', os.O_RDWR)); tty = 1\nexcept OSError:\n    tty = 0\n"
           "print('ids', os.getpid(), os.getpgid(0), os.getsid(0), os.getppid(), os.getsid(os.getppid()), "
           "os.getpgid(os.getppid()), tty, flush=True)\n"
           "if len(sys.argv) > 1:\n    time.sleep(600)\n")
    (tmp_path / "job.py").write_text(job)
    command = [sys.executable, "-m", "trainmon", "run", "--name", "groups", "--", sys.executable, str(tmp_path / "job.py")]

    def ids(output: str) -> list[int]:
        [line] = [line for line in output.splitlines() if line.startswith("ids ")]
        return list(map(int, line.split()[1:]))

    def env(home: str) -> dict[str, str]:
        return {**os.environ, "TRAINMON_HOME": str(tmp_path / home)}

    # leading a session with no terminal, as a detached supervisor does: the job joins it
    done = subprocess.run(command, capture_output=True, text=True, env=env("led"), timeout=120, check=True,
                          start_new_session=True)
    pid, group, session, parent, parents_session, parents_group, tty = ids(done.stdout)
    assert group == pid != parents_group
    assert session == parents_session and tty == 0

    # in the caller's session: the supervisor leads a session of its own, and the job joins it
    done = subprocess.run(command, capture_output=True, text=True, env=env("within"), timeout=120, check=True)
    pid, group, session, parent, parents_session, _, tty = ids(done.stdout)
    assert group == pid != session == parents_session == parent != os.getsid(0)
    assert tty == 0

    # from a terminal: the same, and the terminal stays with this process, whose Ctrl-C stops the job
    child = pexpect.spawn(command[0], [*command[1:], "wait"], env=env("tty"), encoding="utf-8", timeout=120)
    child.expect(r"ids ([0-9 ]+)\r\n")  # the whole line: a pty may hand it over in pieces
    pid, group, session, parent, parents_session, _, tty = map(int, child.match.group(1).split())
    assert group == pid != session == parents_session == parent != child.pid and tty == 0
    child.sendintr()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 3, child.before  # trainmon run's status for a job that was stopped
    assert "Training job groups: Stopped" in child.before


def test_a_batch_of_large_texts_packs_as_each_alone_also_begun_early_and_after_a_fork() -> None:
    """A flood's batch is compressed on the packing threads, begun when the writer is handed it
    (PackedTexts, its result taken later) or at once: each text unpacks to itself, the small ones kept as they
    are, and one stored with its "\\r" breaks as read is flagged and read with each a "\\n". A forked
    child (which has none of its parent's threads) packs on threads of its own."""
    from trainmon.store import codec

    texts: list[codec.Text] = [b"step %d loss=0.5\n" % i * 8000 for i in range(3)] + [b"short", "caf\u00e9 " * 30000]
    texts += [codec.CrBreaks(b"10%|#\r20%|##\rstep 1\n" * 5000), codec.CrBreaks(memoryview(b"1%\r2%"))]  # "\r" kept

    def check(packed: list[tuple[bytes, int]]) -> None:
        assert [codec.unpack_text(stored, packing) for stored, packing in packed] == \
            [text.decode() if isinstance(text, bytes) else text for text in texts[:5]] + \
            ["10%|#\n20%|##\nstep 1\n" * 5000, "1%\n2%"]
        assert packed[3] == (b"short", codec.TEXT_AS_IS)
        assert all(packing == codec.TEXT_ZSTD for _, packing in packed[:3])
        assert [packing for _, packing in packed[5:]] == [codec.TEXT_ZSTD | codec.TEXT_CR_BREAKS,
                                                          codec.TEXT_AS_IS | codec.TEXT_CR_BREAKS]

    begun = codec.PackedTexts(texts)
    check(codec.PackedTexts(texts).result())
    check(begun.result())
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        signal.alarm(60)  # (a child waiting on its parent's threads would never end: SIGALRM ends it)
        try:
            again = [codec.unpack_text(stored, packing) for stored, packing in codec.PackedTexts(texts[:3]).result()]
            os.write(write, b"ok" if again == [text.decode() for text in texts[:3]] else b"no")  # type: ignore[union-attr]
        finally:
            os._exit(0)
    os.close(write)
    ready, _, _ = select.select([read], [], [], 90)
    assert ready and os.read(read, 2) == b"ok"
    os.waitpid(child, 0)
    os.close(read)


def test_the_writer_packs_a_batch_while_the_store_holds_the_one_before(store, home: Path) -> None:
    """A batch is packed from when it is handed to the writer: while another process holds the
    store's write lock, so the first batch waits to be stored, the second's large texts are
    compressed already. Both are stored, in order, once the lock goes."""
    from trainmon.runtime.capture.writer import BatchWriter
    from trainmon.store import Batch

    from .conftest import sqlite_locked
    from .test_store import new_job

    job = new_job(store)
    stream = store.add_stream(job.id, "algo-1", "job/algo-1-1", 0)
    texts = ["\n".join(f"batch {batch} step {step} loss=0.{step}" for step in range(20_000)) for batch in (0, 1)]
    batches = [Batch(job.id, chunks=[(stream.id, 20_000 * batch, 20_000, 1000 + batch, texts[batch])],
                     stream_stats={stream.id: (20_000, len(texts[batch]), 1000 + batch)}) for batch in (0, 1)]
    errors: list[str] = []
    writer = BatchWriter(store, errors.append)
    with sqlite_locked(home):
        writer.start()
        writer.put(batches[0])
        writer.put(batches[1])
        packing = batches[1].packing
        assert packing is not None
        wait_for(packing.done, "the second batch packed")
        assert writer.behind() is False and store.stream("job/algo-1-1").records == 0  # type: ignore[union-attr]
    writer.finish()
    assert not errors and writer.failure is None
    assert [(event.seq, event.timestamp_ms, event.message) for event in store.events(stream.id, limit=40_000)] == \
        [(20_000 * batch + step, 1000 + batch, line) for batch in (0, 1) for step, line in enumerate(texts[batch].split("\n"))]


def test_a_job_printing_a_line_at_a_time_is_ingested_a_batch_a_step(tmp_path: Path) -> None:
    """Reads that trickle in (a line every few milliseconds) are taken a few at a step, steps
    STEP_GAP_S apart at least, not one step a read, and a batch a step goes to the writer (not one
    a step later); every line is stored, with its read's time."""
    from trainmon.parsing.extract import Extractor
    from trainmon.runtime.capture.ingestor import STEP_GAP_S, HostStream, Ingestor, Pipe
    from trainmon.store import SqliteStore

    store = SqliteStore(tmp_path / "trainmon.db")
    try:
        job = store.create_job("trickle", {"TrainingJobStatus": "InProgress"}, 1000.0)
        stream = store.add_stream(job.id, "algo-1", "trickle/algo-1-1", 0)
        wake = threading.Event()
        output = _output(tmp_path / "algo-1-stdout", wake)
        definitions = validate_definitions([{"Name": "loss", "Regex": r"loss=(\S+)"}])
        ingestor = Ingestor(store, job.id, [HostStream("algo-1", stream.id, [Pipe(output, RecordCutter(Mode.TERMINAL),
                                                                                  False)])],
                            Extractor(definitions, Mode.TERMINAL), wake, on_error=lambda message: None)
        steps: list[float] = []
        step = ingestor._step

        def counted(*, final: bool) -> None:
            steps.append(time.monotonic())
            step(final=final)

        ingestor._step = counted  # type: ignore[method-assign]
        batches: list[float] = []
        put = ingestor.writer.put

        def noted(batch: object, horizon_ms: int | None = None) -> None:
            batches.append(time.monotonic())
            put(batch, horizon_ms)  # type: ignore[arg-type]

        ingestor.writer.put = noted  # type: ignore[method-assign]
        ingestor.start()
        began = time.monotonic()
        for line in range(40):  # the job's pace, not a wait for a result
            output.unspooled(b"loss=%d\n" % line, 1000 + line, 0)
            time.sleep(0.005)
        elapsed = time.monotonic() - began
        output.ended()
        ingestor.finish()
        ingestor.close()
        assert [e.message for e in store.events(stream.id, limit=100)] == [f"loss={line}" for line in range(40)]
        assert [e.timestamp_ms for e in store.events(stream.id, limit=100)] == [1000 + line for line in range(40)]
        assert [p.value for p in store.points(job.id)] == [float(line) for line in range(40)]
        during = [at for at in steps if at < began + elapsed]
        assert len(during) <= elapsed / STEP_GAP_S + 2, (len(during), elapsed)
        assert all(later - earlier >= STEP_GAP_S * 0.9 for earlier, later in zip(during, during[1:], strict=False))
        assert len([at for at in batches if at < began + elapsed]) <= len(during)
    finally:
        store.close()


def test_a_steps_reads_go_to_the_writer_as_one_batch_at_its_end(tmp_path: Path) -> None:
    """Steps are STEP_GAP_S apart at least, so each step's reads are a batch handed to the writer as
    the step ends: a read is never left pending for a later step."""
    from trainmon.parsing.extract import Extractor
    from trainmon.runtime.capture import ingestor as ingestion
    from trainmon.runtime.capture.spool import now_ms
    from trainmon.store import SqliteStore

    store = SqliteStore(tmp_path / "trainmon.db")
    try:
        job = store.create_job("waits", {"TrainingJobStatus": "InProgress"}, 1000.0)
        stream = store.add_stream(job.id, "algo-1", "waits/algo-1-1", 0)
        output = _output(tmp_path / "algo-1-stdout")
        pipe = ingestion.Pipe(output, RecordCutter(Mode.TERMINAL), False)
        ingestor = ingestion.Ingestor(store, job.id, [ingestion.HostStream("algo-1", stream.id, [pipe])],
                                      Extractor(validate_definitions([]), Mode.TERMINAL), threading.Event(),
                                      on_error=lambda message: None)
        put: list[object] = []
        ingestor.writer.put = lambda batch, horizon_ms=None: put.append(batch)  # type: ignore[method-assign]
        output.unspooled(b"read just now\n", now_ms(), 0)
        ingestor._step(final=False)  # (in this thread: the ingestor is not started)
        assert not ingestor._pending and len(put) == 1
        assert [chunk[-1] for chunk in put[0].chunks] == [b"read just now"]  # type: ignore[attr-defined]
    finally:
        store.close()
