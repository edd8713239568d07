"""Which regex engine matches a definition on a record, so that no record can stall the extractor.

A job's output is input trainmon does not control, and Python's ``re`` backtracks: it is the
cheapest engine per call on the short records of a typical log, but its time grows as a power of
the record's length for some regexes (``loss=a*a*a*a*a*a*a*a*(\\d)`` takes minutes on a
65-character line) and exponentially for others (``((\\d+)+)$``). RE2 takes time linear in the
record, but costs more per call from Python and lacks lookaround, back-references, possessive
quantifiers, atomic groups and conditionals. The ``regex`` package backtracks too, but can stop a
search at a time limit. So each definition gets:

- ``re`` on records up to ``python_chars`` characters: the longest length for which the regex's
  parse tree proves that ``re`` takes at most ``STEP_BUDGET`` steps, whatever the record holds
  (:class:`Bound`), and at most ``PYTHON_MAX_CHARS``;
- RE2 on longer records when it compiles the regex, else ``regex`` with a limit of
  ``TIME_LIMIT_S`` per record; a record it stops at is counted as rejected (``TIME_LIMIT_REASON``);
- RE2 at every length when a repeated part can match in more than one way (nested repetition,
  such as ``((\\d+)+)$`` or ``(?:a?a?)*``), which has no polynomial bound; if RE2 cannot run that
  regex either, it is refused when the definitions are validated (:func:`unsafe_reason`).

A regex RE2 cannot run whose ``re`` bound is short of ``PYTHON_MAX_CHARS`` (``\\s.*\\s.*loss=(?=\\d)(\\S+)``:
57 characters) is matched on longer records under the time limit, and a log of long lines can
then cost the limit on every record, each one rejected: the definitions' warnings say so
(:func:`slow_reason`), with what to change.

Records hold no line break (every record mode cuts there). That lets a regex that starts with
``.*`` use ``re.match`` instead of ``re.search``: the same match, tried at one start instead of at
every one, which keeps SageMaker's XGBoost definitions on ``re`` for the records they match.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

try:  # RE2 is a core dependency; without it long records go to `regex` with its time limit.
    import re2 as _re2
except ImportError:  # pragma: no cover - exercised only where the wheel is missing
    _re2 = None

PYTHON_MAX_CHARS = 1024
STEP_BUDGET = 2_000_000
TIME_LIMIT_S = 0.05
TIME_LIMIT_REASON = (f"matching stopped after {TIME_LIMIT_S * 1000:g} ms "
                     "(a regex RE2 cannot run, on a record too long for Python's re)")

_c = re._constants
_parse = re._parser.parse
_REPEATS = (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT)


def compile_re2(regex: str) -> Any:
    if _re2 is None:
        return None
    options = _re2.Options()
    options.log_errors = False
    try:
        return _re2.compile(regex, options=options)
    except Exception:  # lookaround, back-references, possessive quantifiers...
        return None


class Matcher:
    """One definition's regex and the engine for each record length. Records hold no line break."""

    def __init__(self, regex: str) -> None:
        bound = Bound(regex)
        self.python_chars = bound.python_chars()
        compiled = re.compile(regex)
        self.python_search: Callable[[str], Any] = compiled.match if bound.starts_with_dot_star else compiled.search
        self.re2 = compile_re2(regex)
        if self.re2 is None and bound.nested:
            raise ValueError("nested repetition in a regex RE2 cannot run")
        self._timed = None if self.re2 is not None else _timed_regex(regex)

    def engine(self, length: int) -> str:
        """Which engine matches a record of this many characters: "re", "re2" or "regex"."""
        if length <= self.python_chars:
            return "re"
        return "regex" if self.re2 is None else "re2"

    def search(self, text: str) -> Any:
        """A match object, None, or False when the time limit stopped the search."""
        if len(text) <= self.python_chars:
            return self.python_search(text)
        if self.re2 is not None:
            return self.re2.search(text)
        try:
            return self._timed.search(text, timeout=TIME_LIMIT_S)  # type: ignore[union-attr]
        except TimeoutError:
            return False


