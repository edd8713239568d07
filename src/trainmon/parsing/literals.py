"""Where the definitions' required literals occur in a block: the search behind the prefilter.

:class:`~trainmon.parsing.extract.Extractor` decodes and matches only the records that hold a
definition's literal. Finding them is the one pass over every byte of a block that extraction
makes besides the records' bounds, so it has two engines, which give the same answer:

- ``numpy`` (always there): each literal looked for at the positions of one of its bytes, found by
  one vectorised comparison over the block and checked there byte by byte;
- ``hyperscan`` (the optional ``trainmon[hyperscan]`` extra): every literal at once, by
  Hyperscan's multi-literal matcher, one callback per occurrence.

:func:`literal_search` picks Hyperscan when it is installed and runs on this CPU, else NumPy;
``TRAINMON_LITERAL_ENGINE=numpy`` keeps NumPy where Hyperscan is installed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import numpy as np

from ..errors import ValidationException

ENGINES = ("numpy", "hyperscan")
ENGINE_VARIABLE = "TRAINMON_LITERAL_ENGINE"
SAMPLE_BYTES = 64 << 10  # what a block's byte frequencies are judged on
_NONE = np.empty(0, np.int64)


class LiteralSearch(Protocol):
    engine: str

    def positions(self, block: bytes, data: np.ndarray, scratch: np.ndarray) -> list[np.ndarray]:
        """Per literal, where it starts in the block (ascending). ``data`` is the block as bytes of
        NumPy, ``scratch`` a boolean buffer of the block's size the search may overwrite."""
        ...


def literal_search(literals: Sequence[bytes], engine: str | None = None) -> LiteralSearch:
    """The search for these literals: with ``engine`` ("numpy" or "hyperscan"; None: the one
    ``TRAINMON_LITERAL_ENGINE`` names, else the fastest available). An unknown engine, or Hyperscan
    asked for where it cannot run, is a ValidationException."""
    engine = engine or os.environ.get(ENGINE_VARIABLE, "").strip() or None
    if engine not in (None, *ENGINES):
        raise ValidationException(f"unknown literal search engine {engine!r}: {ENGINE_VARIABLE} is one of "
                                  f"{', '.join(ENGINES)}, or unset for the fastest installed")
    if engine != "numpy" and literals:
        try:
            return HyperscanSearch(literals)
        except Exception as exc:  # not installed, or this CPU lacks what its build needs
            if engine == "hyperscan":
                raise ValidationException(f"Hyperscan's literal search cannot run here ({exc}): install "
                                          f"trainmon[hyperscan], or unset {ENGINE_VARIABLE}") from exc
    return NumpySearch(literals)


def check_setting() -> None:
    """Raise the ValidationException :func:`literal_search` would, now: before a job is created
    rather than when its output is first matched."""
    literal_search([b"="])


def hyperscan_available() -> bool:
    try:
        HyperscanSearch([b"x"])
    except Exception:
        return False
    return True


