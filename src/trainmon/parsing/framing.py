"""How bytes become log records, and how a record's text is shown to metric regexes.

Three modes (see docs/metric-definitions.md):

- ``terminal`` (default): a record ends at ``\\r\\n``, a lone ``\\r`` or ``\\n``, so each progress-bar
  update is its own record; control characters left in a record are escaped as ``#ooo``.
- ``sagemaker``: a record ends only at ``\\n``, as SageMaker's log pipeline does; ``\\r`` and every
  other control character is escaped (``#015``, ``#011``...).
- ``raw``: split as ``terminal``; no escaping.

Text after the last break is a record; a final break adds no empty record.
"""

from __future__ import annotations

import mmap
import re
from enum import StrEnum

import numpy as np


class Mode(StrEnum):
    TERMINAL = "terminal"
    SAGEMAKER = "sagemaker"
    RAW = "raw"

    @property
    def escapes(self) -> bool:
        return self is not Mode.RAW

    @property
    def splits_on_cr(self) -> bool:
        return self is not Mode.SAGEMAKER


# Every character below U+0020 as '#' plus three octal digits: TAB -> '#011', ESC -> '#033'.
ESCAPE_TABLE = {code: f"#{code:03o}" for code in range(0x20)}

_BREAK_TERMINAL_TEXT = re.compile(r"\r\n|\r|\n")
_BREAK_TERMINAL_BYTES = re.compile(rb"\r\n|\r|\n")


def escape(text: str) -> str:
    """Control characters as ``#ooo``; printable text (most records) comes back as it is, at once."""
    return text if text.isprintable() else text.translate(ESCAPE_TABLE)


def holds_control(text: str) -> bool:
    """Whether records joined by "\\n" hold a control character: whether :func:`escape` would change
    any of them. One pass over the text's bytes, where asking each record costs a call apiece."""
    data = text.encode("utf-8", "surrogatepass")
    return int(np.count_nonzero(np.frombuffer(data, np.uint8) < 0x20)) != data.count(b"\n")


def decode(data: bytes) -> str:
    """UTF-8, invalid bytes replaced by U+FFFD; never raises."""
    return data.decode("utf-8", "replace")


def split_text(text: str, mode: Mode) -> list[str]:
    """Split text made of whole records (the last one may lack its break) into records."""
    if not text:
        return []
    parts = _BREAK_TERMINAL_TEXT.split(text) if mode.splits_on_cr else text.split("\n")
    if parts[-1] == "":
        parts.pop()
    return parts


def split_bytes(data: bytes, mode: Mode) -> list[bytes]:
    if not data:
        return []
    parts = _BREAK_TERMINAL_BYTES.split(data) if mode.splits_on_cr else data.split(b"\n")
    if parts[-1] == b"":
        parts.pop()
    return parts


def last_break_end(data: bytes | mmap.mmap, mode: Mode, start: int = 0, end: int | None = None) -> int:
    """Index just past the last record break in ``data[start:end]`` (``start`` if there is none).

    A ``\\r`` at the very end counts as a break in the splitting modes; the caller must then
    skip a ``\\n`` that may begin the next piece (see :class:`trainmon.runtime.capture.records.RecordCutter`).
    """
    end = len(data) if end is None else end
    newline = data.rfind(b"\n", start, end)
    if mode.splits_on_cr:
        newline = max(newline, data.rfind(b"\r", max(newline + 1, start), end))
    return max(newline + 1, start)
