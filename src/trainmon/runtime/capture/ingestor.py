"""The :class:`Ingestor`: one thread per job that takes the pipes' chunks in the order they were read,
cuts them into records, extracts points with the job's metric definitions (consecutive reads of a
pipe matched together, up to ``SCAN_BYTES``), echoes to the terminal and hands batches to the
writer, as fast as the store takes them. Small reads are read back from the spool together; each
batch records how far each spool was consumed, so recovery starts where it stopped. It keeps the
tail of stderr for the failure reason.
"""

from __future__ import annotations

import mmap
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol

import numpy as np

from ...errors import StoreError
from ...parsing.extract import Extractor, Hits
from ...parsing.framing import decode
from ...store import Batch, PointBlock, Store
from ..retry import Patience
from .loss import Loss, count_block
from .pipes import Chunk, MemoryBudget
from .records import Echo, Piece, RecordCutter, ends_record, joined_text, piece_bytes, stored_text
from .spool import FRAME, RELEASE_BYTES, now_ms, pipe_name, release_spool
from .writer import FLUSH_BYTES, FLUSH_POINTS, LEAVE_WAIT_S, BatchWriter, batch_loss, yield_to_the_job

STDERR_TAIL_RECORDS = 20


STDERR_TAIL_BYTES = 64 << 10  # of a block, what the stderr tail is taken from


NOTE_SLACK_MS = 1000  # a read is noted to the ingestor within this (milliseconds, mostly): see Ingestor._step


SCAN_BYTES = 8 << 20  # consecutive reads of a pipe are matched together, up to this much


JOIN_BYTES = 256 << 10  # blocks of records are matched together up to this much; a larger one on its own


SPAN_SLACK_BYTES = 64 << 10  # a run's spooled reads are read back at once unless they lie further apart


MAP_BYTES = 1 << 20  # a run's spooled reads this large are mapped from the spool, not read (a copy less)


STEP_GAP_S = 0.05  # steps this far apart at least, each a batch: a job printing a line at a time costs a
# transaction every 50 ms, not one a line, and its points are still stored within a fraction of a second


def _split_hits(hits: Hits, counts: list[int]) -> list[tuple[Hits, int]]:
    """The points of blocks matched together, block by block (``counts``: each block's records),
    their records counted from each block's first."""
    if len(counts) == 1:
        return [(hits, counts[0])]
    firsts = np.cumsum([0, *counts])
    cuts = np.searchsorted(hits.records, firsts)
    return [(Hits(*(column[cuts[k]:cuts[k + 1]] for column in hits))._replace(
        records=hits.records[cuts[k]:cuts[k + 1]] - firsts[k]), counts[k]) for k in range(len(counts))]


def _joined(parts: list[bytes]) -> bytes:
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _whole(piece: Piece) -> bytes:
    buffer, start, end = piece
    return buffer if start == 0 and end == len(buffer) and isinstance(buffer, bytes) else buffer[start:end]


class ChunkSource(Protocol):
    """Where the ingestor takes a pipe's chunks from: a :class:`PipeReader`, or a spool left behind."""

    spool_path: Path
    chunks: deque[Chunk]
    eof: threading.Event


@dataclass
class Pipe:
    reader: ChunkSource
    cutter: RecordCutter
    is_stderr: bool
    spool: BinaryIO | None = None
    bytes_read: int = 0
    bytes_stored: int = 0
    spooled_to: int = 0  # the spool offset past the last spooled chunk taken
    frames: deque[int] = field(default_factory=deque)  # where the spooled chunks taken begin their frames
    released: int = 0  # the spool's blocks before this offset are freed (their records are stored)

    @property
    def name(self) -> str:
        return pipe_name(self.is_stderr)

    def release_through(self, stored: int) -> None:
        """The spool's records are stored up to offset ``stored``: free its blocks before the frame
        that holds it, once that frees RELEASE_BYTES."""
        frames = self.frames
        while len(frames) > 1 and frames[1] <= stored:
            frames.popleft()
        if frames and frames[0] - self.released >= RELEASE_BYTES:
            self.released = frames[0]
            release_spool(self.reader.spool_path, frames[0])

    def consumed(self) -> tuple[int, bool]:
        """How far the spool is consumed into whole records: where recovery starts, and whether it
        starts just after a "\\r"."""
        return max(0, self.spooled_to - self.cutter.pending_bytes), self.cutter.after_cr


