"""How the runtime waits for a store that refuses writes: one backoff policy (:mod:`trainmon.backoff`)
for the ingestor, the job's statuses and the writes a job cannot start without, and one bound
(:class:`Patience`) on how long a job that has ended waits for a store that is gone."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TypeVar

from ..backoff import FULL_DISK_TRIES, RETRY_FIRST_S, RETRY_MOST_S, Backoff
from ..errors import StoreError, StoreFull

__all__ = ["FULL_DISK_TRIES", "RETRY_FIRST_S", "RETRY_MOST_S", "STORE_WAIT_S", "Backoff", "Patience", "retrying"]

STORE_WAIT_S = 60.0  # once a job has ended, how long its supervisor waits for a store that refuses every write

T = TypeVar("T")


class Interrupted(Exception):
    """A wait for the store that the user ended (Ctrl-C, SIGTERM)."""


def retrying(write: Callable[[], T], interrupted: Callable[[], bool] = lambda: False) -> T:
    """A write the job cannot start without, tried again until the store takes it, or until
    ``interrupted`` (then :class:`Interrupted`)."""
    backoff = Backoff()
    while True:
        try:
            return write()
        except StoreError as exc:
            if interrupted():
                raise Interrupted(exc.message) from None
            print(f"trainmon: {exc.message}; trying again", file=sys.stderr)
            deadline = time.monotonic() + backoff.next_delay()
            while time.monotonic() < deadline and not interrupted():
                time.sleep(0.05)


class Patience:
    """How long the end of a job waits for its store: while the store takes writes, as long as
    storing takes; once it refuses them, ``limit_s`` from the first refusal (a full disk is not
    counted: it is given up on after FULL_DISK_TRIES, and what it refused is counted as lost); and no longer once
    the user asks (``interrupted``: Ctrl-C or SIGTERM after the job ended). Once lost it stays lost:
    what is not stored then waits in the job's spool for whoever reaps the job."""

    def __init__(self, limit_s: float = STORE_WAIT_S, interrupted: Callable[[], bool] = lambda: False,
                 clock: Callable[[], float] = time.monotonic,
                 on_refusal: Callable[[StoreError], None] = lambda refusal: None) -> None:
        self.limit_s = limit_s
        self.interrupted = interrupted
        self.clock = clock
        self.on_refusal = on_refusal  # told once, at the first refusal: the wait that is bounded begins
        self.lost_by: str | None = None  # why the wait ended early: "interrupted" or "store"
        self.refusal: StoreError | None = None  # the store's last refusal
        self._told = False  # on_refusal was called
        self._refused_since: float | None = None

    def lost(self, refusal: StoreError | None) -> bool:
        """Whether to stop waiting, now that the store refuses writes (``refusal``) or takes them (None)."""
        if self.lost_by is not None:
            return True
        if refusal is not None:
            self.refusal = refusal
        if self.interrupted():
            self.lost_by = "interrupted"
        elif refusal is None or isinstance(refusal, StoreFull):  # a full disk: its own bound, its loss counted
            self._refused_since = None
        else:
            now = self.clock()
            if self._refused_since is None:
                if not self._told:
                    self._told = True
                    self.on_refusal(refusal)
                self._refused_since = now
            if now - self._refused_since >= self.limit_s:
                self.lost_by = "store"
        return self.lost_by is not None