def _timed_regex(regex: str) -> Any:
    """The ``regex`` package's compiled form, which can stop at a time limit. Imported here, by the
    few definitions that need it (RE2 cannot run them), not when trainmon starts."""
    import regex as timed

    return timed.compile(regex, timed.VERSION0)


_RE2_LACKS = {_c.ASSERT: "lookaround", _c.ASSERT_NOT: "lookaround", _c.GROUPREF: "a back-reference",
              _c.GROUPREF_EXISTS: "a conditional", _c.POSSESSIVE_REPEAT: "a possessive quantifier",
              _c.ATOMIC_GROUP: "an atomic group"}


def _lacking(items: Iterable[tuple[Any, Any]]) -> str | None:
    """The first feature of a parse tree that RE2 lacks, by name."""
    for op, arg in items:
        if op in _RE2_LACKS:
            return _RE2_LACKS[op]
        for part in _subpatterns(arg):
            found = _lacking(part.data)
            if found:
                return found
    return None


def _subpatterns(arg: Any) -> Iterator[Any]:
    """The parts of a parse tree item's argument that are trees themselves."""
    if hasattr(arg, "data"):
        yield arg
    elif isinstance(arg, (tuple, list)):
        for part in arg:
            yield from _subpatterns(part)


def slow_reason(regex: str) -> str | None:
    """Why a regex may cost the time limit on each long record (RE2 cannot run it and ``re`` is not
    bounded beyond a short length), or None."""
    if compile_re2(regex) is not None:
        return None
    chars = Bound(regex).python_chars()
    if chars < 0 or chars >= PYTHON_MAX_CHARS:
        return None
    feature = _lacking(_parse(regex).data) or "a feature RE2 lacks"
    return (f"the linear-time engine cannot run it ({feature}), and Python's re is proven fast on records of at "
            f"most {chars} characters only; each longer record is matched under a {TIME_LIMIT_S * 1000:g} ms limit, "
            f"and one it stops at is rejected. Rewrite it without {feature}, or with fewer unbounded parts "
            "such as '.*'")


def unsafe_reason(regex: str) -> str | None:
    """Why a regex cannot be run in bounded time, or None."""
    if Bound(regex).nested and compile_re2(regex) is None:
        return ("nested repetition (a repeat, an optional part or an alternation inside a repeat) could take "
                "exponential time, and the regex uses features the linear-time engine lacks (lookaround, "
                "back-references, possessive quantifiers, atomic groups); simplify one of them")
    return None


# -- character sets ---------------------------------------------------------------------------------


_ASCII = frozenset(range(128))
_LETTERS = frozenset(map(ord, string.ascii_letters))


@dataclass(frozen=True)
class CharSet:
    """A set of characters, approximated: its ASCII members exactly, the others by one flag.

    Each set is used one of two ways. An *over*-approximation holds every character that may be in
    the real set, and ``other`` says that non-ASCII ones may be; an *under*-approximation holds only
    characters that are in it, and ``other`` says that every non-ASCII one is. The method names say
    which they take, so that a bound built from them errs only towards more steps.
    """

    ascii: frozenset[int]
    other: bool

    def __or__(self, that: CharSet) -> CharSet:
        return CharSet(self.ascii | that.ascii, self.other or that.other)

    def complement(self) -> CharSet:
        """The complement, an under-approximation of an over-approximation's and the other way round."""
        return CharSet(_ASCII - self.ascii, not self.other)

    def minus(self, under: CharSet) -> CharSet:
        """Over-approximation less an under-approximation: an over-approximation."""
        return CharSet(self.ascii - under.ascii, self.other and not under.other)

    def overlaps(self, over: CharSet) -> bool:
        """Two over-approximations: could a character be in both?"""
        return bool(self.ascii & over.ascii) or (self.other and over.other)

    def within(self, under: CharSet) -> bool:
        """An over-approximation inside an under-approximation: is every character surely in both?"""
        return self.ascii <= under.ascii and (under.other or not self.other)


NOTHING = CharSet(frozenset(), False)
EVERYTHING = CharSet(_ASCII, True)
_NEWLINE = CharSet(frozenset({10}), False)
_NOT_NEWLINE = CharSet(_ASCII - {10}, True)

