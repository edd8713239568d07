"""Records -> metric points: the hot path.

A naive extractor runs every regex on every line. Here each definition's regex is parsed once
to find a literal that any match must contain (``Train_error=`` in ``Train_error=(.*?);``). A
block of records is then handled a column at a time, with NumPy: the records' bounds in one
pass, the records that hold each literal (:mod:`trainmon.parsing.literals`: NumPy's passes, or
Hyperscan where it is installed), those records decoded and escaped together, and each
definition's regex run on its candidate records by one ``map`` (a C call a record, no Python
frame). Definitions with no usable literal run on every record. The result is identical to the naive loop; the tests compare the
two.

Matching is bounded in time whatever the record: :mod:`trainmon.parsing.engines` picks Python's ``re``,
RE2 or ``regex`` with a time limit per definition and record length. The loops here call ``re``
themselves on the records short enough for it (most of them), without going through the matcher.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import compress
from operator import methodcaller
from typing import Any, NamedTuple

import numpy as np

from .breaks import Breaks
from .definitions import MetricDefinition
from .engines import TIME_LIMIT_REASON, Matcher
from .framing import ESCAPE_TABLE, Mode, decode, escape, split_text
from .literals import distinct, literal_search, records_of

EXAMPLES_KEPT = 3
SMALL_BLOCK_BYTES = 32 << 10  # blocks up to this size are scanned without NumPy's passes
SPARSE_BYTES = 2048  # a block with fewer literal occurrences than one per this many bytes bounds only their records
_EXAMPLE_CHARS = 200

_SRE_LITERAL = re._constants.LITERAL
_SRE_SUBPATTERN = re._constants.SUBPATTERN
_OCTAL_PREFIX = re.compile(r"^[0-7]{1,3}")
_GROUP_1 = methodcaller("group", 1)
_NONE = np.empty(0, np.int64)


Hit = tuple[int, int, int, float]
"""One point found in a block: (record, offset, definition, value): which record (0-based, within
the block), where it starts (byte offset within the block), which definition, and the value."""


class Hits(NamedTuple):
    """A block's points as columns, in record order (a record's points in their definitions' order)."""

    records: np.ndarray  # which record, from 0 within the block
    offsets: np.ndarray  # where it starts, in bytes from the block's start
    definitions: np.ndarray  # which definition found the point
    values: np.ndarray


_NO_HITS = Hits(_NONE, _NONE, _NONE, np.empty(0, np.float64))