def records_of(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The records (ascending, each once) in which these ascending positions lie."""
    return distinct(np.searchsorted(ends, starts))


def distinct(ascending: np.ndarray) -> np.ndarray:
    """An ascending array, each value once."""
    if len(ascending) > 1:
        return ascending[np.concatenate(([True], ascending[1:] != ascending[:-1]))]
    return ascending


# -- NumPy ----------------------------------------------------------------------------------

# What finding literals in a block costs, in nanoseconds (measured with NumPy on a 2-core x86 machine;
# only their proportions matter): a comparison pass over the block for one byte, per byte of the
# block; each position that pass yields; each position checked against a literal's next byte.
PASS_NS_PER_BYTE = 0.22
POSITION_NS = 15.0
CHECK_NS = 10.0


def anchors(literals: Sequence[np.ndarray], count: list[float], size: int) -> list[int]:
    """For each literal, the byte whose positions it is looked for at: first each literal's rarest
    byte, then, while it saves time, a byte's pass dropped and its literals moved to other bytes they
    hold that already have one (``count``: each byte's expected count in the block)."""
    def passes(chosen: Iterable[int]) -> float:
        return sum(size * PASS_NS_PER_BYTE + count[byte] * POSITION_NS for byte in chosen)

    choice = [min(set(literal.tolist()), key=lambda byte: count[byte]) for literal in literals]
    while True:
        chosen = set(choice)
        best: tuple[float, list[int]] | None = None
        for dropped in chosen:
            others = chosen - {dropped}
            moved = list(choice)
            for number, literal in enumerate(literals):
                if moved[number] == dropped:
                    options = others.intersection(literal.tolist())
                    if not options:
                        break
                    moved[number] = min(options, key=lambda byte: count[byte])
            else:
                saving = (passes(chosen) - passes(others)
                          - CHECK_NS * sum(count[new] - count[old] for new, old in zip(moved, choice, strict=True)))
                if saving > 0 and (best is None or saving > best[0]):
                    best = saving, moved
        if best is None:
            return choice
        choice = best[1]


class NumpySearch:
    """Each literal looked for at the positions of one of its bytes (:func:`anchors`: a rare one,
    shared with other literals where that costs less than a pass of its own), found by one
    vectorised comparison for every literal that byte serves, and checked there byte by byte,
    rarest first."""

    engine = "numpy"

    def __init__(self, literals: Sequence[bytes]) -> None:
        self._literals = [np.frombuffer(literal, np.uint8) for literal in literals]

    def positions(self, block: bytes, data: np.ndarray, scratch: np.ndarray) -> list[np.ndarray]:
        size = len(data)
        if not size:
            return [_NONE] * len(self._literals)
        sample = data[:SAMPLE_BYTES]
        count = (np.bincount(sample, minlength=256) * (size / len(sample))).tolist()  # each byte's expected count
        plans: dict[int, list[tuple[int, np.ndarray, list[int]]]] = {}  # anchor -> (literal, its bytes' order)
        for number, (literal, anchor) in enumerate(zip(self._literals, anchors(self._literals, count, size),
                                                       strict=True)):
            order = sorted(range(len(literal)), key=lambda i: (literal[i] != anchor, count[literal[i]], i))
            plans.setdefault(anchor, []).append((number, literal, order))
        found_at: list[np.ndarray] = [_NONE] * len(self._literals)
        for anchor, literals in plans.items():
            positions = np.flatnonzero(np.equal(data, anchor, out=scratch))
            for number, literal, order in literals:
                found = positions - order[0]
                width = len(literal)
                if len(found) and (found[0] < 0 or found[-1] > size - width):
                    found = found[(found >= 0) & (found <= size - width)]
                for at in order[1:]:
                    if not len(found):
                        break
                    found = found[data[found + at] == literal[at]]
                found_at[number] = found
        return found_at


# -- Hyperscan ------------------------------------------------------------------------------


class HyperscanSearch:
    """Every literal in one scan of Hyperscan's literal matcher, which reports each occurrence's end
    (overlapping ones too) in ascending order. The binding lets go of Python's lock while it scans
    and takes it back for each occurrence's callback, which only notes where the occurrence ends."""

    engine = "hyperscan"

    def __init__(self, literals: Sequence[bytes]) -> None:
        import hyperscan

        self._widths = [len(literal) for literal in literals]
        self._database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        self._database.compile(expressions=list(literals), ids=list(range(len(literals))), elements=len(literals),
                               flags=0, literal=True)
        self._scratch = hyperscan.Scratch(self._database)

    def positions(self, block: bytes, data: np.ndarray, scratch: np.ndarray) -> list[np.ndarray]:
        found: list[list[int]] = [[] for _ in self._widths]
        appends = [positions.append for positions in found]

        def occurrence(number: int, _start: int, end: int, _flags: int, _context: Any) -> None:
            appends[number](end)

        self._database.scan(block, match_event_handler=occurrence, scratch=self._scratch)
        found_at: list[np.ndarray] = []
        for positions, width in zip(found, self._widths, strict=True):
            starts = np.array(positions, np.int64) - width if positions else _NONE
            if len(starts) > 1 and np.any(starts[1:] < starts[:-1]):
                starts.sort()
            found_at.append(starts)
        return found_at