# ASCII members of \d, \s and \w; with re.ASCII they have no others, without it they have some.
_CATEGORY_CHARS = {
    _c.CATEGORY_DIGIT: string.digits,
    _c.CATEGORY_SPACE: " \t\n\r\f\v\x1c\x1d\x1e\x1f",
    _c.CATEGORY_WORD: string.ascii_letters + string.digits + "_",
}
_ASCII_SPACE = " \t\n\r\f\v"
_NEGATED_CATEGORY = {
    _c.CATEGORY_NOT_DIGIT: _c.CATEGORY_DIGIT,
    _c.CATEGORY_NOT_SPACE: _c.CATEGORY_SPACE,
    _c.CATEGORY_NOT_WORD: _c.CATEGORY_WORD,
}

Approximation = tuple[CharSet, CharSet]  # (over, under)


def _category(code: Any, ascii_only: bool) -> Approximation:
    if code in _NEGATED_CATEGORY:
        over, under = _category(_NEGATED_CATEGORY[code], ascii_only)
        return under.complement(), over.complement()
    chars = _ASCII_SPACE if ascii_only and code is _c.CATEGORY_SPACE else _CATEGORY_CHARS[code]
    members = frozenset(map(ord, chars))
    return CharSet(members, not ascii_only), CharSet(members, False)


def _member(op: Any, arg: Any, flags: int) -> Approximation:
    """One member of a character class: a character, a range or a category."""
    if op is _c.LITERAL:
        low = high = arg
    elif op is _c.RANGE:
        low, high = arg
    else:
        return _category(arg, bool(flags & re.ASCII))
    ascii = frozenset(range(low, min(high, 127) + 1))
    return CharSet(ascii, high >= 128), CharSet(ascii, low <= 128 and high >= 0x10FFFF)


def _case_folded(over: CharSet) -> CharSet:
    """What an over-approximation can match under IGNORECASE: both cases, and the few non-ASCII
    characters that fold to ASCII letters (and back), such as KELVIN SIGN for k."""
    letters = over.ascii & _LETTERS
    extra = frozenset(ord(chr(c).swapcase()) for c in letters) | (_LETTERS if over.other else frozenset())
    return CharSet(over.ascii | extra, over.other or bool(letters))


ONE_CHARACTER = (_c.LITERAL, _c.NOT_LITERAL, _c.ANY, _c.IN)


def single_character(op: Any, arg: Any, flags: int) -> Approximation:
    """(over, under) for an item that matches exactly one character (an op in ``ONE_CHARACTER``)."""
    if op is _c.ANY:
        chars = EVERYTHING if flags & re.DOTALL else _NOT_NEWLINE
        return chars, chars
    if op is _c.IN:
        members: Sequence[tuple[Any, Any]] = [(o, a) for o, a in arg if o is not _c.NEGATE]
        negate = len(members) < len(arg)
    else:
        members = [(_c.LITERAL, arg)]
        negate = op is _c.NOT_LITERAL
    over, under = NOTHING, NOTHING
    for member_op, member_arg in members:
        member_over, member_under = _member(member_op, member_arg, flags)
        over, under = over | member_over, under | member_under
    if flags & re.IGNORECASE:
        over = _case_folded(over)
    return (under.complement(), over.complement()) if negate else (over, under)


# -- the bound on backtracking ----------------------------------------------------------------------


class _NestedRepetition(Exception):
    """A repeated part can match in more than one way: backtracking can take exponential time."""


class _Rest(NamedTuple):
    """The rest of a regex, from some point to its end, as one attempt to match it there.

    ``failing`` and ``succeeding`` bound the steps of an attempt that fails and of one that
    succeeds (which ends the search, so happens once). ``cheap`` bounds an attempt when the next
    character is outside ``first`` (an over-approximation); a next character in ``sure`` (an
    under-approximation) makes the attempt succeed, and ``always`` says it succeeds anywhere.
    """

    failing: int
    succeeding: int
    cheap: int
    first: CharSet
    sure: CharSet
    always: bool


