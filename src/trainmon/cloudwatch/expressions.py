"""CloudWatch metric math for GetMetricData: a lark grammar, its syntax tree, an evaluator (pure).

Operators, loosest first: ``+ -``, ``* /`` (both left-associative), unary ``-`` and ``+``, then
``^`` (right-associative and tighter than unary minus, so ``-2^2`` is -4). Atoms: numbers
(``2``, ``.5``, ``1e-36``), query Ids (``m1``), strings (``"errors"``), function calls
(``SUM(m1)``), bare keywords (``REPEAT``), arrays (``[m1, m2]``) and parentheses.

A value is a scalar (a float, NaN standing for "no value"), one :class:`Series`, or an array
(a list) of series. Arithmetic between two series keeps the timestamps both have; a point whose
result is not a finite number (a division by zero, an overflow) is dropped.

The parser is LALR with the tree built while parsing, and evaluation runs over the tree in
postfix order, so neither recurses: the deepest expression 2,048 characters allow is fine.
"""

from __future__ import annotations

import bisect
import functools
import math
import operator
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from graphlib import CycleError, TopologicalSorter
from typing import TYPE_CHECKING, NoReturn, cast

from ..errors import InvalidParameterValue

if TYPE_CHECKING:  # lark is imported when the first expression is parsed: the CLI starts without it
    from lark import Lark, Token
    from lark.exceptions import UnexpectedInput

GRAMMAR = r"""
?start: sum
?sum: product
    | sum PLUS product -> binary
    | sum MINUS product -> binary
?product: unary
    | product TIMES unary -> binary
    | product DIVIDE unary -> binary
?unary: power
    | MINUS unary -> negate
    | PLUS unary -> unary_plus
?power: atom
    | atom POWER unary -> binary
?atom: NUMBER -> number
    | ID -> ref
    | STRING -> text
    | FUNC LPAR [sum (COMMA sum)*] RPAR -> call
    | FUNC -> keyword
    | LSQB sum (COMMA sum)* RSQB -> array
    | LPAR sum RPAR -> group

PLUS: "+"
MINUS: "-"
TIMES: "*"
DIVIDE: "/"
POWER: "^"
LPAR: "("
RPAR: ")"
LSQB: "["
RSQB: "]"
COMMA: ","
ID: /[a-z][A-Za-z0-9_]*/
FUNC: /[A-Z][A-Z0-9_]*/
NUMBER: /(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?/
STRING: /"[^"]*"|'[^']*'/
%ignore /\s+/
"""

# -- the syntax tree -------------------------------------------------------------------------
# Every node records the 1-based column (character position in the expression) it starts at.


@dataclass(frozen=True, slots=True)
class Number:
    value: float
    column: int


@dataclass(frozen=True, slots=True)
class Ref:
    name: str
    column: int


@dataclass(frozen=True, slots=True)
class Text:
    value: str
    column: int


@dataclass(frozen=True, slots=True)
class Keyword:
    name: str
    column: int


@dataclass(frozen=True, slots=True)
class Call:
    name: str
    args: tuple[Node, ...]
    column: int


@dataclass(frozen=True, slots=True)
class Array:
    items: tuple[Node, ...]
    column: int


@dataclass(frozen=True, slots=True)
class Binary:
    op: str
    left: Node
    right: Node
    column: int  # the operator's


@dataclass(frozen=True, slots=True)
class Negate:
    operand: Node
    column: int


Node = Number | Ref | Text | Keyword | Call | Array | Binary | Negate


def _column(token: Token) -> int:
    return (token.start_pos or 0) + 1


