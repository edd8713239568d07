"""PutMetricData's write-behind buffer: validated datapoints coalesced into few, large transactions.

Writing each PutMetricData call in a transaction of its own pays the store's costs per call: the
transaction, a series upsert and a chunk row per metric (100 metrics of 10 datapoints: 100 rows,
6 ms for 1,000 datapoints). Written 50,000 at a time, a datapoint costs a tenth of that. So a
call is validated completely (a refused call writes nothing and says why at once), then queued
here, and a daemon thread writes what the queue holds every ``every_s`` (0.2 s), or at once once
it holds ``flush_samples``: one transaction, one chunk per metric and unit.

- **One buffer per database and process.** Every store object of this process opened on the
  same database (the SQLite file, the PostgreSQL URL) with the same retention and settings queues
  into one buffer, written on a connection of its own; and every metric read of any of them
  (GetMetricStatistics, GetMetricData, ListMetrics, alarms, maintenance) first writes what is
  queued for that database. A process that puts then gets sees its data, whichever client it
  used; other processes see it within ``every_s`` and a write.
- **Bounded.** At most ``most_samples`` datapoints wait (queued, or in a write not yet
  committed). A call that finds no room waits ``full_wait_s`` for some, then is refused with
  CloudWatch's ``Throttling`` (boto3 tries again later), and writes nothing.
- **Outages.** A write the store refuses (a StoreError: the server down, the file locked, the
  disk full) keeps its datapoints and is tried again with backoff (:mod:`trainmon.backoff`),
  the same batch first: it is checked for before it is written again, in case the refusal came
  after the commit (a connection lost in COMMIT), so it is stored once.
- **Nothing lost in silence.** ``close()`` of a store object that queued datapoints writes them,
  and so does the interpreter's exit (atexit); both wait up to ``drain_s`` for a store that
  refuses writes. What cannot be stored (a write that fails for another reason than the store's
  refusal, or a store still refusing after ``drain_s``) is dropped and reported: logged at once,
  raised by the next put or metric read through the buffer, or printed at exit.

A crash of the process (``kill -9``, a power cut) loses what was queued: at most ``every_s`` and
a write's worth of datapoints. The system monitor and other internal writers call
``Store.put_samples``, which still writes synchronously.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ...backoff import Backoff
from ...clock import Clock, StopSignal
from ...errors import StoreError, Throttling

if TYPE_CHECKING:
    from ...cloudwatch.datapoints import Datapoints
    from .writes import PreparedSamples

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WriteBehind:
    """How the buffer writes: a store object's setting (``open_store(write_behind=...)``)."""

    every_s: float = 0.2  # a datapoint waits at most this long (and a write) to be written
    flush_samples: int = 50_000  # ... or is written at once when the buffer holds this many
    most_samples: int = 1_000_000  # the bound on datapoints waiting: about 100 MB
    full_wait_s: float = 10.0  # a call that finds no room waits this long for some, then is refused
    drain_s: float = 30.0  # close() and the exit wait this long for a store that refuses writes


class Writer(Protocol):
    """A store connection of the buffer's own (a twin of the store object that made the buffer)."""

    def put_prepared_samples(self, prepared: PreparedSamples, *, check_stored: bool) -> None:
        """Write ``prepared`` in one transaction; with ``check_stored``, not if it is stored already."""

    def close(self) -> None: ...


@dataclass
class _Batch:
    """Datapoints taken from the queue for one write, kept as they were prepared until stored."""

    samples: int
    prepared: PreparedSamples
    tried: bool = False  # a write of it failed: whether it was committed is checked before the next


