"""How the runtime waits for a store that refuses writes: one backoff policy (:mod:`trainmon.backoff`)
for the ingestor, the job's statuses and the writes a job cannot start without."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TypeVar

from ..backoff import FULL_DISK_TRIES, RETRY_FIRST_S, RETRY_MOST_S, Backoff
from ..errors import StoreError

__all__ = ["FULL_DISK_TRIES", "RETRY_FIRST_S", "RETRY_MOST_S", "Backoff", "retrying"]

T = TypeVar("T")


def retrying(write: Callable[[], T]) -> T:
    """A write the job cannot start without, tried again until the store takes it."""
    backoff = Backoff()
    while True:
        try:
            return write()
        except StoreError as exc:
            print(f"trainmon: {exc.message}; trying again", file=sys.stderr)
            time.sleep(backoff.next_delay())