_ACCEPT = _Rest(0, 0, 0, EVERYTHING, EVERYTHING, True)
_STOP = _Rest(0, 0, 0, NOTHING, NOTHING, False)  # the end of a repeated body on its own


class _Unit(NamedTuple):
    """A repeated body that matches in one way at most: its steps, its shortest width, the
    characters an iteration can start with (over) and those that make one iteration succeed (under)."""

    steps: int
    width: int
    first: CharSet
    sure: CharSet


class Bound:
    """An upper bound on the steps Python's ``re`` takes to search a record of n characters.

    ``re`` tries each start position in turn and, at each, backtracks depth first: an item with
    several ways to match (a repeat, an alternation) tries the rest of the regex after each way
    until one succeeds. Folding the parse tree from its end, each point gets a :class:`_Rest`: the
    steps of one attempt from there, failing or succeeding. A repeat of a one-way body multiplies
    the rest's steps by the number of lengths it can give back, min(max repeat, n), except where the
    rest fails at once or surely succeeds after the characters the repeat gives back (``\\S+``
    before a space or at the end, ``\\d+`` before ``;``, ``.*?`` before ``;`` then the end), where it
    adds them instead. Alternations add their branches; lookarounds, back-references and atomic
    groups cost their own bound or n and end what the next character can tell. Character sets are
    approximated towards more steps: non-ASCII characters of ``\\d``, ``\\w`` and ``\\s``,
    IGNORECASE's foldings. A start position where a literal prefix (``loss=``) does not match costs
    its length; at most n / period(prefix) + 1 positions hold it. A regex anchored by ``^``, or
    starting with ``.*`` (run with ``re.match``), is tried at one position.
    """

    def __init__(self, regex: str) -> None:
        parsed = _parse(regex)
        self._items = parsed.data
        self._flags = parsed.state.flags
        self._prefix = _literal_prefix(self._items, self._flags)
        self._anchored = _anchored(self._items, self._flags)
        self.starts_with_dot_star = _starts_with_dot_star(self._items)
        self._chars: dict[tuple[Any, Any, int], Approximation] = {}  # the same at every n
        try:
            self._steps_at_most_chars: int | None = self.steps(PYTHON_MAX_CHARS)
        except _NestedRepetition:
            self._steps_at_most_chars = None
        self.nested = self._steps_at_most_chars is None

    def python_chars(self) -> int:
        """The longest record ``re`` may match within ``STEP_BUDGET`` steps, at most ``PYTHON_MAX_CHARS``;
        -1 for none (nested repetition, or a regex so large that not even an empty record fits)."""
        if self._steps_at_most_chars is None:
            return -1
        if self._steps_at_most_chars <= STEP_BUDGET:
            return PYTHON_MAX_CHARS
        low, high = -1, PYTHON_MAX_CHARS - 1  # the answer is in [low, high]; steps(n) grows with n
        while low < high:
            middle = (low + high + 1) // 2
            if self.steps(middle) <= STEP_BUDGET:
                low = middle
            else:
                high = middle - 1
        return low

    def steps(self, n: int) -> int:
        """The bound for a record of n characters (raises _NestedRepetition when there is none)."""
        rest = _Fold(n, self._chars).sequence(self._items, _ACCEPT, self._flags)
        if self.starts_with_dot_star:
            return rest.failing + rest.succeeding
        if self._anchored:
            starts = 1
        elif self._prefix:
            starts = max(n - len(self._prefix), 0) // _period(self._prefix) + 1
        else:
            starts = n + 1
        return (n + 1) * (len(self._prefix) + 1) + starts * rest.failing + rest.succeeding