@functools.cache
def _parser() -> Lark:
    """Built on first use, lark with it: importing lark and building the LALR tables take a fifth
    of a second, which commands that parse no expression should not pay."""
    from lark import Lark, Token, Transformer

    def nodes(children: Sequence[Node | Token | None]) -> tuple[Node, ...]:
        return tuple(child for child in children if child is not None and not isinstance(child, Token))

    class ToTree(Transformer[Token, Node]):
        """Builds :data:`Node` values from the parser's reductions (run inside the LALR parser)."""

        def binary(self, children: list[Node | Token]) -> Node:
            left, op, right = children
            assert isinstance(op, Token) and not isinstance(left, Token) and not isinstance(right, Token)
            return Binary(str(op), left, right, _column(op))

        def negate(self, children: list[Node | Token]) -> Node:
            sign, operand = children
            assert isinstance(sign, Token) and not isinstance(operand, Token)
            return Negate(operand, _column(sign))

        def unary_plus(self, children: list[Node | Token]) -> Node:
            operand = children[1]
            assert not isinstance(operand, Token)
            return operand

        def group(self, children: list[Node | Token]) -> Node:
            inner = children[1]
            assert not isinstance(inner, Token)
            return inner

        def number(self, children: list[Token]) -> Node:
            return Number(float(children[0]), _column(children[0]))

        def ref(self, children: list[Token]) -> Node:
            return Ref(str(children[0]), _column(children[0]))

        def text(self, children: list[Token]) -> Node:
            return Text(str(children[0])[1:-1], _column(children[0]))

        def keyword(self, children: list[Token]) -> Node:
            return Keyword(str(children[0]), _column(children[0]))

        def call(self, children: list[Node | Token | None]) -> Node:
            name = children[0]
            assert isinstance(name, Token)
            return Call(str(name), nodes(children[1:]), _column(name))

        def array(self, children: list[Node | Token]) -> Node:
            opening = children[0]
            assert isinstance(opening, Token)
            return Array(nodes(children[1:]), _column(opening))

    return Lark(GRAMMAR, parser="lalr", transformer=ToTree())


_SHOWN = {  # terminal -> how an error message names it, in the order messages list them
    "NUMBER": "a number", "ID": "an Id", "FUNC": "a function", "STRING": "a string", "LPAR": "'('",
    "RPAR": "')'", "LSQB": "'['", "RSQB": "']'", "COMMA": "','", "PLUS": "'+'", "MINUS": "'-'",
    "TIMES": "'*'", "DIVIDE": "'/'", "POWER": "'^'", "$END": "the end of the expression",
}


def parse(expression: str, where: str) -> Node:
    """The syntax tree of ``expression``; InvalidParameterValue naming the column of a syntax error."""
    parser = _parser()
    from lark.exceptions import UnexpectedInput  # loaded with the parser

    try:
        tree: object = parser.parse(expression)  # the transformer runs inside the parser
    except UnexpectedInput as error:
        raise InvalidParameterValue(_syntax_error(expression, where, error)) from None
    return cast("Node", tree)


def _syntax_error(expression: str, where: str, error: UnexpectedInput) -> str:
    from lark.exceptions import UnexpectedCharacters, UnexpectedToken

    if isinstance(error, UnexpectedToken) and error.token.type == "$END":
        column, found, expected = len(expression) + 1, "end of expression", error.expected
    elif isinstance(error, UnexpectedToken):
        column, found, expected = _column(error.token), repr(str(error.token)), error.expected
    elif isinstance(error, UnexpectedCharacters):
        position = error.pos_in_stream or 0
        column, found, expected = position + 1, repr(expression[position]), error.allowed
    else:  # not raised by an LALR parser; kept so that every UnexpectedInput has a message
        column, found, expected = (error.pos_in_stream or 0) + 1, "input", set()
    if getattr(error, "interactive_parser", None) is not None:
        expected = error.interactive_parser.accepts()  # type: ignore[no-untyped-call]  # exact, where the parser's tables over-approximate
    names = [shown for terminal, shown in _SHOWN.items() if terminal in expected]
    hint = f"; expected {', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else ""
    hint = f"; expected {names[0]}" if len(names) == 1 else hint
    return f"Syntax error in {where} at column {column}: unexpected {found}{hint}."


def children(node: Node) -> tuple[Node, ...]:
    if isinstance(node, Call):
        return node.args
    if isinstance(node, Array):
        return node.items
    if isinstance(node, Binary):
        return (node.left, node.right)
    if isinstance(node, Negate):
        return (node.operand,)
    return ()


def postfix(root: Node) -> list[Node]:
    """Every node of the tree, children before their parent, left to right (no recursion)."""
    order, pending = [], [root]
    while pending:
        node = pending.pop()
        order.append(node)
        pending.extend(children(node))
    order.reverse()
    return order


def references(root: Node) -> list[Ref]:
    return [node for node in postfix(root) if isinstance(node, Ref)]


