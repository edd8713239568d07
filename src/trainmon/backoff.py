"""How long to wait before trying a refused write again: delays that double, up to a ceiling.

The runtime's writers (the ingestor, a job's statuses: :mod:`trainmon.runtime.retry`) and the
store's write-behind buffer of PutMetricData (:mod:`trainmon.store.series.buffer`) wait the same way.
"""

from __future__ import annotations

RETRY_FIRST_S = 0.5
RETRY_MOST_S = 5.0
FULL_DISK_TRIES = 5  # a disk that stays full is given up on after this many tries (~12 s); a server down is waited for


class Backoff:
    """Delays that double from ``first_s`` up to ``most_s``, and start again once a write succeeds."""

    def __init__(self, first_s: float = RETRY_FIRST_S, most_s: float = RETRY_MOST_S) -> None:
        self.first_s = first_s
        self.most_s = most_s
        self._delay_s = first_s

    def next_delay(self) -> float:
        """How long to wait before the next try; the one after waits twice as long (up to ``most_s``)."""
        delay = self._delay_s
        self._delay_s = min(self.most_s, delay * 2)
        return delay

    def reset(self) -> None:
        self._delay_s = self.first_s