class SampleBuffer:
    """The queue of one database, its writer thread, and the state of its writes."""

    def __init__(self, open_writer: Callable[[], Writer], settings: WriteBehind, clock: Clock) -> None:
        self._open_writer = open_writer
        self.settings = settings
        self._clock = clock
        self._reset()

    def _reset(self) -> None:
        """Empty, with no thread and no connection (also a forked child's start)."""
        self._state = threading.Condition()  # the queue, the counts, the thread; notified as room frees
        self._writing = threading.Lock()  # one write at a time, the thread's or a caller's; taken before _state
        self._queued: list[Datapoints] = []
        self._queued_samples = 0
        self._pending: _Batch | None = None  # taken from the queue, not yet stored
        self._thread: threading.Thread | None = None
        self._wake: StopSignal = self._clock.stop_signal()
        self._writer: Writer | None = None
        self.error: StoreError | None = None  # set while the store refuses writes
        self._lost_samples = 0  # dropped since the last report to a caller
        self._lost_reason = ""

    @property
    def held(self) -> int:
        """Datapoints accepted and not yet stored."""
        return self._queued_samples + (self._pending.samples if self._pending is not None else 0)

    # -- callers -------------------------------------------------------------------------------

    def add(self, datapoints: Datapoints) -> None:
        """Queue a validated call, waiting up to ``full_wait_s`` for room; Throttling when none came."""
        size = len(datapoints)
        with self._state:
            self._report_loss()
            most = self.settings.most_samples
            if not self._state.wait_for(lambda: not self.held or self.held + size <= most,
                                        timeout=self.settings.full_wait_s):
                detail = f" ({self.error.message})" if self.error is not None else ""
                raise Throttling(f"Rate exceeded: {self.held:,} datapoints are waiting to be stored, and at most "
                                 f"{most:,} may wait{detail}. Try again later.")
            self._queued.append(datapoints)
            self._queued_samples += size
            thread = None
            if self._thread is None:
                thread = self._thread = threading.Thread(target=self._run, args=(self._wake,),
                                                         name="trainmon-datapoints", daemon=True)
            elif self._queued_samples >= self.settings.flush_samples and self.error is None:
                self._wake.set()  # (while the store refuses, the thread keeps to its backoff)
        if thread is not None:
            self._clock.start(thread)

    def flush(self) -> None:
        """Store what is queued now (and what an earlier write left): raises while the store refuses
        it (it stays queued), and reports (raises) datapoints dropped since the last report."""
        self._write_held()
        if self._lost_samples:
            with self._state:
                self._report_loss()

    def flush_for_read(self) -> None:
        """Before a read: store what is queued, so that the process reads what it put. While the
        store refuses writes (logged once, and retried by the thread), the read goes on with what
        is stored: a store that refuses writes does not refuse reads too. Datapoints dropped since
        the last report are reported (raised)."""
        if self.error is None:
            try:
                self._write_held()
            except StoreError:
                pass  # logged by _write; the thread tries again
        if self._lost_samples:
            with self._state:
                self._report_loss()

    def drain(self) -> None:
        """:meth:`flush`, tried again while the store refuses writes, for up to ``drain_s``; then what
        is left is dropped and reported (raised)."""
        deadline_s = time.monotonic() + self.settings.drain_s
        backoff = Backoff()
        while True:
            try:
                self._write_held()
                break
            except StoreError as exc:
                if time.monotonic() >= deadline_s:
                    with self._writing, self._state:
                        self._lose(self.held, exc.message)
                        self._queued, self._queued_samples, self._pending = [], 0, None
                        self._state.notify_all()
                    break
            time.sleep(min(backoff.next_delay(), max(0.0, deadline_s - time.monotonic())))
        if self._lost_samples:
            with self._state:
                self._report_loss()

    def _write_held(self) -> None:
        if self.held:
            with self._writing:
                self._write_pending()

    def _report_loss(self) -> None:
        """Raise, once, the report of datapoints dropped since the last one (caller holds _state)."""
        if self._lost_samples:
            lost, self._lost_samples = self._lost_samples, 0
            raise StoreError(f"{lost:,} datapoints accepted by PutMetricData could not be stored: {self._lost_reason}")

    def _lose(self, samples: int, reason: str) -> None:
        """Count datapoints dropped, for the next caller (caller holds _state), and log them now."""
        self._lost_samples += samples
        self._lost_reason = reason
        log.error("%d datapoints accepted by PutMetricData could not be stored: %s", samples, reason)

    # -- the writer thread -----------------------------------------------------------------------

    def _run(self, wake: StopSignal) -> None:
        try:
            self._loop(wake)
        except BaseException:  # a bug: what is queued waits for the next call's thread, or a read, or the exit
            log.exception("PutMetricData's writer thread stopped; the next call starts another")
            with self._state:
                self._thread = None

    def _loop(self, wake: StopSignal) -> None:
        """Write what is queued every ``every_s`` (at once past ``flush_samples``), with backoff while
        the store refuses; end once a wait finds nothing left to write."""
        backoff = Backoff()
        due_s = self._clock.monotonic() + self.settings.every_s
        while True:
            if self._queued_samples < self.settings.flush_samples or self.error is not None:
                wake.wait_until(due_s)
            with self._writing:
                with self._state:
                    wake = self._wake = self._clock.stop_signal()  # calls from now on wake the next wait
                    done = not self.held
                    if done:
                        self._thread = None  # the next call starts another
                if done:
                    self._close_writer()
                    return
                try:
                    self._write_pending()
                except StoreError:
                    due_s = self._clock.monotonic() + backoff.next_delay()
                else:
                    backoff.reset()
                    due_s = self._clock.monotonic() + self.settings.every_s

    # -- writes (under _writing) -----------------------------------------------------------------

    def _write_pending(self) -> None:
        """Write the batch an earlier write left, then what is queued now: a transaction each."""
        if self._pending is not None:
            self._write(self._pending)
        batch = self._take()
        if batch is not None:
            self._write(batch)

    def _take(self) -> _Batch | None:
        """What the queue holds, as one batch prepared for its write (store.series)."""
        from . import writes

        with self._state:
            if not self._queued:
                return None
            blocks, size = self._queued, self._queued_samples
            self._queued, self._queued_samples = [], 0
            batch = self._pending = _Batch(size, [])
        try:
            batch.prepared = writes.prepare_datapoints(blocks)
        except Exception as exc:  # a bug: these datapoints cannot be written
            self._drop(batch, exc)
            return None
        return batch

    def _write(self, batch: _Batch) -> None:
        try:
            if self._writer is None:
                self._writer = self._open_writer()
            self._writer.put_prepared_samples(batch.prepared, check_stored=batch.tried)
        except StoreError as exc:  # the store refuses: kept, and tried again
            batch.tried = True
            if self.error is None:
                log.warning("%s; keeping %d datapoints of PutMetricData and trying again", exc.message, self.held)
            self.error = exc
            raise
        except Exception as exc:  # not the store's refusal: this batch would fail again, forever
            self._drop(batch, exc)
            return
        with self._state:
            self._pending = None
            if self.error is not None:
                log.warning("the store takes PutMetricData's datapoints again; nothing was lost")
            self.error = None
            self._state.notify_all()

    def _drop(self, batch: _Batch, exc: Exception) -> None:
        with self._state:
            if self._pending is batch:
                self._pending = None
            self._lose(batch.samples, f"{type(exc).__name__}: {exc}")
            self._state.notify_all()

    def _close_writer(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                writer.close()
            except StoreError:
                pass  # a connection that broke is closed already


# -- one buffer per database, per process ------------------------------------------------------

_Identity = tuple[object, ...]
_buffers: dict[str, dict[_Identity, SampleBuffer]] = {}
_buffers_lock = threading.Lock()


def shared(database: str, identity: _Identity, make: Callable[[], SampleBuffer]) -> SampleBuffer:
    """The buffer of ``database`` with ``identity`` (retention, settings, clock), made at first use."""
    with _buffers_lock:
        found = _buffers.setdefault(database, {})
        buffer = found.get(identity)
        if buffer is None:
            buffer = found[identity] = make()
        return buffer


def of_database(database: str) -> list[SampleBuffer]:
    """The buffers holding (or having held) datapoints for ``database`` in this process."""
    found = _buffers.get(database)
    return list(found.values()) if found else []


def drain_all() -> None:
    """Write what every buffer holds (before the interpreter ends: an exit hook, run by the SQLite
    store's too, before it empties the logs); say what could not be."""
    with _buffers_lock:
        every = [buffer for found in _buffers.values() for buffer in found.values()]
    for buffer in every:
        try:
            buffer.drain()
        except StoreError as exc:
            print(f"trainmon: {exc.message}", file=sys.stderr)


def _forget_in_child() -> None:
    """A forked child starts with empty buffers: what the parent queued is the parent's to write,
    and its threads and connections are not the child's."""
    global _buffers_lock
    _buffers_lock = threading.Lock()
    for found in _buffers.values():
        for buffer in found.values():
            buffer._reset()


atexit.register(drain_all)
os.register_at_fork(after_in_child=_forget_in_child)