class _Fold:
    """One fold of a parse tree, from its end, into the :class:`_Rest` of each point, for n characters."""

    def __init__(self, n: int, chars: dict[tuple[Any, Any, int], Approximation]) -> None:
        self.n = n
        self._chars = chars

    def single_character(self, op: Any, arg: Any, flags: int) -> Approximation:
        key = (op, id(arg) if op is _c.IN else arg, flags)  # a class's list lives as long as the parse tree
        if key not in self._chars:
            self._chars[key] = single_character(op, arg, flags)
        return self._chars[key]

    def sequence(self, items: Iterable[tuple[Any, Any]], rest: _Rest, flags: int) -> _Rest:
        for op, arg in reversed(list(items)):
            rest = self.item(op, arg, rest, flags)
        return rest

    def alone(self, items: Any, flags: int) -> int:
        """Steps of one attempt of a part matched on its own (a lookaround's or an atomic group's body)."""
        rest = self.sequence(items, _ACCEPT, flags)
        return max(rest.failing, rest.succeeding)

    def item(self, op: Any, arg: Any, rest: _Rest, flags: int) -> _Rest:
        if op in ONE_CHARACTER:
            over, under = self.single_character(op, arg, flags)
            return _Rest(rest.failing + 1, rest.succeeding + 1, 1, over, under if rest.always else NOTHING, False)
        if op is _c.SUBPATTERN:
            _group, add_flags, del_flags, body = arg
            return self.sequence(body, rest, (flags | add_flags) & ~del_flags)
        if op in _REPEATS:
            low, high, body = arg
            return self.repeat(op, low, high, body, rest, flags)
        if op is _c.BRANCH:
            return _either([self.sequence(branch, rest, flags) for branch in arg[1]])
        if op is _c.AT:
            return _anchor(arg, rest)
        if op is _c.GROUPREF_EXISTS:
            _group, yes, no = arg
            return _either_by_condition(self.sequence(yes, rest, flags), self.sequence(no or [], rest, flags))
        if op is _c.GROUPREF:
            return _opaque(self.n + 1, rest)
        if op in (_c.ASSERT, _c.ASSERT_NOT):
            return _opaque(self.alone(arg[1], flags) + 1, rest)
        if op is _c.ATOMIC_GROUP:
            return _opaque(self.alone(arg, flags), rest)
        raise _NestedRepetition(f"no bound for {op}")  # nothing else is parsed; stay safe if it were

    def repeat(self, op: Any, low: int, high: int, body: Any, rest: _Rest, flags: int) -> _Rest:
        if not _one_way(body):
            if high > 1:
                raise _NestedRepetition("a repeated part can match in more than one way")
            if op is _c.POSSESSIVE_REPEAT:
                return _opaque(self.alone([(_c.MAX_REPEAT, (low, high, body))], flags), rest)
            once = self.sequence(body, rest, flags)
            return rest if high == 0 else once if low == 1 else _either([once, rest])
        return self.repeat_unit(op, low, high, self.unit(body, flags), rest)

    def unit(self, body: Any, flags: int) -> _Unit:
        alone = self.sequence(body, _STOP, flags)
        width = body.getwidth()[0]
        return _Unit(max(alone.failing, alone.succeeding), width, alone.first if width else EVERYTHING,
                    self.sequence(body, _ACCEPT, flags).sure)

    def repeat_unit(self, op: Any, low: int, high: int, unit: _Unit, rest: _Rest) -> _Rest:
        most = min(high, self.n // unit.width if unit.width else low + self.n + 1)
        least = min(low, most)

        def counted(iterations: int) -> int:  # the iterations and the one that fails
            return (iterations + 1) * unit.steps

        if op is _c.POSSESSIVE_REPEAT:  # no lengths given back
            failing, succeeding = counted(most) + rest.failing, counted(most) + rest.succeeding
        elif rest.always:  # fails only short of `low`
            failing, succeeding = counted(least), counted(most) + rest.succeeding
        elif unit.first.within(rest.sure):  # giving back one iteration succeeds
            failing = counted(least) + rest.failing
            succeeding = counted(most) + rest.failing + rest.succeeding
        elif not unit.first.overlaps(rest.first.minus(rest.sure)):  # every length given back fails at once
            failing = counted(most) + rest.failing + (most - least) * rest.cheap
            succeeding = failing + rest.succeeding
        else:  # the rest is tried after every length
            failing = counted(most) + (most - least + 1) * rest.failing
            succeeding = failing + rest.succeeding
        always = low == 0 and rest.always
        if always:
            sure = EVERYTHING
        elif low == 0 and op is not _c.POSSESSIVE_REPEAT:
            sure = rest.sure
        elif low == 1 and rest.always:
            sure = unit.sure
        else:
            sure = NOTHING
        first = unit.first | rest.first if low == 0 else unit.first
        cheap = unit.steps + (rest.cheap if low == 0 else 0)
        return _Rest(failing, succeeding, cheap, first, sure, always)


def _one_way(items: Iterable[tuple[Any, Any]]) -> bool:
    """True when a part can match in one way at most at a given position (no choices inside)."""
    for op, arg in items:
        if op is _c.BRANCH:
            return False
        if op is _c.SUBPATTERN and not _one_way(arg[3]):
            return False
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT) and not (arg[0] == arg[1] and _one_way(arg[2])):
            return False
        if op is _c.GROUPREF_EXISTS and not (_one_way(arg[1]) and _one_way(arg[2] or [])):
            return False
    return True  # characters, anchors, back-references, lookarounds, atomic groups, possessive repeats


