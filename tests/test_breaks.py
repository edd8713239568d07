"""A block's breaks as bits (``trainmon.parsing.breaks``): rank, select and bounds against the plain
reading of the same bytes, on random blocks of every shape a word boundary can make."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from trainmon.parsing import breaks as breaks_module
from trainmon.parsing.breaks import Breaks


def _plain(block: bytes, split_cr: bool) -> list[int]:
    """Where each break is (a "\\r\\n" at its "\\r"), by a regex."""
    pattern = rb"\r\n|\r|\n" if split_cr else rb"\n"
    return [match.start() for match in re.finditer(pattern, block)]


def _blocks(seed: int) -> list[bytes]:
    rng = random.Random(seed)
    shapes = [b"", b"\n", b"\r", b"\r\n", b"\n" * 64, b"\r\n" * 32, b"x" * 63 + b"\r" + b"\n", b"x" * 128]
    for _ in range(40):
        size = rng.choice([rng.randint(1, 70), rng.randint(60, 200), 64 * rng.randint(1, 4), rng.randint(500, 3000)])
        alphabet = rng.choice([b"ab\n", b"a\r\n", b"\r\n", b"aaaaaaa\n\r", b"a" * 40 + b"\n"])
        shapes.append(bytes(rng.choice(alphabet) for _ in range(size)))
    return shapes


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("split_cr", [False, True])
@pytest.mark.parametrize("slice_bytes", [64, 192, breaks_module.SLICE_BYTES])
def test_rank_select_and_bounds_read_the_breaks_as_a_plain_search_does(seed: int, split_cr: bool, slice_bytes: int,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(breaks_module, "SLICE_BYTES", slice_bytes)  # blocks marked in one slice, or in several
    for block in _blocks(seed):
        data = np.frombuffer(block, np.uint8)
        masks = np.empty(len(block), bool), np.empty(len(block), bool)
        breaks = Breaks(data, split_cr, masks)
        places = _plain(block, split_cr)
        assert breaks.count == len(places), block
        assert breaks.crlf == (split_cr and b"\r\n" in block)
        positions = np.arange(len(block) + 1)
        expected_rank = np.searchsorted(np.array(places, np.int64), positions, side="left")
        assert breaks.rank(positions).tolist() == expected_rank.tolist(), block
        assert breaks.select(np.arange(len(places))).tolist() == places, block
        records = re.split(rb"\r\n|\r|\n" if split_cr else rb"\n", block)
        if not records[-1]:
            records.pop()  # the last record ended with its break
        numbers = np.arange(len(records))
        starts, ends = breaks.bounds(numbers)
        assert [block[start:end] for start, end in zip(starts.tolist(), ends.tolist(), strict=True)] == records, block
        chosen = numbers[::3]
        assert [bound.tolist() for bound in breaks.bounds(chosen)] == [starts[::3].tolist(), ends[::3].tolist()]
