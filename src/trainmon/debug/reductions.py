"""A tensor's reductions with numpy: what the hook records instead of the tensor.

Every reduction is over every element, in float64, as numpy computes it: a NaN anywhere makes the
mean, the norms, min and max NaN (the counts say how many there were), and an empty array has a
size of 0 and no reductions. The weights' update is the L2 norm of the difference from the
copy kept at the previous step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Reduced:
    """A tensor's reductions, ready for a line of the tensor file."""

    size: int
    reductions: tuple[float | None, float | None, float | None, float | None, float | None]  # mean, mean |x|, L2, min, max
    nan: int
    inf: int
    zero_fraction: float | None
    update_l2: float | None = None


_NONE = (None, None, None, None, None)


def as_array(value: Any) -> np.ndarray[Any, Any]:
    """``value`` (a numpy array, a list, anything array-like) as a flat float64 array; TypeError
    for what holds no real numbers."""
    array = np.asarray(value)
    if array.dtype.kind not in "biuf":
        raise TypeError(f"an array of real numbers is needed, not one of {array.dtype}")
    return array.astype(np.float64, copy=False).reshape(-1)


def reduce(value: Any, previous: np.ndarray[Any, Any] | None = None) -> Reduced:
    """The reductions of ``value``; with ``previous`` (the same tensor one step earlier, from
    :func:`as_array`), the norm of the update too."""
    array = as_array(value)
    size = int(array.size)
    if size == 0:
        return Reduced(0, _NONE, 0, 0, None)
    with np.errstate(all="ignore"):
        squares = float(np.dot(array, array))
        nan = inf = 0
        if not math.isfinite(squares):  # finite squares: no NaN nor infinity (the usual case: two passes saved)
            nan = int(np.count_nonzero(np.isnan(array)))
            inf = int(np.count_nonzero(np.isinf(array)))
        zero_fraction = (size - int(np.count_nonzero(array))) / size
        mean = float(np.add.reduce(array)) / size
        mean_abs = float(np.add.reduce(np.abs(array))) / size
        l2 = math.sqrt(squares) if not math.isnan(squares) else math.nan
        update = None
        if previous is not None and previous.shape == array.shape:
            difference = array - previous
            update = float(np.sqrt(np.dot(difference, difference)))
        return Reduced(size, (mean, mean_abs, l2, float(array.min()), float(array.max())), nan, inf, zero_fraction,
                       update)


REUSES_COPIES = True
"""A weight's copy is kept and written over at the next step before a saved one, not made anew:
allocating and freeing a copy of every weight once a save_interval can push the training's own
temporaries to fresh pages (glibc's malloc trims and regrows its heap), which costs more than the
copy."""


def snapshot(value: Any, into: np.ndarray[Any, Any] | None = None) -> np.ndarray[Any, Any]:
    """A copy of ``value`` to compute the next step's update from (in ``into`` when it fits)."""
    array = as_array(value)
    if isinstance(into, np.ndarray) and into.shape == array.shape:
        np.copyto(into, array)
        return into
    return np.array(array, copy=True)