@dataclass
class HostStream:
    host: str
    stream_id: int
    pipes: list[Pipe]
    next_seq: int = 0
    stderr_tail: deque[str] = field(default_factory=lambda: deque(maxlen=STDERR_TAIL_RECORDS))


class Ingestor(threading.Thread):
    """Turns the readers' chunks into stored records and points, in batches (written by a
    :class:`BatchWriter`, up to ``AHEAD_BATCHES`` behind); outlasts any store outage."""

    def __init__(
        self,
        store: Store,
        job_id: int,
        streams: list[HostStream],
        extractor: Extractor,
        wake: threading.Event,
        echo: Echo | None = None,
        on_error: Callable[[str], None] | None = None,
        *,
        budget: MemoryBudget | None = None,
        release_spools: bool = True,
    ) -> None:
        super().__init__(name="trainmon-ingest", daemon=True)
        self.store = store
        self.job_id = job_id
        self.streams = streams
        self.extractor = extractor
        self.wake = wake
        self.echo = echo
        self.budget = budget  # the readers' in-memory chunks are taken from it (none in a spool left behind)
        self.release_spools = release_spools  # free the spools' blocks as their records are stored
        self.on_error = on_error or (lambda message: print(f"trainmon: {message}", file=sys.stderr))
        self._finishing = threading.Event()
        self._stepped_at = 0.0  # (time.monotonic) when the last step began
        self._pending = Batch(job_id)
        self.writer = BatchWriter(store, self.on_error)
        self.failure: BaseException | None = None
        self.loss = Loss()  # what was given up (a disk that stayed full after the job)
        self.left = False  # what was not stored was left in the spool: the store was waited for long enough
        self._names = [d.name for d in extractor.definitions]

    @property
    def store_error(self) -> StoreError | None:
        """Why the store refuses writes, while it does."""
        return self.writer.store_error

    def finish(self, patience: Patience | None = None) -> None:
        """Drain what is left (once every reader ended) and wait for it: as long as ``patience``
        lasts (as long as the store takes to come back, without it), but a disk that stays full
        after the job is given up on (and counted). Once patience is lost, what is not stored is
        left in the spool (:attr:`left`)."""
        self._finishing.set()
        self.wake.set()
        while self.is_alive():
            self.join(0.25)
            if patience is not None and self.is_alive() and patience.lost(self.store_error):
                self.left = True
                self.writer.leave()
                self.wake.set()
                self.join(LEAVE_WAIT_S)  # (a write in progress on a store gone: its connection's timeout)
                return

    @property
    def stored_through_ms(self) -> int:
        """Every read of the job's output made before this time (epoch ms) is stored: what rules that
        join the output with other data (the profile) may judge up to."""
        return self.writer.stored_through_ms

    def waiting_bytes(self) -> int:
        """The output in the spools that is not stored yet, whether taken into a batch or not (about:
        read from another thread)."""
        waiting = 0
        for pipe, stored in self._stored_through():
            try:
                waiting += max(0, os.stat(pipe.reader.spool_path).st_size - stored)
            except OSError:  # no spool (yet, or the disk refused it: the output is in memory)
                pass
        return waiting

    def finish_in_this_thread(self) -> None:
        """:meth:`finish`, without a thread of its own: every source has ended already."""
        self._finishing.set()
        self.wake.set()
        self.run()

    def run(self) -> None:
        yield_to_the_job()
        self.writer.start()
        try:
            self._loop()
        except BaseException as exc:  # reported by the supervisor; the readers keep draining
            self.failure = exc
            self.on_error(f"log ingestion stopped: {exc}")
        finally:
            self.writer.finish()
            self.loss.add(self.writer.loss)

    def _loop(self) -> None:
        pipes = [pipe for stream in self.streams for pipe in stream.pipes]
        while True:
            if not any(pipe.reader.chunks for pipe in pipes):
                self.wake.wait(0.25)
            gap = self._stepped_at + STEP_GAP_S - time.monotonic()
            if gap > 0:  # a trickle of reads (a flood's step takes longer than this): a few a step, a batch a step
                self._finishing.wait(gap)
            self.wake.clear()
            if self.left:
                return
            if self._finishing.is_set():
                self.writer.finishing()
            if self.writer.gave_up:
                self._give_up()
                return
            if self.writer.behind():  # (a flood, a slow or failing store): the backlog waits in the spool
                self.writer.wait_until_caught_up(0.25)
                continue
            if self.writer.failure is not None:
                raise self.writer.failure
            if self.release_spools:
                self._release()
            self._stepped_at = time.monotonic()
            done = self._finishing.is_set() and all(pipe.reader.eof.is_set() for pipe in pipes)
            self._step(final=done)
            if done and not any(pipe.reader.chunks for pipe in pipes):  # (a step the writer held up left some)
                self.writer.finish()
                if self.writer.failure is not None:
                    raise self.writer.failure
                if self.writer.gave_up:
                    self._give_up()
                return

    def _release(self) -> None:
        """Free the spools' blocks whose records are stored, so a spool holds the backlog only."""
        for pipe, stored in self._stored_through():
            if stored:
                pipe.release_through(stored)

    def _stored_through(self) -> Iterator[tuple[Pipe, int]]:
        """Each pipe, and the spool offset its stored records reach (0: none stored yet)."""
        stored = self.writer.stored_spools  # (replaced whole as batches are stored: one state read)
        for stream in self.streams:
            for pipe in stream.pipes:
                yield pipe, stored.get((stream.stream_id, pipe.name), (0, False))[0]

    def _give_up(self) -> None:
        """The job has ended and the store stays full: count what is left as lost, and stop."""
        reason = self.writer.loss.reason or "the store refused the writes"
        self.loss.add(batch_loss(self._pending, reason))
        self._pending = Batch(self.job_id)
        for _, pipe, chunks in self._runs():
            for chunk in chunks:
                if chunk.cut:
                    block = pipe.cutter.dropped(after_cr=chunk.after_cr)
                else:
                    block = pipe.cutter.feed(_whole(self._piece(pipe, chunk, None)))
                self.loss.add(count_block(self.extractor, block))
                self.loss.bytes += chunk.length
        for stream in self.streams:
            for pipe in stream.pipes:
                self.loss.add(count_block(self.extractor, pipe.cutter.finish()))
        self.on_error(f"{reason}. Gave up storing the rest of the job's output; how much is recorded on the job.")

    def _runs(self) -> Iterator[tuple[HostStream, Pipe, list[Chunk]]]:
        """The chunks noted so far, in read-time order (on a tie, a pipe's before the next pipe's), as
        runs: consecutive reads of one pipe up to SCAN_BYTES, ended by another pipe's earlier read or
        by a drop (a run of its own). Each is taken from its reader's queue as it is yielded, so what
        a caller leaves (the writer is behind) waits there, in order."""
        pipes = [(stream, pipe) for stream in self.streams for pipe in stream.pipes]
        left = [len(pipe.reader.chunks) for _, pipe in pipes]  # what was noted when the step began
        while True:
            heads = [(pipe.reader.chunks[0].timestamp_ms, number) for number, (_, pipe) in enumerate(pipes)
                     if left[number]]
            if not heads:
                return
            first = min(heads)
            number = first[1]
            rival = min((head for head in heads if head[1] != number), default=None)
            stream, pipe = pipes[number]
            queue = pipe.reader.chunks
            run = [queue.popleft()]
            left[number] -= 1
            size = run[0].length
            while not run[0].cut and left[number] and size < SCAN_BYTES:
                chunk = queue[0]
                if chunk.cut or (rival is not None and (chunk.timestamp_ms, number) > rival):
                    break
                run.append(queue.popleft())
                left[number] -= 1
                size += chunk.length
            yield stream, pipe, run

    def _piece(self, pipe: Pipe, chunk: Chunk, spooled: tuple[int, bytes | mmap.mmap] | None) -> Piece:
        """A chunk's bytes: in memory, in the run's bytes mapped from the spool (``spooled``: where
        they start, and them), or read on their own."""
        if chunk.data is not None:
            if self.budget is not None:
                self.budget.give_back(chunk.length)
            return chunk.data, 0, len(chunk.data)
        pipe.spooled_to = chunk.start + chunk.length
        pipe.frames.append(chunk.start - FRAME.size)
        if spooled is not None:
            at = chunk.start - spooled[0]
            return spooled[1], at, at + chunk.length
        data = self._read_span(pipe, chunk.start, chunk.length)
        return data, 0, len(data)

    def _step(self, *, final: bool) -> None:
        horizon = now_ms() - NOTE_SLACK_MS  # every read made before this was noted by now: this step takes it
        took = False
        for stream, pipe, chunks in self._runs():
            took = True
            if not self._ingest_run(stream, pipe, chunks):
                return  # the writer is behind: the rest waits in the readers' queues
        if final:
            stamp = now_ms()
            for stream in self.streams:
                for pipe in stream.pipes:
                    block = pipe.cutter.finish()
                    if block:
                        self._ingest(stream, pipe, [(block, stamp, [])])
        if took or final:
            self._pending.diagnostics = [s.to_json() for s in self.extractor.stats]
            self._note_progress()
        if self._pending:  # a batch a step (a job printing a line at a time: a transaction every STEP_GAP_S)
            self._flush(horizon)
        else:
            self.writer.stored_through(horizon)

    def _ingest_run(self, stream: HostStream, pipe: Pipe, chunks: list[Chunk]) -> bool:
        """Consecutive reads of one pipe, cut into records and matched together. The reads of a
        millisecond are one block, cut at once from the bytes read back for the run: a job printing a
        line at a time costs a block per millisecond, not one per line, and a flood's bytes are copied
        once, into the block."""
        if chunks[0].cut:  # output was dropped here, so the record in progress ends (alone in its run)
            block = pipe.cutter.dropped(after_cr=chunks[0].after_cr)
            return self._ingest(stream, pipe, [(block, chunks[0].timestamp_ms, [])])
        spooled = self._spooled(pipe, chunks)
        reads: list[tuple[int, list[Piece]]] = []  # (time, the pieces read then)
        for chunk in chunks:
            piece = self._piece(pipe, chunk, spooled)
            pipe.bytes_read += piece[2] - piece[1]
            if reads and reads[-1][0] == chunk.timestamp_ms:
                reads[-1][1].append(piece)
            else:
                reads.append((chunk.timestamp_ms, [piece]))
        blocks: list[tuple[bytes, int, list[Piece]]] = []  # (whole records, time, the reads that brought them)
        for stamp, pieces in reads:
            if pipe.cutter.might_cut(piece_bytes(pieces)):
                blocks.extend(self._cut_read_by_read(pipe, stamp, pieces))
            else:
                blocks.append((pipe.cutter.feed_pieces(pieces), stamp, pieces))
        return self._ingest(stream, pipe, blocks)

    def _cut_read_by_read(self, pipe: Pipe, stamp: int, pieces: list[Piece]) -> list[tuple[bytes, int, list[Piece]]]:
        """A millisecond's reads cut one by one, where a record may reach MAX_RECORD_BYTES: a record cut
        there ends its block, and the next starts one of its own."""
        blocks: list[tuple[bytes, int, list[Piece]]] = []
        for piece in pieces:
            block = pipe.cutter.feed(_whole(piece))
            last = blocks[-1][0] if blocks else None
            if last is not None and (not last or ends_record(last[-1:], self.extractor.mode)):
                blocks[-1] = (last + block, stamp, [*blocks[-1][2], piece])
            else:
                blocks.append((block, stamp, [piece]))
        return blocks

    def _note_progress(self) -> None:
        for stream in self.streams:
            for pipe in stream.pipes:
                self._pending.spools[(stream.stream_id, pipe.name)] = pipe.consumed()

    def _spooled(self, pipe: Pipe, chunks: list[Chunk]) -> tuple[int, bytes | mmap.mmap] | None:
        """The spool's bytes under a run's spooled reads, taken at once (a read per line costs a job
        that prints a line at a time more than matching them does, and a flood's reads are then
        pieces of one buffer), and the offset they start at; None when the run holds one spooled read,
        or reads far apart (each is read on its own)."""
        spooled = [chunk for chunk in chunks if chunk.data is None]
        if len(spooled) < 2:
            return None
        start = spooled[0].start
        span = spooled[-1].start + spooled[-1].length - start
        if span > 2 * sum(chunk.length for chunk in spooled) + SPAN_SLACK_BYTES:
            return None
        if span >= MAP_BYTES:
            try:  # the file's cached pages, mapped: the cutter then copies each block once, from them
                at = start - start % mmap.ALLOCATIONGRANULARITY
                return at, mmap.mmap(self._spool(pipe).fileno(), start + span - at, prot=mmap.PROT_READ, offset=at)
            except (OSError, ValueError):  # (a file system that cannot map it: read, as a small run is)
                pass
        return start, self._read_span(pipe, start, span)

    def _spool(self, pipe: Pipe) -> BinaryIO:
        if pipe.spool is None:
            pipe.spool = open(pipe.reader.spool_path, "rb")  # noqa: SIM115 - closed in close()
        return pipe.spool

    def _read_span(self, pipe: Pipe, start: int, length: int) -> bytes:
        spool = self._spool(pipe)
        spool.seek(start)
        return spool.read(length)

    def _ingest(self, stream: HostStream, pipe: Pipe, blocks: list[tuple[bytes, int, list[Piece]]]) -> bool:
        """Add blocks of records (each with the time of the read that completed it, and the bytes that
        read brought, for the echo) to the pending batch; False when the writer is behind. Small blocks
        that follow one another are matched at once: many small reads cost what one large does."""
        batch = self._pending
        for (block, stamp, raw), (hits, count, crlf) in zip(blocks, self._matched([block for block, _, _ in blocks]),
                                                            strict=True):
            self._add(stream, pipe, block, stamp, raw, hits, count, crlf)
        if batch.text_bytes >= FLUSH_BYTES or batch.point_count >= FLUSH_POINTS:
            self._note_progress()
            return self._flush()
        return True

    def _matched(self, blocks: list[bytes]) -> list[tuple[Hits, int, bool | None]]:
        """Each block's points and records, small blocks matched together up to JOIN_BYTES (those
        between which a record may not run on: each ends with a break, but a record cut at
        MAX_RECORD_BYTES); a larger block is matched on its own, not copied again."""
        extractor = self.extractor
        found: list[tuple[Hits, int, bool | None]] = []
        start = 0
        while start < len(blocks):
            end, size = start + 1, len(blocks[start])
            while (end < len(blocks) and size + len(blocks[end]) <= JOIN_BYTES
                   and (not blocks[end - 1] or ends_record(blocks[end - 1][-1:], extractor.mode))):
                size += len(blocks[end])
                end += 1
            group = blocks[start:end]
            joined = _joined(group)
            hits = extractor.scan_columns(joined)
            crlf = extractor.holds_crlf(joined)  # (no break of a group's spans two of its blocks)
            counts = extractor.record_counts(joined, group)
            found.extend((split, count, crlf) for split, count in _split_hits(hits, counts))
            start = end
        return found

    def _add(self, stream: HostStream, pipe: Pipe, block: bytes, stamp: int, raw: list[Piece], hits: Hits,
             count: int, crlf: bool | None) -> None:
        """One block of records (``count`` of them, holding ``hits``) into the pending batch."""
        if not block:
            if self.echo and raw and not self.echo.prefix_hosts:
                self.echo.passthrough(pipe.is_stderr, raw)
            return
        text = stored_text(block, self.extractor.mode, crlf)
        first = stream.next_seq
        batch = self._pending
        batch.chunks.append((stream.stream_id, first, count, stamp, text))
        batch.text_bytes += len(block)
        host = stream.host
        if len(hits.records):
            seqs = hits.records + first
            batch.add_points(PointBlock(self._names, stamp, host, stream.stream_id, seqs, hits.definitions, hits.values))
            if self.echo and self.echo.live_metrics:
                for seq, definition, value in zip(seqs.tolist(), hits.definitions.tolist(), hits.values.tolist(),
                                                  strict=True):
                    self.echo.point(self._names[definition], value, host, seq)
        if self.echo:
            if self.echo.prefix_hosts:
                self.echo.records(host, pipe.is_stderr, decode(joined_text(text)).split("\n"))
            elif raw:
                self.echo.passthrough(pipe.is_stderr, raw)
            else:
                self.echo.flush_points()
        stream.next_seq += count
        previous = batch.stream_stats.get(stream.stream_id, (0, 0, stamp))
        batch.stream_stats[stream.stream_id] = (previous[0] + count, previous[1] + self._unstored_bytes(pipe),
                                                stamp)
        if pipe.is_stderr:
            tail = joined_text(text, STDERR_TAIL_BYTES).rsplit(b"\n", STDERR_TAIL_RECORDS)[-STDERR_TAIL_RECORDS:]
            stream.stderr_tail.extend(decode(line) for line in tail)

    @staticmethod
    def _unstored_bytes(pipe: Pipe) -> int:
        """Bytes read from the pipe since the last stored block (what was read, "\r\n" split or not)."""
        counted = pipe.bytes_read - pipe.bytes_stored
        pipe.bytes_stored = pipe.bytes_read
        return counted

    def _flush(self, horizon_ms: int | None = None) -> bool:
        """Hand the pending batch to the writer (``horizon_ms``: it holds every read made before then
        that is not stored); False when the writer is behind (the caller takes no more work)."""
        if self._pending:
            self.writer.put(self._pending, horizon_ms)
            self._pending = Batch(self.job_id)
        return not self.writer.behind()

    def close(self) -> None:
        """Close the spool files; the supervisor removes them once the job's end is stored."""
        for stream in self.streams:
            for pipe in stream.pipes:
                if pipe.spool is not None:
                    pipe.spool.close()
                    pipe.spool = None
