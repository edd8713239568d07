"""Which regex engine runs a definition, so that no regex can stall the extractor.

Python's ``re`` backtracks: fast on the short records of a typical log, but quadratic on long
records for patterns like ``.*x.*y`` and exponential, even on short ones, for nested repetition
like ``((\\d+)+)$``. RE2 runs in linear time but costs more per call from Python and lacks
lookaround and back-references. So:

- records up to ``SHORT_RECORD_CHARS`` go to ``re``, longer ones to RE2;
- a regex with nested repetition goes to RE2 whatever the length;
- a regex RE2 cannot compile is matched by ``re`` on records up to ``BACKTRACKING_LIMIT_CHARS``
  (longer candidates are counted as rejected, with that reason); with nested repetition too it
  is refused when the definitions are validated.
"""

from __future__ import annotations

import re
from typing import Any

try:  # RE2 is a core dependency; without it long records use the backtracking limit.
    import re2 as _re2
except ImportError:  # pragma: no cover - exercised only where the wheel is missing
    _re2 = None

SHORT_RECORD_CHARS = 1024
BACKTRACKING_LIMIT_CHARS = 4096

_constants = re._constants  # type: ignore[attr-defined]
_REPEATS = {_constants.MAX_REPEAT, _constants.MIN_REPEAT, getattr(_constants, "POSSESSIVE_REPEAT", None)}


def compile_re2(regex: str) -> Any:
    if _re2 is None:
        return None
    options = _re2.Options()
    options.log_errors = False
    try:
        return _re2.compile(regex, options=options)
    except Exception:  # lookaround, back-references, possessive quantifiers...
        return None


def nested_repetition(regex: str) -> bool:
    """True when a repeated part itself holds a repeat or an alternation (backtracking can explode)."""

    def walk(items: Any, inside_repeat: bool) -> bool:
        for op, arg in items:
            if op in _REPEATS:
                low, high, body = arg
                repeats = high > 1
                if inside_repeat and repeats:
                    return True
                if walk(body, inside_repeat or repeats):
                    return True
            elif op is _constants.BRANCH:
                if inside_repeat:
                    return True
                if any(walk(branch, inside_repeat) for branch in arg[1]):
                    return True
            elif op is _constants.SUBPATTERN:
                if walk(arg[3], inside_repeat):
                    return True
            elif op in (_constants.ASSERT, _constants.ASSERT_NOT):
                if walk(arg[1], inside_repeat):
                    return True
        return False

    return walk(re._parser.parse(regex), False)  # type: ignore[attr-defined]


class Matcher:
    """One regex and the engine(s) that run it."""

    def __init__(self, regex: str) -> None:
        self.python = re.compile(regex)
        self.re2 = compile_re2(regex)
        risky = nested_repetition(regex)
        if risky and self.re2 is None:
            raise ValueError("nested repetition in a regex RE2 cannot run")
        self.short_search = self.re2.search if risky else self.python.search

    def search(self, text: str) -> Any:
        """A match object, None, or False when the record is too long for a backtracking-only regex."""
        if len(text) <= SHORT_RECORD_CHARS:
            return self.short_search(text)
        if self.re2 is not None:
            return self.re2.search(text)
        if len(text) <= BACKTRACKING_LIMIT_CHARS:
            return self.python.search(text)
        return False


def unsafe_reason(regex: str) -> str | None:
    """Why a regex cannot be run in bounded time, or None."""
    if nested_repetition(regex) and compile_re2(regex) is None:
        return ("nested repetition (a repeat inside a repeat) could take exponential time, and the regex uses "
                "features the linear-time engine lacks (lookaround or back-references); simplify one of them")
    return None