def evaluation_order(expressions: Mapping[str, Node], ids: Collection[str]) -> list[str]:
    """The expression Ids, each after those it uses; errors for unknown Ids and circular references."""
    graph: dict[str, set[str]] = {}
    for query_id, tree in expressions.items():
        graph[query_id] = set()
        for ref in references(tree):
            if ref.name not in ids:
                raise InvalidParameterValue(
                    f"Error in expression {query_id} at column {ref.column}: unknown Id '{ref.name}'. "
                    "An expression can use the Id of any other query in MetricDataQueries."
                )
            if ref.name in expressions:
                graph[query_id].add(ref.name)
    try:
        return list(TopologicalSorter(graph).static_order())
    except CycleError as error:
        cycle = list(reversed(error.args[1]))
        raise InvalidParameterValue(
            f"Circular reference in MetricDataQueries: {' -> '.join(cycle)}. An expression cannot use its own "
            "result, directly or through other expressions."
        ) from None


# -- values ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Series:
    """One time series: values by timestamp (epoch milliseconds, ascending)."""

    label: str
    points: Mapping[int, float]
    period: int | None = None  # seconds, when known
    props: Mapping[str, str] = field(default_factory=dict)  # MetricName, Namespace, Period, Stat, Dim.<name>


Value = float | Series | list[Series]
Item = Value | Text | Keyword  # what the evaluation stack holds: strings and keywords are arguments only


def with_points(series: Series, points: Mapping[int, float]) -> Series:
    """``series`` with other points: sorted, and without the ones that are not finite numbers."""
    return replace(series, points={t: v for t, v in sorted(points.items()) if math.isfinite(v)})


def _divide(a: float, b: float) -> float:
    return a / b if b else math.nan


def _power(a: float, b: float) -> float:
    try:
        return math.pow(a, b)
    except (ValueError, OverflowError):
        return math.nan


OPERATORS: dict[str, Callable[[float, float], float]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": _divide, "^": _power,
}


def combine(op: Callable[[float, float], float], left: Value, right: Value) -> Value:
    """``left op right`` for scalars, series (on the timestamps both have) and arrays."""
    if isinstance(left, list):
        return [_one(combine(op, item, right)) for item in left]
    if isinstance(right, list):
        return [_one(combine(op, left, item)) for item in right]
    if isinstance(left, Series):
        if isinstance(right, Series):
            return with_points(left, {t: op(v, right.points[t]) for t, v in left.points.items() if t in right.points})
        return with_points(left, {t: op(v, right) for t, v in left.points.items()})
    if isinstance(right, Series):
        return with_points(right, {t: op(left, v) for t, v in right.points.items()})
    return op(left, right)


def _one(value: Value) -> Series:
    assert isinstance(value, Series)
    return value


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values)


REDUCERS: dict[str, Callable[[list[float]], float]] = {"SUM": math.fsum, "AVG": _mean, "MIN": min, "MAX": max}


def reduce_series(name: str, series: Series) -> float:
    """SUM/AVG/MIN/MAX of one series: a scalar over all its points (SUM of none is 0, the others NaN)."""
    values = list(series.points.values())
    if not values:
        return 0.0 if name == "SUM" else math.nan
    return REDUCERS[name](values)


def reduce_across(name: str, array: list[Series], period: int | None) -> Series:
    """SUM/AVG/MIN/MAX of an array: one series, per timestamp over the series that have a value there."""
    columns: dict[int, list[float]] = {}
    for series in array:
        for t, v in series.points.items():
            columns.setdefault(t, []).append(v)
    first = array[0].period if array else None
    return with_points(Series("", {}, first or period), {t: REDUCERS[name](vs) for t, vs in columns.items()})


def steps(series: Series, step: Callable[[int, float, int, float], float]) -> Series:
    """A point per consecutive pair of points, at the later one's timestamp."""
    items = list(series.points.items())
    return with_points(series, {t: step(t0, v0, t, v) for (t0, v0), (t, v) in zip(items, items[1:], strict=False)})


def rate(t0: int, v0: float, t: int, v: float) -> float:
    return (v - v0) / ((t - t0) / 1000.0)


def diff(t0: int, v0: float, t: int, v: float) -> float:
    return v - v0


def fill(series: Series, slots: range, filler: float | Series | str) -> Series:
    """FILL: a value for every period slot that has none (REPEAT and LINEAR only between real points)."""
    known = series.points
    timeline = sorted(set(slots) | set(known))
    if isinstance(filler, str):
        filled = _repeat(known, timeline) if filler == "REPEAT" else _linear(known, timeline)
    elif isinstance(filler, Series):
        filled = {t: known[t] if t in known else filler.points[t] for t in timeline
                  if t in known or t in filler.points}
    else:
        filled = {t: known.get(t, filler) for t in timeline}
    return with_points(series, filled)


