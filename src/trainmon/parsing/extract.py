"""Records -> metric points: the hot path.

A naive extractor runs every regex on every line. Here each definition's regex is parsed once
to find a literal that any match must contain (``Train_error=`` in ``Train_error=(.*?);``); the
block of records is searched for those literals with ``bytes.find``, the records' bounds are
found in one vectorised pass, and only the records that hold a literal are decoded, escaped and
matched. Definitions with no usable literal run on every record. A block of metric lines
(dense) is walked line by line instead. The result is identical to the naive loop; the tests
compare the two.

Matching is bounded in time whatever the record: :mod:`trainmon.parsing.engines` picks Python's ``re``,
RE2 or ``regex`` with a time limit per definition and record length. The loops here call ``re``
themselves on the records short enough for it (most of them), without going through the matcher.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from .definitions import MetricDefinition
from .engines import TIME_LIMIT_REASON, Matcher
from .framing import ESCAPE_TABLE, Mode

EXAMPLES_KEPT = 3
DENSE_SAMPLE_BYTES = 64 << 10
_EXAMPLE_CHARS = 200

_SRE_LITERAL = re._constants.LITERAL
_SRE_SUBPATTERN = re._constants.SUBPATTERN
_OCTAL_PREFIX = re.compile(r"^[0-7]{1,3}")


Hit = tuple[int, int, int, float]
"""One point found in a block: (record, offset, definition, value): which record (0-based, within
the block), where it starts (byte offset within the block), which definition, and the value. A
plain tuple: a block of a million points makes a million of them."""


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
    candidates: int = 0

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
    """Compiled definitions for one splitting mode. Not thread-safe (it counts as it goes)."""

    def __init__(self, definitions: Sequence[MetricDefinition], mode: Mode = Mode.TERMINAL) -> None:
        self.definitions = list(definitions)
        self.mode = mode
        self._matchers = [Matcher(d.regex) for d in self.definitions]
        self._python = [m.python_search for m in self._matchers]
        self._python_chars = [m.python_chars for m in self._matchers]
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
        self._counted: tuple[bytes, int] | None = None  # the last block _bounds saw, and its records

    # -- records ---------------------------------------------------------------------------

    def _count_breaks(self, block: bytes, start: int, end: int, has_cr: bool) -> int:
        count = block.count(b"\n", start, end)
        if has_cr:
            count += block.count(b"\r", start, end) - block.count(b"\r\n", start, end)
        return count

    def count_records(self, block: bytes) -> int:
        if not block:
            return 0
        counted, self._counted = self._counted, None
        if counted is not None and counted[0] is block:  # the block scan() just bounded
            return counted[1]
        breaks = self._count_breaks(block, 0, len(block), self._split_cr and b"\r" in block)
        last = block[-1:]
        ends_with_break = last == b"\n" or (last == b"\r" and self._split_cr)
        return breaks if ends_with_break else breaks + 1

    # -- matching --------------------------------------------------------------------------

    def scan(self, block: bytes) -> list[Hit]:
        """Points in a block of whole records (the last may lack its break), in record order."""
        if not self.definitions or not block:
            return []
        if self._dense(block):
            return self._scan_dense(block)
        return self._scan_records(block)

    def _bounds(self, block: bytes) -> tuple[np.ndarray, np.ndarray]:
        """Where each record of the block starts and ends (before its break), in one vectorised
        pass: a break is "\n", or in a mode that splits on it "\r" and "\r\n" (one break)."""
        data = np.frombuffer(block, np.uint8)
        newline = data == 10
        if self._split_cr and b"\r" in block:
            carriage = data == 13
            after_carriage = np.zeros(len(data), bool)
            after_carriage[1:] = carriage[:-1]
            ends = np.flatnonzero(carriage | (newline & ~after_carriage))
            crlf = np.zeros(len(data), bool)
            crlf[:-1] = carriage[:-1] & newline[1:]
            following = ends + 1 + crlf[ends]  # where the next record starts
        else:
            ends = np.flatnonzero(newline)
            following = ends + 1
        if not len(ends) or following[-1] != len(block):
            ends = np.append(ends, len(block))  # the last record, without its break
            following = np.append(following, len(block))
        starts = np.empty_like(ends)
        starts[0] = 0
        starts[1:] = following[:-1]
        self._counted = (block, len(ends))  # count_records(block) next, as scan_stream asks
        return starts, ends

    def _scan_records(self, block: bytes) -> list[Hit]:
        """:meth:`scan`: the records' bounds at once (:meth:`_bounds`), each literal found with
        ``bytes.find``, then the records that hold one matched in record order (each once, its
        definitions in order)."""
        starts, ends = self._bounds(block)
        records: list[np.ndarray] = []
        definitions: list[np.ndarray] = []
        find = block.find
        for literal, indexes in self._by_literal.items():
            occurrences: list[int] = []
            step = len(literal)
            pos = find(literal)
            while pos != -1:
                occurrences.append(pos)
                pos = find(literal, pos + step)
            if occurrences:
                holding = np.unique(np.searchsorted(ends, np.array(occurrences, np.int64)))
                for index in indexes:
                    records.append(holding)
                    definitions.append(np.full(len(holding), index, np.int64))
        if self._always:
            every = np.arange(len(ends), dtype=np.int64)
            for index in self._always:
                records.append(every)
                definitions.append(np.full(len(every), index, np.int64))
        if not records:
            return []
        record_of, definition_of = np.concatenate(records), np.concatenate(definitions)
        order = np.lexsort((definition_of, record_of))
        pairs = np.stack([record_of[order], definition_of[order]], axis=1)
        if len(pairs) > 1:
            pairs = pairs[np.concatenate([[True], np.any(pairs[1:] != pairs[:-1], axis=1)])]  # each pair once
        held, first = np.unique(pairs[:, 0], return_index=True)  # each candidate record, where its pairs start
        return self._match(self._records(block, held.tolist(), starts[held].tolist(), ends[held].tolist(),
                                         first.tolist(), pairs[:, 1].tolist()))

    def _records(self, block: bytes, held: list[int], starts: list[int], ends: list[int], first: list[int],
                 indexes: list[int]) -> Iterator[tuple[int, int, str, list[int]]]:
        """The candidate records of :meth:`_scan_records` for :meth:`_match`, decoded and escaped."""
        escapes = self._escapes
        last = [*first[1:], len(indexes)]
        for record, start, end, begin, stop in zip(held, starts, ends, first, last, strict=True):
            text = block[start:end].decode("utf-8", "replace")
            if escapes and not text.isprintable():
                text = text.translate(ESCAPE_TABLE)
            yield record, start, text, indexes[begin:stop]

    def _match(self, candidates: Iterable[tuple[int, int, str, list[int]]]) -> list[Hit]:
        """Each candidate record (number, offset, text, the definitions to try, ascending) matched:
        a number in group 1 is a point; else :meth:`_miss` says why. Counted in locals, then into
        the stats."""
        python, python_chars, matchers, miss = self._python, self._python_chars, self._matchers, self._miss
        matches = [0] * len(self.stats)
        nonfinite = [0] * len(self.stats)
        hits: list[Hit] = []
        for record, start, text, indexes in candidates:
            size = len(text)
            for index in indexes:
                found = python[index](text) if size <= python_chars[index] else matchers[index].search(text)
                if found:
                    captured = found.group(1)
                    if captured is not None:
                        try:
                            value = float(captured)
                        except ValueError:
                            pass
                        else:
                            matches[index] += 1
                            if value - value != 0.0:
                                nonfinite[index] += 1
                            hits.append((record, start, index, value))
                            continue
                miss(index, text, found)
        for index, count in enumerate(matches):
            self.stats[index].matches += count
            self.stats[index].nonfinite += nonfinite[index]
        return hits

    def _dense(self, block: bytes) -> bool:
        """True when most records hold a literal (a log of metric lines): then finding records one by
        one costs more than walking them all. Judged on a sample; only for plain ASCII "\n" text."""
        if self._always or len(block) < DENSE_SAMPLE_BYTES:
            return False
        sample = block[:DENSE_SAMPLE_BYTES]
        hits = sum(sample.count(literal) for literal in self._by_literal)
        return hits * 3 > sample.count(b"\n") and b"\r" not in block and block.isascii()

    def _scan_dense(self, block: bytes) -> list[Hit]:
        return self._match(self._lines(block))

    def _lines(self, block: bytes) -> Iterator[tuple[int, int, str, list[int]]]:
        """The records of a dense block that hold a literal, for :meth:`_match`: walked line by line."""
        checks = [(literal.decode("ascii"), indexes) for literal, indexes in self._by_literal.items()]
        one = checks[0] if len(checks) == 1 and len(checks[0][1]) == 1 else None  # a log of one metric
        escapes = self._escapes
        lines = block.decode("ascii").split("\n")
        if lines[-1] == "":
            lines.pop()
        offset = 0
        for record, line in enumerate(lines):
            start, offset = offset, offset + len(line) + 1
            if one is not None:
                if one[0] not in line:
                    continue
                wanted = one[1]
            else:
                wanted = [index for literal, indexes in checks if literal in line for index in indexes]
                if not wanted:
                    continue
                if len(wanted) > 1:
                    wanted = sorted(set(wanted))
            if escapes and not line.isprintable():
                line = line.translate(ESCAPE_TABLE)
            yield record, start, line, wanted

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


SCAN_BLOCK_BYTES = 8 << 20


def scan_stream(stream: Any, extractor: Extractor, block_bytes: int = SCAN_BLOCK_BYTES) -> Iterable[ParsedPoint]:
    """Every point in a binary stream (a saved log), in order. Blocks are cut after a newline,
    so a record (and a "\\r\\n") never straddles two blocks."""
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
        names = [definition.name for definition in extractor.definitions]
        for record, offset, definition, value in extractor.scan(block):
            yield ParsedPoint(records_before + record + 1, offset_before + offset, names[definition], value)
        records_before += extractor.count_records(block)
        offset_before += len(block)
        if not data:
            return


# -- whole files, on every core ------------------------------------------------------------

PARALLEL_MIN_BYTES = 32 << 20
PARALLEL_CHUNK_BYTES = 32 << 20


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


def _scan_range(task: tuple[str, int, int, list[MetricDefinition], Mode]) -> tuple[list[tuple[int, int, int, float]], int, list[dict[str, Any]]]:
    path, start, end, definitions, mode = task
    extractor = Extractor(definitions, mode)
    with open(path, "rb") as handle:
        handle.seek(start)
        block = handle.read(end - start)
    hits = extractor.scan(block)
    return hits, extractor.count_records(block), [s.to_json() for s in extractor.stats]


def scan_file(path: str, extractor: Extractor, workers: int | None = None) -> Iterable[ParsedPoint]:
    """Every point of a saved log, in order, using every core for a large file.

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
            yield from scan_stream(handle, extractor)
        return
    tasks = [(path, start, end, extractor.definitions, extractor.mode)
             for start, end in _chunk_bounds(path, size, PARALLEL_CHUNK_BYTES)]
    names = [d.name for d in extractor.definitions]
    records_before = 0
    with multiprocessing.get_context("fork").Pool(cores) as pool:
        for (_path, start, *_), (hits, records, stats) in zip(tasks, pool.imap(_scan_range, tasks), strict=True):
            for record, offset, definition, value in hits:
                yield ParsedPoint(records_before + record + 1, start + offset, names[definition], value)
            records_before += records
            extractor.merge_stats(stats)


def _merge(into: DefinitionStats, other: DefinitionStats) -> None:
    into.matches += other.matches
    into.nonfinite += other.nonfinite
    into.candidates += other.candidates
    for reason, count in other.rejected.items():
        into.rejected[reason] = into.rejected.get(reason, 0) + count
    into.rejected_examples.extend(other.rejected_examples[: max(0, EXAMPLES_KEPT - len(into.rejected_examples))])
    into.unmatched_examples.extend(other.unmatched_examples[: max(0, EXAMPLES_KEPT - len(into.unmatched_examples))])