@dataclass
class DefinitionStats:
    """What one definition did: what SageMaker never tells its users."""

    name: str
    literal: str | None
    matches: int = 0
    nonfinite: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    rejected_examples: list[str] = field(default_factory=list)
    unmatched_examples: list[str] = field(default_factory=list)

    def reject(self, reason: str, example: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1
        if len(self.rejected_examples) < EXAMPLES_KEPT:
            self.rejected_examples.append(example[:_EXAMPLE_CHARS])

    def to_json(self) -> dict[str, Any]:
        return {
            "Name": self.name,
            "Matches": self.matches,
            "NonFinite": self.nonfinite,
            "Rejected": dict(self.rejected),
            "RejectedExamples": list(self.rejected_examples),
            "UnmatchedExamples": list(self.unmatched_examples),
            "Prefilter": self.literal,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DefinitionStats:
        return cls(
            name=data["Name"],
            literal=data.get("Prefilter"),
            matches=data.get("Matches", 0),
            nonfinite=data.get("NonFinite", 0),
            rejected=dict(data.get("Rejected", {})),
            rejected_examples=list(data.get("RejectedExamples", [])),
            unmatched_examples=list(data.get("UnmatchedExamples", [])),
        )

    @property
    def rejected_total(self) -> int:
        return sum(self.rejected.values())


def required_literal(regex: str, mode: Mode) -> str | None:
    """The longest literal every match must contain, as it appears in the raw (unescaped) text.

    None when there is none worth using (or the regex ignores case), so the definition runs
    on every record.
    """
    try:
        parsed = re._parser.parse(regex)
    except re.error:
        return None
    if parsed.state.flags & re.IGNORECASE:
        return None
    runs: list[str] = []
    current: list[str] = []

    def flush() -> None:
        if current:
            runs.append("".join(current))
            current.clear()

    def walk(items: Iterable[tuple[Any, Any]]) -> bool:
        for op, arg in items:
            if op is _SRE_LITERAL:
                current.append(chr(arg))
            elif op is _SRE_SUBPATTERN:
                _group, add_flags, _del_flags, sub = arg
                if add_flags & re.IGNORECASE:
                    return False
                flush()
                if not walk(sub):
                    return False
                flush()
            else:
                flush()
        return True

    if not walk(parsed):
        return None
    flush()
    fragments = [_raw_fragment(run, mode) for run in runs]
    best = max(fragments, key=len, default="")
    if not best or "\ufffd" in best:
        return None
    return best


def _raw_fragment(literal: str, mode: Mode) -> str:
    """Map a literal of the escaped text back to a piece that must appear in the raw text.

    Escaping turns a control character into '#' + 3 octal digits and leaves every other
    character alone, so the pieces between '#' characters, less up to 3 leading octal digits,
    appear unchanged in the raw record.
    """
    if not mode.escapes:
        return literal
    pieces = [_OCTAL_PREFIX.sub("", piece) for piece in literal.split("#")]
    return max(pieces, key=len)


class Extractor:
    """Compiled definitions for one splitting mode. Not thread-safe (it counts as it goes, and keeps
    scratch buffers between blocks)."""

    def __init__(self, definitions: Sequence[MetricDefinition], mode: Mode = Mode.TERMINAL,
                 literal_engine: str | None = None) -> None:
        self.definitions = list(definitions)
        self.mode = mode
        self._matchers = [Matcher(d.regex) for d in self.definitions]
        self._split_cr = mode.splits_on_cr
        self._escapes = mode.escapes
        self._by_literal: dict[bytes, list[int]] = {}
        self._always: list[int] = []
        self.stats: list[DefinitionStats] = []
        for index, definition in enumerate(self.definitions):
            literal = required_literal(definition.regex, mode)
            self.stats.append(DefinitionStats(definition.name, literal))
            if literal is None:
                self._always.append(index)
            else:
                self._by_literal.setdefault(literal.encode("utf-8"), []).append(index)
        self._search = literal_search(list(self._by_literal), literal_engine)  # `literals`: NumPy or Hyperscan
        self._literal_texts = [literal.decode("utf-8") for literal in self._by_literal]
        literal_of = {index: number for number, indexes in enumerate(self._by_literal.values()) for index in indexes}
        self._literal_numbers = [literal_of.get(index) for index in range(len(self.definitions))]  # None: no literal
        self._scratch = np.empty(0, bool), np.empty(0, bool)
        # The last block scan() counted: its records, and where they end (every record bounded) or its
        # breaks (a sparse scan).
        self._counted: tuple[bytes, int, np.ndarray | Breaks] | None = None
        self._crlf: tuple[bytes, bool] | None = None  # the last block bounded with "\r" in it, and if "\r\n" too

    @property
    def literal_engine(self) -> str:
        """What finds the literals: "numpy" or "hyperscan" (:mod:`trainmon.parsing.literals`)."""
        return self._search.engine

    # -- records ---------------------------------------------------------------------------

    def count_records(self, block: bytes) -> int:
        if not block:
            return 0
        counted, self._counted = self._counted, None
        if counted is not None and counted[0] is block:  # the block scan() just counted
            return counted[1]
        breaks = block.count(b"\n")
        if self._split_cr and b"\r" in block:
            breaks += block.count(b"\r") - block.count(b"\r\n")
        return self._records_of_breaks(block, breaks)

    def _records_of_breaks(self, block: bytes, breaks: int) -> int:
        """A block's records, given its breaks: one more where the last record has no break."""
        last = block[-1:]
        return breaks if last == b"\n" or (last == b"\r" and self._split_cr) else breaks + 1

    def record_counts(self, block: bytes, parts: Sequence[bytes]) -> list[int]:
        """The records of each of ``parts``, joined into ``block``, each but the last ending with a
        break (no break spans two): from the bounds or breaks a scan of ``block`` just found (no pass
        over the bytes again), else counted part by part."""
        counted, self._counted = self._counted, None
        if counted is None or counted[0] is not block:
            return [self.count_records(part) for part in parts]
        if len(parts) == 1:
            return [counted[1]]
        edges = np.cumsum([len(part) for part in parts])  # a part's records end (at their breaks) before the next's
        if isinstance(counted[2], Breaks):  # the records through each part but the last: the breaks before its end
            through = counted[2].rank(edges[:-1]).tolist()
            return np.diff([0, *through, counted[1]]).tolist()  # type: ignore[no-any-return]
        edges[-1] += 1  # the last record, without a break, ends at the block's end
        return np.diff(np.searchsorted(counted[2], edges), prepend=0).tolist()  # type: ignore[no-any-return]

    def holds_crlf(self, block: bytes) -> bool | None:
        """Whether a block the last scan bounded holds a "\r\n" break (None: not known; the scan of
        a block without "\r" leaves it unknown, and so does a small one's)."""
        known = self._crlf
        return known[1] if known is not None and known[0] is block else None

    def _masks(self, size: int) -> tuple[np.ndarray, np.ndarray]:
        """Two boolean buffers of ``size``, kept between blocks: a fresh array of a block's size costs
        more in page faults than the comparison that fills it."""
        first, second = self._scratch
        if len(first) < size:
            self._scratch = first, second = np.empty(size, bool), np.empty(size, bool)
        return first[:size], second[:size]

    def _bounds(self, block: bytes, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where each record of the block starts and ends (before its break): a break is "\\n", or in
        a mode that splits on it "\\r" and "\\r\\n" (one break)."""
        size = len(data)
        newline, carriage = self._masks(size)
        np.equal(data, 10, out=newline)
        if self._split_cr and b"\r" in block:
            np.equal(data, 13, out=carriage)
            np.logical_or(newline, carriage, out=newline)
            breaks = np.flatnonzero(newline)
            is_cr = data[breaks] == 13
            second = np.zeros(len(breaks), bool)  # the "\n" of a "\r\n": no break of its own
            second[1:] = is_cr[:-1] & ~is_cr[1:] & (breaks[1:] == breaks[:-1] + 1)
            following = breaks + 1
            following[:-1] += second[1:]
            ends, following = breaks[~second], following[~second]
            self._crlf = (block, bool(second.any()))
        else:
            ends = np.flatnonzero(newline)
            following = ends + 1
        if not len(ends) or following[-1] != size:
            ends = np.append(ends, size)  # the last record, without its break
            following = np.append(following, size)
        starts = np.empty_like(ends)
        starts[0] = 0
        starts[1:] = following[:-1]
        return starts, ends

    # -- matching --------------------------------------------------------------------------

    def scan(self, block: bytes) -> list[Hit]:
        """Points in a block of whole records (the last may lack its break), in record order."""
        found = self.scan_columns(block)
        return list(zip(found.records.tolist(), found.offsets.tolist(), found.definitions.tolist(),
                        found.values.tolist(), strict=True))

    def scan_columns(self, block: bytes) -> Hits:
        """:meth:`scan`, as columns: what a caller that handles many points at once takes."""
        if not block or not self.definitions:
            return _NO_HITS
        if len(block) <= SMALL_BLOCK_BYTES:
            return self._scan_small(block)
        data = np.frombuffer(block, np.uint8)
        found = self._search.positions(block, data, self._masks(len(data))[1]) if self._by_literal else []
        if not self._always and sum(map(len, found)) * SPARSE_BYTES < len(block):
            return self._scan_sparse(block, data, found)
        starts, ends = self._bounds(block, data)
        self._counted = (block, len(ends), ends)  # count_records(block) next, as every caller asks
        holding = [records_of(positions, ends) for positions in found]
        candidates = len(ends) if self._always else sum(len(records) for records in holding)
        if candidates * 2 >= len(ends):  # most records are candidates: take the text of all of them
            texts = self._texts(block, starts, ends, None)

            def text_of(records: np.ndarray) -> list[str]:
                return texts if len(records) == len(texts) else list(map(texts.__getitem__, records.tolist()))
        else:
            wanted = np.zeros(len(ends), bool)
            for records in holding:
                wanted[records] = True
            texts = self._texts(block, starts, ends, np.flatnonzero(wanted))
            index_of = np.cumsum(wanted) - 1  # record -> its place in texts

            def text_of(records: np.ndarray) -> list[str]:
                return list(map(texts.__getitem__, index_of[records].tolist()))
        every = np.arange(len(ends))
        return self._points(starts, ends, ((index, records, text_of(records)) for index, records in
                                           ((index, every if number is None else holding[number])
                                            for index, number in enumerate(self._literal_numbers))
                                           if len(records)))

    def _scan_sparse(self, block: bytes, data: np.ndarray, found: list[np.ndarray]) -> Hits:
        """:meth:`scan_columns` of a block where the literals are rare (a flood of lines that hold no
        metric): the breaks are marked as bits (:class:`~trainmon.parsing.breaks.Breaks`), each
        literal's records numbered by the breaks before it, and only those records bounded. No
        array of every record's bounds is made, which is most of what a block costs otherwise."""
        split_cr = self._split_cr and b"\r" in block
        breaks = Breaks(data, split_cr, self._masks(len(data)))
        if split_cr:
            self._crlf = (block, breaks.crlf)
        self._counted = (block, self._records_of_breaks(block, breaks.count), breaks)
        holding = [distinct(breaks.rank(positions)) for positions in found]  # each literal's records
        records = holding[0] if len(holding) == 1 else np.unique(np.concatenate(holding))
        if not len(records):
            return _NO_HITS
        starts, ends = breaks.bounds(records)
        texts = self._texts(block, starts, ends, np.arange(len(records)))
        hits = self._points(starts, ends, (
            (index, places, list(map(texts.__getitem__, places.tolist())))
            for index, places in ((index, np.searchsorted(records, holding[number]))
                                  for index, number in enumerate(self._literal_numbers) if number is not None)
            if len(places)))
        return hits._replace(records=records[hits.records])

    def _scan_small(self, block: bytes) -> Hits:
        """:meth:`scan_columns` for a few records (what a job printing a line at a time gives): plain
        containment tests and a loop, which cost less there than NumPy's set-up."""
        present = [literal in block for literal in self._by_literal]
        if not self._always and not any(present):
            return _NO_HITS  # nothing to match (count_records counts the records itself)
        starts, ends = self._bounds(block, np.frombuffer(block, np.uint8))
        self._counted = (block, len(ends), ends)
        raw = split_text(decode(block), self.mode)  # the records' text, not escaped yet (as the literals are)
        escapes = self._escapes

        def candidates() -> Iterator[tuple[int, np.ndarray, list[str]]]:
            for index, number in enumerate(self._literal_numbers):
                if number is None:
                    places = list(range(len(raw)))
                elif present[number]:
                    literal = self._literal_texts[number]
                    places = [place for place, text in enumerate(raw) if literal in text]
                else:
                    continue
                if places:
                    texts = [escape(raw[place]) for place in places] if escapes else [raw[place] for place in places]
                    yield index, np.array(places, np.int64), texts

        return self._points(starts, ends, candidates())

    def _points(self, starts: np.ndarray, ends: np.ndarray,
                candidates: Iterable[tuple[int, np.ndarray, list[str]]]) -> Hits:
        """Each definition matched on its candidate records (index, records, their texts), the points
        put in record order."""
        widest = int((ends - starts).max()) * (4 if self._escapes else 1)  # characters, at most, of any text
        found: list[tuple[np.ndarray, int, np.ndarray]] = []
        for index, records, texts in candidates:
            limit = self._matchers[index].python_chars
            kept, values = self._match(index, texts, widest > limit and max(map(len, texts)) > limit)
            if kept is not None:
                records = records[np.array(kept, np.int64)] if kept else _NONE
            if len(records):
                found.append((records, index, values))
        if not found:
            return _NO_HITS
        if len(found) == 1:
            records, index, values = found[0]
            return Hits(records, starts[records], np.full(len(records), index, np.int64), values)
        records = np.concatenate([records for records, _, _ in found])
        definitions = np.concatenate([np.full(len(records), index, np.int64) for records, index, _ in found])
        values = np.concatenate([values for _, _, values in found])
        order = np.lexsort((definitions, records))
        records = records[order]
        return Hits(records, starts[records], definitions[order], values[order])

    def _texts(self, block: bytes, starts: np.ndarray, ends: np.ndarray, chosen: np.ndarray | None) -> list[str]:
        """The text of each chosen record (every record when ``chosen`` is None), decoded and escaped
        as the regexes see it: all of them joined by "\\n" (no record holds one), escaped with a
        replace per control character the text holds, decoded and split again."""
        if chosen is None:
            joined = block  # with the last record's break, if it has one (a copy less)
            if self._split_cr and b"\r" in block:
                joined = joined.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            count = len(ends)
            breaks = count - int(ends[-1] == len(block))
        else:
            joined = b"\n".join([block[start:end] for start, end in zip(starts[chosen].tolist(), ends[chosen].tolist(),
                                                                       strict=True)])
            count = len(chosen)
            breaks = count - 1
        if self._escapes:
            codes = np.frombuffer(joined, np.uint8)
            control = np.less(codes, 32, out=self._masks(len(codes))[0])
            if np.count_nonzero(control) > breaks:  # more than the records' "\n"
                for code in np.unique(codes[control]).tolist():
                    if code != 10:
                        joined = joined.replace(bytes((code,)), ESCAPE_TABLE[code].encode())
        texts = joined.decode("utf-8", "replace").split("\n")
        if len(texts) > count:
            texts.pop()  # after the last record's break
        return texts

    def _match(self, index: int, texts: list[str], long: bool) -> tuple[list[int] | None, np.ndarray]:
        """One definition on its candidate records' texts (``long``: some are longer than Python's
        ``re`` is bounded for): which of them gave a point (None: every one) and the points' values;
        the others counted in the definition's stats, with why."""
        matcher = self._matchers[index]
        # One C call a record for the common case; the matcher picks the engine by length otherwise.
        found = list(map(matcher.search if long else matcher.python_search, texts))
        kept: list[int] | None = None
        matched = found
        if None in found or False in found:
            kept = list(compress(range(len(found)), found))
            matched = [found[i] for i in kept]
        captured = list(map(_GROUP_1, matched))
        try:
            values = np.array(list(map(float, captured)), np.float64)
        except (TypeError, ValueError):  # a capture that is not a number, or group 1 that did not take part
            kept, values = self._values(index, texts, found, kept, captured)
        if kept is not None and len(kept) < len(found):
            self._misses(index, texts, found)
        stats = self.stats[index]
        stats.matches += len(values)
        stats.nonfinite += len(values) - int(np.count_nonzero(np.isfinite(values)))
        return kept, values

    def _values(self, index: int, texts: list[str], found: list[Any], kept: list[int] | None,
                captured: list[Any]) -> tuple[list[int], np.ndarray]:
        """:meth:`_match`'s points one by one, when a capture was not a number: those that are, and
        why each other was rejected."""
        places = kept if kept is not None else list(range(len(found)))
        good: list[int] = []
        values: list[float] = []
        for place, capture in zip(places, captured, strict=True):
            try:
                values.append(float(capture))
            except (TypeError, ValueError):
                self._miss(index, texts[place], found[place])
            else:
                good.append(place)
        return good, np.array(values, np.float64)

    def _misses(self, index: int, texts: list[str], found: list[Any]) -> None:
        """Records the definition's regex found nothing in (or stopped at): the first few kept as
        examples of near misses, every stop counted."""
        stats = self.stats[index]
        room = stats.literal is not None and len(stats.unmatched_examples) < EXAMPLES_KEPT
        if not room and False not in found:
            return
        for place, outcome in enumerate(found):
            if outcome is False or (outcome is None and room):
                self._miss(index, texts[place], outcome)
                room = len(stats.unmatched_examples) < EXAMPLES_KEPT

    def _miss(self, index: int, text: str, found: Any) -> None:
        """Count why a candidate record gave no point."""
        stats = self.stats[index]
        if found is False:
            stats.reject(TIME_LIMIT_REASON, text)
        elif found is None:
            if stats.literal is not None and len(stats.unmatched_examples) < EXAMPLES_KEPT:
                stats.unmatched_examples.append(text[:_EXAMPLE_CHARS])
        elif found.group(1) is None:
            stats.reject("capture group 1 did not take part in the match", text)
        elif found.group(1).strip():
            stats.reject("capture is not a number", found.group(1))
        else:
            stats.reject("empty capture", text)

    def merge_stats(self, stats: list[dict[str, Any]]) -> None:
        """Add the diagnostics of the same definitions run elsewhere (another process)."""
        for mine, theirs in zip(self.stats, stats, strict=True):
            _merge(mine, DefinitionStats.from_json(theirs))

    def reset_stats(self) -> None:
        self.stats = [DefinitionStats(s.name, s.literal) for s in self.stats]


class ParsedPoint(NamedTuple):
    line: int    # 1-based record number under the mode's splitting
    offset: int  # byte offset of the record's first byte in the input
    name: str
    value: float


class Points(NamedTuple):
    """Points of a saved log as columns, in order."""

    lines: np.ndarray  # 1-based record numbers under the mode's splitting
    offsets: np.ndarray  # byte offsets of the records' first bytes in the input
    definitions: np.ndarray  # which definition (index) found each
    values: np.ndarray


SCAN_BLOCK_BYTES = 8 << 20


def scan_blocks(stream: Any, extractor: Extractor, block_bytes: int = SCAN_BLOCK_BYTES) -> Iterator[Points]:
    """Every point in a binary stream (a saved log), a block's worth at a time. Blocks are cut after
    a newline, so a record (and a "\r\n") never straddles two blocks."""
    records_before, offset_before = 0, 0
    pending: list[bytes] = []
    while True:
        data = stream.read(block_bytes)
        if data:
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                pending.append(data)
                continue
            block = b"".join([*pending, data[:cut]])
            pending = [data[cut:]] if cut < len(data) else []
        else:
            block = b"".join(pending)
            pending = []
        found = extractor.scan_columns(block)
        if len(found.records):
            yield Points(found.records + (records_before + 1), found.offsets + offset_before, found.definitions,
                         found.values)
        records_before += extractor.count_records(block)
        offset_before += len(block)
        if not data:
            return


def parsed_points(blocks: Iterable[Points], extractor: Extractor) -> Iterator[ParsedPoint]:
    """Columns of points as :class:`ParsedPoint` values, one by one."""
    names = [definition.name for definition in extractor.definitions]
    for found in blocks:
        yield from map(ParsedPoint, found.lines.tolist(), found.offsets.tolist(),
                       map(names.__getitem__, found.definitions.tolist()), found.values.tolist())


def scan_stream(stream: Any, extractor: Extractor, block_bytes: int = SCAN_BLOCK_BYTES) -> Iterator[ParsedPoint]:
    """Every point in a binary stream (a saved log), in order."""
    return parsed_points(scan_blocks(stream, extractor, block_bytes), extractor)


# -- whole files, on every core ------------------------------------------------------------

PARALLEL_MIN_BYTES = 32 << 20
PARALLEL_CHUNK_BYTES = 8 << 20


def _chunk_bounds(path: str, size: int, chunk_bytes: int) -> list[tuple[int, int]]:
    """Byte ranges that start just after a newline, so no record (nor a "\\r\\n") is split."""
    bounds, start = [], 0
    with open(path, "rb") as handle:
        while start < size:
            handle.seek(min(size, start + chunk_bytes))
            handle.readline()
            end = min(size, handle.tell()) if start + chunk_bytes < size else size
            bounds.append((start, end))
            start = end
    return bounds


_worker: Extractor | None = None  # a scan_file_blocks worker's extractor, compiled once


def _start_worker(definitions: list[MetricDefinition], mode: Mode, literal_engine: str) -> None:
    global _worker
    _worker = Extractor(definitions, mode, literal_engine)


def _scan_range(task: tuple[str, int, int]) -> tuple[Hits, int, list[dict[str, Any]]]:
    path, start, end = task
    extractor = _worker
    assert extractor is not None
    extractor.reset_stats()
    with open(path, "rb") as handle:
        handle.seek(start)
        block = handle.read(end - start)
    hits = extractor.scan_columns(block)
    return hits, extractor.count_records(block), [s.to_json() for s in extractor.stats]


def scan_file_blocks(path: str, extractor: Extractor, workers: int | None = None) -> Iterator[Points]:
    """Every point of a saved log, in order, a range at a time, using every core for a large file.

    The file is cut into ranges after newlines; each range is scanned in a worker process and the
    results are joined in order, with line numbers carried across ranges. ``extractor.stats``
    holds the merged diagnostics afterwards.
    """
    import multiprocessing
    import os

    size = os.path.getsize(path)
    cores = workers or os.cpu_count() or 1
    if size < PARALLEL_MIN_BYTES or cores < 2 or "fork" not in multiprocessing.get_all_start_methods():
        with open(path, "rb") as handle:
            yield from scan_blocks(handle, extractor)
        return
    tasks = [(path, start, end) for start, end in _chunk_bounds(path, size, PARALLEL_CHUNK_BYTES)]
    records_before = 0
    setup = (extractor.definitions, extractor.mode, extractor.literal_engine)
    with multiprocessing.get_context("fork").Pool(cores, _start_worker, setup) as pool:
        for (_path, start, _end), (hits, records, stats) in zip(tasks, pool.imap(_scan_range, tasks), strict=True):
            if len(hits.records):
                yield Points(hits.records + (records_before + 1), hits.offsets + start, hits.definitions, hits.values)
            records_before += records
            extractor.merge_stats(stats)


def scan_file(path: str, extractor: Extractor, workers: int | None = None) -> Iterator[ParsedPoint]:
    """:func:`scan_file_blocks`, point by point."""
    return parsed_points(scan_file_blocks(path, extractor, workers), extractor)


def _merge(into: DefinitionStats, other: DefinitionStats) -> None:
    into.matches += other.matches
    into.nonfinite += other.nonfinite
    for reason, count in other.rejected.items():
        into.rejected[reason] = into.rejected.get(reason, 0) + count
    into.rejected_examples.extend(other.rejected_examples[: max(0, EXAMPLES_KEPT - len(into.rejected_examples))])
    into.unmatched_examples.extend(other.unmatched_examples[: max(0, EXAMPLES_KEPT - len(into.unmatched_examples))])