def _repeat(known: Mapping[int, float], timeline: list[int]) -> dict[int, float]:
    filled: dict[int, float] = {}
    last: float | None = None
    for t in timeline:
        last = known.get(t, last)
        if last is not None:
            filled[t] = last
    return filled


def _linear(known: Mapping[int, float], timeline: list[int]) -> dict[int, float]:
    times = list(known)
    filled = dict(known)
    for t in timeline:
        at = bisect.bisect_left(times, t)
        if t in known or at == 0 or at == len(times):
            continue
        (t0, v0), (t1, v1) = (times[at - 1], known[times[at - 1]]), (times[at], known[times[at]])
        filled[t] = v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    return filled


# -- evaluation ------------------------------------------------------------------------------

ARITY = {"METRICS": (0, 1), "SUM": (1, 1), "AVG": (1, 1), "MIN": (1, 1), "MAX": (1, 1), "RATE": (1, 1),
         "DIFF": (1, 1), "FILL": (2, 2)}
FILL_KEYWORDS = ("REPEAT", "LINEAR")


@dataclass(frozen=True, slots=True)
class Expression:
    id: str
    tree: Node
    period: int | None = None  # the query's Period: the period of series that have none of their own


class Evaluator:
    """Evaluates a request's expressions over its metrics' series, each expression once."""

    def __init__(self, metrics: Mapping[str, Series], expressions: Mapping[str, Expression],
                 order: list[str], slots: Callable[[int], range]) -> None:
        self.metrics = metrics  # in request order: METRICS() keeps it
        self.slots = slots
        self.results: dict[str, Value] = {}
        for query_id in order:
            self.results[query_id] = _Evaluation(self, expressions[query_id]).run()

    def value(self, query_id: str) -> Value:
        return self.metrics[query_id] if query_id in self.metrics else self.results[query_id]


class _Evaluation:
    """One expression, evaluated over its tree in postfix order with a stack of values."""

    def __init__(self, owner: Evaluator, expression: Expression) -> None:
        self.owner = owner
        self.expression = expression

    def run(self) -> Value:
        stack: list[Item] = []
        for node in postfix(self.expression.tree):
            count = len(children(node))
            args = stack[len(stack) - count:]
            del stack[len(stack) - count:]
            stack.append(self.apply(node, args))
        (result,) = stack
        return self.value(result)

    def fail(self, column: int, problem: str) -> NoReturn:
        raise InvalidParameterValue(f"Error in expression {self.expression.id} at column {column}: {problem}")

    def value(self, item: Item) -> Value:
        if isinstance(item, Text):
            self.fail(item.column, "a string is valid only as the argument of METRICS().")
        if isinstance(item, Keyword):
            if item.name in FILL_KEYWORDS:
                self.fail(item.column, f"{item.name} is valid only as the second argument of FILL().")
            self.fail(item.column, f"unknown name {item.name}: Ids start with a lowercase letter, and function "
                                   "names are followed by '('.")
        return item

    def apply(self, node: Node, args: list[Item]) -> Item:
        if isinstance(node, (Number, Text, Keyword)):
            return node.value if isinstance(node, Number) else node
        if isinstance(node, Ref):
            return self.owner.value(node.name)
        if isinstance(node, Negate):
            return combine(operator.mul, -1.0, self.value(args[0]))
        if isinstance(node, Binary):
            return self.binary(node, self.value(args[0]), self.value(args[1]))
        if isinstance(node, Array):
            return self.array(node, [self.value(arg) for arg in args])
        return self.call(node, args)

    def binary(self, node: Binary, left: Value, right: Value) -> Value:
        if isinstance(left, list) and isinstance(right, list):
            self.fail(node.column, f"'{node.op}' between two arrays of time series is not supported; "
                                   "use SUM, AVG, MIN or MAX to make one of them a single time series.")
        return combine(OPERATORS[node.op], left, right)

    def array(self, node: Array, items: list[Value]) -> list[Series]:
        array: list[Series] = []
        for item in items:
            if not isinstance(item, (Series, list)):
                self.fail(node.column, "an array holds time series, not numbers.")
            array.extend([item] if isinstance(item, Series) else item)
        return array

    def call(self, node: Call, args: list[Item]) -> Value:
        if node.name not in ARITY:
            self.fail(node.column, f"unknown function {node.name}; the functions are {', '.join(sorted(ARITY))}.")
        low, high = ARITY[node.name]
        if not low <= len(args) <= high:
            count = str(low) if low == high else f"{low} or {high}"
            plural = "" if low == high == 1 else "s"
            self.fail(node.column, f"{node.name} takes {count} argument{plural}, not {len(args)}.")
        if node.name == "METRICS":
            return self.metrics(node, args)
        if node.name == "FILL":
            return self.fill(node, self.value(args[0]), args[1])
        argument = self.value(args[0])
        if isinstance(argument, float):
            self.fail(node.column, f"{node.name} takes a time series or an array of time series, not a number.")
        if node.name in REDUCERS:
            if isinstance(argument, Series):
                return reduce_series(node.name, argument)
            return reduce_across(node.name, argument, self.expression.period)
        step = rate if node.name == "RATE" else diff
        return [steps(s, step) for s in argument] if isinstance(argument, list) else steps(argument, step)

    def metrics(self, node: Call, args: list[Item]) -> list[Series]:
        if args and not isinstance(args[0], Text):
            self.fail(node.column, 'METRICS takes no argument or a string, as in METRICS("errors").')
        part = args[0].value if args and isinstance(args[0], Text) else ""
        return [series for query_id, series in self.owner.metrics.items() if part in query_id]

    def fill(self, node: Call, target: Value, filler: Item) -> Value:
        if isinstance(target, float):
            self.fail(node.column, "FILL takes a time series or an array of time series first, not a number.")
        how: float | Series | str
        if isinstance(filler, Keyword) and filler.name in FILL_KEYWORDS:
            how = filler.name
        else:
            value = self.value(filler)
            if isinstance(value, list):
                self.fail(node.column, "FILL fills with a number, a time series, REPEAT or LINEAR, not an array.")
            how = value
        if isinstance(target, list):
            return [fill(series, self.slots_of(series), how) for series in target]
        return fill(target, self.slots_of(target), how)

    def slots_of(self, series: Series) -> range:
        """The periods FILL fills: the series' own, else the expression's Period, else none."""
        period = series.period or self.expression.period
        return self.owner.slots(period) if period else range(0)


