"""A block's record breaks as bits: which record a byte lies in, and where a record starts and ends,
without an array of every break's place.

A flood of output holds a metric line in a few hundred records; numbering those records and bounding
them is all a scan needs of the rest. So the breaks are marked a bit a byte (two NumPy comparisons
and their packing, about a tenth of a pass in Python over the bytes), their counts summed a 64-bit
word at a time, and then each wanted position is answered from its word: the breaks before it
(*rank*) or the place of the k-th break (*select*).
"""

from __future__ import annotations

import numpy as np

_BITS_OF_BYTE = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little")
_SET_IN_BYTE = _BITS_OF_BYTE.sum(axis=1, dtype=np.int64)
_NTH_BIT = np.zeros((256, 8), np.int64)  # byte value, n -> the place of its n-th set bit (from 0)
for _value in range(256):
    _places = np.flatnonzero(_BITS_OF_BYTE[_value])
    _NTH_BIT[_value, :len(_places)] = _places


SLICE_BYTES = 128 << 10  # a block is marked a slice at a time (a multiple of 8: each packs into whole bytes)


def _words(data: np.ndarray, value: int, scratch: np.ndarray) -> np.ndarray:
    """Where ``data`` holds ``value``, a bit a byte (byte i is bit i % 64 of word i // 64), with a zero
    word more past the end, so that the block's end too has a word. Marked and packed a slice at a
    time in ``scratch``, so that a slice's mask is packed while it is still in the core's cache: a
    megabyte block marked at once wrote its mask out and read it back."""
    size = len(data)
    words = np.zeros(size // 64 + 1, "<u8")
    packed = words.view(np.uint8)
    for start in range(0, size, SLICE_BYTES):
        part = data[start:start + SLICE_BYTES]
        at = start // 8
        packed[at:at + (len(part) + 7) // 8] = np.packbits(np.equal(part, value, out=scratch[:len(part)]),
                                                           bitorder="little")
    return words


class Breaks:
    """The record breaks of a block: "\\n", and in a mode that splits there "\\r" and "\\r\\n" (one break,
    at its "\\r"). ``masks``: two boolean buffers to work in, each as long as the block or as
    ``SLICE_BYTES``, whichever is shorter, at least."""

    def __init__(self, data: np.ndarray, split_cr: bool, masks: tuple[np.ndarray, np.ndarray]) -> None:
        newline, carriage = masks
        self._data = data
        words = _words(data, 10, newline)
        self.crlf = False  # whether a "\r\n" is among them
        if split_cr:
            returns = _words(data, 13, carriage)
            after_return = returns << np.uint64(1)  # the byte after each "\r"
            after_return[1:] |= returns[:-1] >> np.uint64(63)
            second = words & after_return  # the "\n" of a "\r\n": no break of its own
            self.crlf = bool(second.any())
            words = (words ^ second) | returns
        self._words = words
        self._before = np.zeros(len(words) + 1, np.int64)  # breaks before each word
        np.cumsum(np.bitwise_count(words), out=self._before[1:])
        self.count = int(self._before[-1])

    def rank(self, positions: np.ndarray) -> np.ndarray:
        """The breaks before each position (from 0 to the block's size): the number of the record it
        lies in, or of the record a break there ends."""
        word = positions >> 6
        below = np.left_shift(np.uint64(1), (positions & 63).astype(np.uint64)) - np.uint64(1)
        counts: np.ndarray = self._before[word] + np.bitwise_count(self._words[word] & below)
        return counts

    def select(self, numbers: np.ndarray) -> np.ndarray:
        """Where each of these breaks (by number, from 0, each below :attr:`count`) is."""
        word = np.searchsorted(self._before, numbers, side="right") - 1
        left = numbers - self._before[word]  # set bits of the word to pass
        octets = self._words[word].view(np.uint8).reshape(-1, 8)
        through = np.cumsum(_SET_IN_BYTE[octets], axis=1)
        octet = np.count_nonzero(through <= left[:, None], axis=1)
        rows = np.arange(len(numbers))
        left = left - through[rows, octet] + _SET_IN_BYTE[octets[rows, octet]]
        places: np.ndarray = word * 64 + octet * 8 + _NTH_BIT[octets[rows, octet], left]
        return places

    def bounds(self, records: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where each of these records (by number, ascending) starts and ends (before its break; the
        block's end for a last record without one)."""
        size = len(self._data)
        ended, later = records < self.count, records > 0
        ending = records[ended]
        places = self.select(np.concatenate((ending, records[later] - 1)))  # its break, and the one before it
        ends = np.full(len(records), size, np.int64)
        ends[ended] = places[:len(ending)]
        previous = places[len(ending):]
        after = previous + 1
        if self.crlf:  # a "\r\n" break: the record starts after its "\n"
            inside = after < size
            after[inside] += (self._data[previous[inside]] == 13) & (self._data[after[inside]] == 10)
        starts = np.zeros(len(records), np.int64)
        starts[later] = after
        return starts, ends
