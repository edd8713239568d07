"""Engine choice and the bound on backtracking: docs/metric-definitions.md, "Bounded time".

Three kinds of test: golden tables of what the analysis decides (engine by length, growth of the
bound), soundness of its character-set approximations against Python's own matching, and
randomised pathological regexes and records run through the real extractor, whose time per record
must stay bounded where the bug this guards against took minutes.
"""

from __future__ import annotations

import math
import re
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainmon.errors import ValidationException
from trainmon.parsing.definitions import validate_definitions
from trainmon.parsing.engines import (
    ONE_CHARACTER,
    PYTHON_MAX_CHARS,
    STEP_BUDGET,
    Bound,
    CharSet,
    Matcher,
    single_character,
)
from trainmon.parsing.extract import Extractor

XGB = r".*\[[0-9]+\].*#011validation-rmse:([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?).*"


@pytest.mark.parametrize(
    ("regex", "length", "engine"),
    [
        (r"loss=(\S+)", PYTHON_MAX_CHARS, "re"),           # linear: re up to the cap
        (r"loss=(\S+)", PYTHON_MAX_CHARS + 1, "re2"),       # past the cap: RE2
        (r"Train_error=(.*?);", PYTHON_MAX_CHARS, "re"),    # .*? before ';' then the end cannot multiply
        (r"epoch=(\d+) loss=(\S+)", PYTHON_MAX_CHARS, "re"),
        (r"^(\d+)%", PYTHON_MAX_CHARS, "re"),               # anchored: one start
        (r"(?i)loss=(\S+)", PYTHON_MAX_CHARS, "re"),
        (XGB, 169, "re"),                                   # two .* that multiply, run with re.match
        (XGB, 170, "re2"),
        (r"a*a*(\d)", 98, "re"),                            # cubic
        (r"a*a*(\d)", 99, "re2"),
        (r"loss=a*a*a*a*a*a*a*a*(\d)", 4, "re"),            # the bug: a power of 8
        (r"loss=a*a*a*a*a*a*a*a*(\d)", 65, "re2"),
        (r"((\d+)+)$", 0, "re2"),                           # nested repetition: RE2 at every length
        (r"(?:a?a?)*(b)", 10, "re2"),                       # an optional part inside a repeat is nested too
        (r"(?<=loss=)(\d+)x", 997, "re"),                   # RE2 cannot run it ...
        (r"(?<=loss=)(\d+)x", 998, "regex"),                # ... so longer records get the time limit
        (r"(?<=v)a*a*a*(\d)", 29, "re"),
        (r"(?<=v)a*a*a*(\d)", 5000, "regex"),
    ],
)
def test_engine_by_definition_and_record_length(regex: str, length: int, engine: str) -> None:
    assert Matcher(regex).engine(length) == engine


@pytest.mark.parametrize(
    ("regex", "degree"),
    [
        (r"loss=(\S+)", 1),            # \S+ at the end surely succeeds once it has a character
        (r"^(\d+)%", 1),
        (r"x(\d+);", 2),               # \d+ before ';' gives back lengths that fail at once: starts x length
        (r"(a|b)*;", 2),               # the same: a one-character alternation is a character set
        (r"Train_error=(.*?);", 2),
        (XGB, 2),                      # two multiplying .*, one start (re.match)
        (r"(.*),(.*);", 3),
        (r"a*a*(\d)", 3),              # starts x two overlapping repeats
        (r"a*a*a*(\d)", 4),
        (r"(\w+)\1", 3),               # a back-reference compares up to n characters
    ],
)
def test_bound_grows_as_the_power_of_n_its_ambiguous_repeats_make(regex: str, degree: int) -> None:
    bound = Bound(regex)
    assert round(math.log2(bound.steps(4000) / bound.steps(2000))) == degree


@given(
    regex=st.sampled_from([XGB, r".*(\d)", r".*?x(\d+)", r".*(a|ab)(b)?", r".*\[(\d)\]", r".*?(?<=a)(b)\1?", r"(?s).*(1)"]),
    text=st.text(alphabet="ab1x[]#:. \t\ré", max_size=60),
)
@settings(max_examples=200, database=None, deadline=None)
def test_a_leading_dot_star_tried_at_the_first_start_finds_what_search_finds(regex: str, text: str) -> None:
    matcher = Matcher(regex)  # records hold no line break, so neither does the text
    found, expected = matcher.python_search(text), re.search(regex, text)
    assert matcher.python_search.__name__ == "match"
    assert (found and (found.span(), found.groups())) == (expected and (expected.span(), expected.groups()))


def test_the_python_limit_fits_the_budget_and_the_next_length_does_not() -> None:
    bound = Bound(r"a*a*(\d)")
    limit = bound.python_chars()
    assert bound.steps(limit) <= STEP_BUDGET < bound.steps(limit + 1)


def test_nested_repetition_has_no_bound_and_one_way_bodies_have_one() -> None:
    assert Bound(r"((\d+)+)$").nested
    assert Bound(r"(a|aa)+x").nested
    assert Bound(r"(?:a?a?)*b").nested
    assert not Bound(r"(?:ab)+x").nested          # one way to match each iteration
    assert not Bound(r"(?:\d{2}:)+x").nested      # a fixed count is one way
    assert not Bound(r"(?:(?=a+)b)+x").nested     # a lookahead is atomic
    assert not Bound(r"(?:a|ab)?c").nested        # an alternation repeated at most once is a choice of two


# -- character sets: the approximations hold what Python's re matches --------------------------------