# -- labels ----------------------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"\$\{([A-Z_]+)(?:\((['\"])(.*?)\2\))?\}")


def _label_statistics(values: list[float]) -> dict[str, float]:
    if not values:
        return {"DATAPOINT_COUNT": 0.0}
    return {
        "AVG": _mean(values), "MIN": min(values), "MAX": max(values), "SUM": math.fsum(values),
        "FIRST": values[0], "LAST": values[-1], "DATAPOINT_COUNT": float(len(values)),
        "FIRST_LAST_RANGE": values[-1] - values[0], "MIN_MAX_RANGE": max(values) - min(values),
    }


def format_number(value: float) -> str:
    """A number in a label: whole numbers as integers, others with up to 6 significant digits."""
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.6g}"


def render_label(template: str, default: str, series: Series) -> str:
    """A label with CloudWatch's dynamic values filled in: ``${LABEL}``, ``${PROP('...')}``, ``${MAX}`` ...

    Statistics are over all of the series' points in the requested range. Placeholders that are not
    supported (the time-based ones) are left as written; statistics of a series without points are empty.
    """
    statistics = _label_statistics(list(series.points.values()))
    supported = {"AVG", "MIN", "MAX", "SUM", "FIRST", "LAST", "DATAPOINT_COUNT", "FIRST_LAST_RANGE", "MIN_MAX_RANGE"}

    def substitute(match: re.Match[str]) -> str:
        name, argument = match.group(1), match.group(3)
        if name == "LABEL" and argument is None:
            return default
        if name == "PROP" and argument is not None:
            return series.props.get(argument, match.group(0))
        if name in supported and argument is None:
            return format_number(statistics[name]) if name in statistics else ""
        return match.group(0)

    return _PLACEHOLDER.sub(substitute, template)


def result_labels(query_id: str, label: str | None, value: Series | list[Series]) -> list[tuple[str, Series]]:
    """The results an expression gives: one for a series, one per series (same Id) for an array.

    A series is labelled ``Label``, or its Id without one. A series of an array is labelled with its
    own label (the metric's), after the query's ``Label`` when there is one, as CloudWatch's graphs
    show them ("Expression-Label Metric-Label"); a ``Label`` holding ``${LABEL}`` places it instead.
    """
    if isinstance(value, Series):
        return [(query_id if label is None else render_label(label, query_id, value), value)]
    labelled = []
    for series in value:
        if not label:
            text = series.label
        elif "${LABEL}" in label:
            text = render_label(label, series.label, series)
        else:
            text = f"{render_label(label, series.label, series)} {series.label}"
        labelled.append((text, series))
    return labelled