def _either(rests: Sequence[_Rest]) -> _Rest:
    """Alternatives tried in turn: every one can fail; a next character sure for any one succeeds."""
    count = len(rests)
    first, sure = NOTHING, NOTHING
    for rest in rests:
        first, sure = first | rest.first, sure | rest.sure
    return _Rest(sum(r.failing for r in rests) + count, sum(max(r.failing, r.succeeding) for r in rests) + count,
                sum(r.cheap for r in rests) + count, first, sure, any(r.always for r in rests))


def _either_by_condition(yes: _Rest, no: _Rest) -> _Rest:
    """A conditional: one of two rests, chosen by whether a group matched, with no backtracking between."""
    return _Rest(max(yes.failing, no.failing) + 1, max(yes.succeeding, no.succeeding) + 1,
                max(yes.cheap, no.cheap) + 1, yes.first | no.first, NOTHING, False)


def _anchor(code: Any, rest: _Rest) -> _Rest:
    if code is _c.AT_END:  # `$`: only a line break can follow
        return _Rest(rest.failing + 1, rest.succeeding + 1, 1, _NEWLINE, NOTHING, False)
    if code is _c.AT_END_STRING:  # `\Z`: nothing can follow
        return _Rest(rest.failing + 1, rest.succeeding + 1, 1, NOTHING, NOTHING, False)
    return _Rest(rest.failing + 1, rest.succeeding + 1, rest.cheap + 1, rest.first, NOTHING, False)


def _opaque(steps: int, rest: _Rest) -> _Rest:
    """A part of one way that takes up to ``steps`` and after which the next character tells nothing."""
    return _Rest(steps + rest.failing, steps + rest.succeeding, steps + rest.failing, EVERYTHING, NOTHING, False)


def _starts_with_dot_star(items: Sequence[tuple[Any, Any]]) -> bool:
    if not items or items[0][0] not in (_c.MAX_REPEAT, _c.MIN_REPEAT):
        return False
    low, high, body = items[0][1]
    return low == 0 and high is _c.MAXREPEAT and list(body) == [(_c.ANY, None)]


def _anchored(items: Sequence[tuple[Any, Any]], flags: int) -> bool:
    """True when the regex can only match at the start of the record."""
    if not items or items[0][0] is not _c.AT:
        return False
    code = items[0][1]
    return code is _c.AT_BEGINNING_STRING or (code is _c.AT_BEGINNING and not flags & re.MULTILINE)


def _literal_prefix(items: Sequence[tuple[Any, Any]], flags: int) -> str:
    """The literal characters every match starts with (none under IGNORECASE)."""
    if flags & re.IGNORECASE:
        return ""
    prefix = []
    for op, arg in items:
        if op is not _c.LITERAL:
            break
        prefix.append(chr(arg))
    return "".join(prefix)


def _period(text: str) -> int:
    """The smallest shift at which the text overlaps itself: two occurrences start at least this far apart."""
    return next(shift for shift in range(1, len(text) + 1) if text.startswith(text[shift:]))