def _may_hold(over: CharSet, char: str) -> bool:
    code = ord(char)
    return code in over.ascii if code < 128 else over.other


def _surely_holds(under: CharSet, char: str) -> bool:
    code = ord(char)
    return code in under.ascii if code < 128 else under.other


# ASCII, Latin-1 and beyond, the four characters that case-fold to ASCII letters, unicode digits and spaces
_PROBES = [chr(c) for c in [*range(0x180), 0x212A, 0x0663, 0x2003, 0x3000, 0x1F600, 0x10FFFF]]


@given(
    char_class=st.sampled_from([
        "a", "K", "=", "é", ".", r"\d", r"\D", r"\s", r"\S", r"\w", r"\W", "[a-f]", "[^a-f]", r"[\d.]",
        r"[^\s=]", "[^K]", r"[\x00-\U0010ffff]", r"[\x7f-\xff]", "[^é]", "[s-z]",
    ]),
    flags=st.sampled_from(["", "(?i)", "(?a)", "(?s)", "(?ia)"]),
)
@settings(max_examples=60, database=None, deadline=None)
def test_character_set_approximations_are_sound(char_class: str, flags: str) -> None:
    parsed = re._parser.parse(flags + char_class)  # type: ignore[attr-defined]
    ((op, arg),) = parsed.data
    assert op in ONE_CHARACTER
    over, under = single_character(op, arg, parsed.state.flags)
    compiled = re.compile(flags + char_class)
    for char in _PROBES:
        matched = compiled.fullmatch(char) is not None
        assert not matched or _may_hold(over, char), (char_class, flags, char)
        assert matched or not _surely_holds(under, char), (char_class, flags, char)


# -- pathological regexes and records through the real extractor -------------------------------------

_ATOMS = ["a", "b", "[ab]", ".", r"\d", r"\w", r"\s", r"\S", "(?:a|ab)", "(a|a)", "(?:ab)", "[^;]"]
_QUANTIFIERS = ["", "*", "+", "?", "*?", "+?", "{1,3}", "{2,}", "*+"]
_ZERO_WIDTH = ["(?<=a)", "(?<!b)", "(?=a)", "(?!b)", "(?=.*a)", r"\b", "^", "$"]


@st.composite
def _pathological_regexes(draw: st.DrawFn, depth: int = 2) -> str:
    """Runs of overlapping repeats, repeated groups and alternations, lookarounds, back-references."""
    parts = []
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["atom", "atom", "atom", "group", "branch", "zero", "backref"]))
        if kind == "atom":
            parts.append(draw(st.sampled_from(_ATOMS)) + draw(st.sampled_from(_QUANTIFIERS)))
        elif kind == "group" and depth:
            parts.append("(?:" + draw(_pathological_regexes(depth - 1)) + ")" + draw(st.sampled_from(_QUANTIFIERS)))
        elif kind == "branch" and depth:
            parts.append("(?:" + draw(_pathological_regexes(depth - 1)) + "|" + draw(_pathological_regexes(depth - 1)) + ")")
        elif kind == "zero":
            parts.append(draw(st.sampled_from(_ZERO_WIDTH)))
        elif kind == "backref":
            parts.append(_BACKREFERENCE)
    return "".join(parts)


_BACKREFERENCE = "(?P<@>[ab]+)(?P=@)"  # a group and a reference to it; _named_groups names each pair


def _named_groups(regex: str) -> str:
    pieces = regex.split(_BACKREFERENCE)
    pairs = [f"(?P<g{i}>[ab]+)(?P=g{i})" for i in range(len(pieces) - 1)]
    return "".join(piece + pair for piece, pair in zip(pieces, [*pairs, ""], strict=True))


@st.composite
def _definition_regexes(draw: st.DrawFn) -> str:
    body = _named_groups(draw(_pathological_regexes()))
    return draw(st.sampled_from(["", "loss=", ".*", "^"])) + "(" + body + ")" + draw(st.sampled_from(["", r"(\d)", "x", "$", ";"]))


@st.composite
def _adversarial_records(draw: st.DrawFn, limit: int) -> list[bytes]:
    """Records of one repeated motif that almost matches, at the lengths where engines change."""
    records = []
    for _ in range(draw(st.integers(1, 3))):
        motif = draw(st.text(alphabet="aab1 ;=x", min_size=1, max_size=3))
        length = draw(st.sampled_from([max(limit, 1), limit + 1, 65, PYTHON_MAX_CHARS, 3000]))
        head = draw(st.sampled_from(["", "loss=", "b"]))
        tail = draw(st.sampled_from(["", "!", "7", "\u0663"]))
        records.append((head + motif * length)[:length].encode() + tail.encode())
    return records


@given(regex=_definition_regexes(), data=st.data())
@settings(max_examples=40, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_pathological_regexes_on_adversarial_records_are_matched_in_bounded_time(regex: str, data: st.DataObject) -> None:
    try:
        definitions = validate_definitions([{"Name": "m", "Regex": regex}])
    except ValidationException as refused:  # no engine can bound it: refused up front, never run
        assert "nested repetition" in refused.message
        return
    extractor = Extractor(definitions)
    for record in data.draw(_adversarial_records(extractor._matchers[0].python_chars)):
        start = time.thread_time()  # this thread's CPU time: what the match costs, whatever else the machine runs
        extractor.scan(record + b"\n")
        spent = time.thread_time() - start
        assert spent < 3.0, (regex, record[:80], len(record), spent)  # the unbounded case takes minutes
