"""Output a supervisor left in its spool (it died, or left a store that was gone), stored by
whoever reaps the job.

Each pipe's spool file holds every chunk the job wrote, framed with its read time, and each
stored batch recorded how far each spool was consumed (``spool_progress``). What lies past that
is cut into records, matched and stored here, with the read times and record numbers the
supervisor would have given them, by the same ingestor, as if the job's pipes had just been read.
"""

from __future__ import annotations

import threading
from collections import deque
from pathlib import Path

from ... import config
from ...parsing.definitions import validate_definitions
from ...parsing.extract import Extractor
from ...parsing.framing import Mode
from ...store import JobRow, Store
from .ingestor import HostStream, Ingestor, Pipe
from .loss import Loss
from .pipes import Chunk
from .records import RecordCutter
from .spool import FRAME, pipe_name, spool_files, spool_frames, spool_path


class SpoolSource:
    """A spool file's chunks past a point, in the form the ingestor reads a pipe's."""

    def __init__(self, path: Path, from_offset: int) -> None:
        self.spool_path = path
        self.chunks: deque[Chunk] = deque(
            Chunk(offset, length, stamp, None) for offset, stamp, length in spool_frames(path, from_offset))
        self.eof = threading.Event()
        self.eof.set()


ENDING = "ending.json"  # in the spool directory: the statuses a supervisor that left could not write


def spool_dir(store: Store, job: str) -> Path:
    """Where the job's pipes are spooled (:func:`~trainmon.runtime.capture.spool.spool_path`), and its
    ending kept when the supervisor left before the store took it (:data:`ENDING`)."""
    return config.job_dir(store.home, job) / ".spool"


def last_activity_ms(store: Store, job: JobRow) -> int | None:
    """When the job's output last arrived: the newest spool write or stored record."""
    times = [int(path.stat().st_mtime * 1000) for path in spool_files(spool_dir(store, job.name))]
    times += [s.last_event_ms for s in store.streams(job.id) if s.last_event_ms is not None]
    return max(times, default=None)


def recover(store: Store, job: JobRow) -> Loss:
    """Store what the job's spools hold past what was stored; what could not be stored, counted."""
    directory = spool_dir(store, job.name)
    if not directory.is_dir():
        return Loss()
    mode = Mode(job.doc["TrainmonConfig"]["RecordMode"])
    extractor = Extractor(validate_definitions(job.doc["AlgorithmSpecification"]["MetricDefinitions"]), mode)
    if len(job.diagnostics) == len(extractor.definitions):
        extractor.merge_stats(job.diagnostics)  # counts go on from what was stored
    streams = []
    for stream in store.streams(job.id):
        progress = store.spool_progress(stream.id)
        pipes = []
        for is_stderr in (False, True):
            path = spool_path(directory, stream.host, is_stderr)
            if not path.is_file():
                continue
            consumed, after_cr = progress.get(pipe_name(is_stderr), (FRAME.size, False))
            pipe = Pipe(SpoolSource(path, consumed), RecordCutter(mode, after_cr=after_cr), is_stderr)
            pipe.spooled_to = consumed
            pipes.append(pipe)
        streams.append(HostStream(stream.host, stream.id, pipes, next_seq=stream.records))
    # Quiet: the command that reaps the job is reading jobs; what could not be stored is counted.
    # (The spool goes once this is done: nothing to free as it goes, and a first chunk may start mid-frame.)
    ingestor = Ingestor(store, job.id, streams, extractor, threading.Event(), on_error=lambda message: None,
                        release_spools=False)
    ingestor.finish_in_this_thread()
    ingestor.close()
    return ingestor.loss
