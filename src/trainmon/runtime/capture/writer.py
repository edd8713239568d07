"""The ingestor's writes: :class:`BatchWriter` stores batches of records and points, one transaction
each, a batch for each of the ingestor's steps (at least ``ingestor.STEP_GAP_S`` apart) and more
for large ones (``FLUSH_BYTES``, ``FLUSH_POINTS``); a batch the store refuses is written again with backoff, and one it could not
take when the supervisor stops waiting is counted as lost (:func:`batch_loss`). The threads that
store and judge the output run ``NICER`` than the job.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable

from ...errors import StoreError, StoreFull
from ...store import Batch, Store
from ..retry import FULL_DISK_TRIES, Backoff
from .loss import Loss

FLUSH_BYTES = 8 << 20


FLUSH_POINTS = 50_000


AHEAD_BATCHES = 3  # the ingestor waits while more batches than this are not stored (at most 8 MiB of text each)


LEAVE_WAIT_S = 15.0  # for a write in progress when the supervisor stops waiting for the store


class BatchWriter(threading.Thread):
    """Writes the ingestor's batches to the store in order, on a thread of its own, so that storing one
    batch (the database lets go of Python's lock) overlaps packing the next (zstd, on the packing
    threads, begun as it is put) and cutting and matching the one after. A batch the store refuses (a
    server down, a lock, a full disk) is written again with backoff until it is stored; once the job has
    ended, a disk that stays full is given up on after FULL_DISK_TRIES, and what it refused is counted
    as lost."""

    def __init__(self, store: Store, on_error: Callable[[str], None]) -> None:
        super().__init__(name="trainmon-store-writer", daemon=True)
        self.store = store
        self.on_error = on_error
        self.store_error: StoreError | None = None  # set while the store refuses writes
        self.loss = Loss()  # the batches given up
        self.gave_up = False
        self.failure: BaseException | None = None  # what ended the thread, if anything but finish() did
        self._queue: deque[tuple[Batch, int | None]] = deque()  # each batch, and the reads' horizon it completes
        self.stored_through_ms = 0  # every read made before this time (epoch ms) is stored
        self.stored_spools: dict[tuple[int, str], tuple[int, bool]] = {}  # how far each spool's records are stored
        self._changed = threading.Condition()
        self._finishing = False
        self._stopping = False
        self._leaving = False
        self._backoff = Backoff()

    def put(self, batch: Batch, horizon_ms: int | None = None) -> None:
        """A batch to store; ``horizon_ms``: once it is stored, every read made before that time is.
        Its texts are packed from now on, while the batches before it are stored."""
        batch.pack()  # (begun outside the lock: the writer takes the next batch meanwhile)
        with self._changed:
            if self.gave_up:
                self.loss.add(batch_loss(batch, self._reason()))
                return
            self._queue.append((batch, horizon_ms))
            self._changed.notify_all()

    def stored_through(self, horizon_ms: int) -> None:
        """Every read made before ``horizon_ms`` is stored once the batches queued are: at once when none is."""
        with self._changed:
            if self._queue:
                batch, known = self._queue[-1]
                self._queue[-1] = batch, horizon_ms if known is None else max(known, horizon_ms)
            else:
                self.stored_through_ms = max(self.stored_through_ms, horizon_ms)

    def behind(self) -> bool:
        """More than AHEAD_BATCHES are not stored yet (the one being written among them): the
        ingestor takes no more until the writer catches up."""
        with self._changed:
            return len(self._queue) > AHEAD_BATCHES

    def wait_until_caught_up(self, timeout_s: float) -> None:
        with self._changed:
            self._changed.wait_for(lambda: len(self._queue) <= AHEAD_BATCHES or self.gave_up
                                   or self.failure is not None, timeout_s)

    def finishing(self) -> None:
        """The job has ended: a disk that stays full is given up on from now on."""
        with self._changed:
            self._finishing = True
            self._changed.notify_all()

    def finish(self) -> None:
        """Every batch put is stored (or given up); the thread ends."""
        with self._changed:
            self._finishing = self._stopping = True
            self._changed.notify_all()
        if self.is_alive():
            self.join()

    def leave(self) -> None:
        """Store nothing more: the batches not stored stay in the spool (which recorded how far each
        stored batch took it), for whoever reaps the job; the thread ends after its write in progress."""
        with self._changed:
            self._leaving = self._stopping = True
            self._changed.notify_all()

    def run(self) -> None:
        yield_to_the_job()
        try:
            self._write()
        except BaseException as exc:  # the ingestor raises it (and the supervisor reports it)
            self.failure = exc
            with self._changed:
                self._changed.notify_all()

    def _write(self) -> None:
        full_tries = 0
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._queue or self._stopping)
                if not self._queue or self._leaving:
                    return
                batch = self._queue[0][0]
            try:
                self.store.write_batch(batch)
            except StoreError as exc:
                if self.store_error is None:
                    self.on_error(f"{exc.message}. Keeping the job's output in its spool and retrying.")
                self.store_error = exc
                if self._finishing and isinstance(exc, StoreFull):
                    full_tries += 1  # the job has ended and the disk stays full
                    if full_tries >= FULL_DISK_TRIES:
                        self._give_up()
                        continue
                with self._changed:
                    self._changed.wait(self._backoff.next_delay())
                continue
            if self.store_error is not None:
                self.on_error("the store accepts writes again; nothing was lost.")
            self.store_error = None
            self._backoff.reset()
            with self._changed:
                _, horizon_ms = self._queue.popleft()  # (the horizon may have moved meanwhile)
                self.stored_spools = {**self.stored_spools, **batch.spools}
                if horizon_ms is not None:
                    self.stored_through_ms = max(self.stored_through_ms, horizon_ms)
                self._changed.notify_all()

    def _give_up(self) -> None:
        with self._changed:
            self.gave_up = True
            for batch, _ in self._queue:
                self.loss.add(batch_loss(batch, self._reason()))
            self._queue.clear()
            self._changed.notify_all()

    def _reason(self) -> str:
        return self.store_error.message if self.store_error else "the store refused the writes"


def batch_loss(batch: Batch, reason: str) -> Loss:
    return Loss(sum(chunk[2] for chunk in batch.chunks), batch.point_count, batch.text_bytes, reason)


def yield_to_the_job() -> None:
    """The calling thread gives way to the job's processes when the machine is busy (a nicer
    scheduling priority, Linux's per-thread nice): what it does can wait in the spool, the job's
    writes should not."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), os.getpriority(os.PRIO_PROCESS, 0) + NICER)
    except (AttributeError, OSError):
        pass


NICER = 10  # how much less the threads that store the output (and judge it) are scheduled than the job
