"""``trainmon parse``: metric definitions tried on saved logs, every point printed.

It imports only the parsing layer (and what the command line shares), so that it starts in the
time NumPy takes: a log is often parsed in a loop, or in a pipeline.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from itertools import chain
from typing import Any

import numpy as np

from ..errors import ValidationException
from ..parsing.definitions import definition_warnings, near_miss, validate_definitions
from ..parsing.extract import Extractor, Points, scan_blocks, scan_file_blocks
from ..parsing.framing import Mode
from . import render
from .common import Commands, json_number, warn
from .definitions import add_definition_options, definitions_given


def register(commands: Commands) -> None:
    parse = commands.add("parse", cmd_parse, "Apply metric definitions to saved logs and print every point (test "
                         "before you run).")
    add_definition_options(parse)
    parse.add_argument("--json", action="store_true", help='one {"line", "offset", "name", "value"} object per line')
    parse.add_argument("--strict", action="store_true",
                       help="exit 1 when a definition yields no point in a log (for CI: a definition that broke)")
    parse.add_argument("logs", nargs="+", metavar="LOG", help="log files; - reads standard input")


def _point_template(as_json: bool, file_json: str | None) -> str:
    """A %-format for one point's line: JSON (with the file, when several are parsed) or text."""
    if not as_json:
        return "line %d\t%s\t%s\n"
    file_field = f'"file": {file_json}, '.replace("%", "%%") if file_json is not None else ""
    return '{' + file_field + '"line": %d, "offset": %d, "name": %s, "value": %s}\n'


def _point_lines(template: str, points: Points, names: list[str], as_json: bool) -> str:
    """A block of points as lines, formatted at once (one %-format of the whole block)."""
    values: list[Any] = points.values.tolist()
    if as_json:  # repr for numbers (exact); NaN and infinities as strings
        if not np.isfinite(points.values).all():
            values = [value if value - value == 0.0 else json.dumps(json_number(value)) for value in values]
        columns: tuple[list[Any], ...] = (points.lines.tolist(), points.offsets.tolist(),
                                          list(map(names.__getitem__, points.definitions.tolist())), values)
    else:
        columns = (points.lines.tolist(), list(map(names.__getitem__, points.definitions.tolist())),
                   list(map(render.number, values)))
    return (template * len(values)) % tuple(chain.from_iterable(zip(*columns, strict=True)))


NEAR_MISS_BYTES = 16 << 20  # how much of a log a definition that found nothing is looked for in, nearly


def _with_near_misses(extractor: Extractor, path: str) -> list[dict[str, Any]]:
    """The definitions' diagnostics; one whose literal no record held gets ``NearMiss`` when the
    log's first 16 MB nearly hold it (another case, a character missing, added or different)."""
    stats = [s.to_json() for s in extractor.stats]
    wanting = [s for s in stats if not s["Matches"] and not s["Rejected"] and s.get("Prefilter")]
    if wanting and path != "-":
        try:
            with open(path, "rb") as log:
                text = log.read(NEAR_MISS_BYTES).decode("utf-8", "replace")
        except OSError:
            return stats
        for s in wanting:
            hint = near_miss(s["Prefilter"], text)
            if hint:
                s["NearMiss"] = hint
    return stats


def cmd_parse(args: argparse.Namespace) -> int:
    mode = Mode(args.mode)
    definitions = validate_definitions(definitions_given(args))
    if not definitions:
        raise ValidationException("no metric definitions: give --metric-definitions or --metric NAME=REGEX")
    for warning in definition_warnings(definitions, escapes_control=mode.escapes):
        warn(warning)
    out = sys.stdout
    several = len(args.logs) > 1
    pointless: list[str] = []
    for path in args.logs:
        extractor = Extractor(definitions, mode)
        if several and not args.json:
            print(f"== {path}", file=out)
        if path != "-" and not os.access(path, os.R_OK):
            raise ValidationException(f"cannot read log {path!r}: it does not exist or is not readable.")
        template = _point_template(args.json, json.dumps(path) if several else None)
        names = [json.dumps(d.name) if args.json else d.name for d in definitions]
        try:
            found = scan_blocks(sys.stdin.buffer, extractor) if path == "-" else scan_file_blocks(path, extractor)
            for points in found:
                out.write(_point_lines(template, points, names, args.json))
        except OSError as exc:
            raise ValidationException(f"cannot read log {path!r}: {exc.strerror or exc}.") from None
        print(f"Summary for {path} ({mode.value} mode):", file=sys.stderr)
        print("\n".join(render.definition_report(_with_near_misses(extractor, path),
                                                 [d.to_api() for d in definitions], escapes=mode.escapes)),
              file=sys.stderr)
        pointless += [f"{s.name} in {path}" for s in extractor.stats if not s.matches]
    if args.strict and pointless:
        print(f"trainmon: --strict: no point from {', '.join(pointless)}", file=sys.stderr)
        return 1
    return 0
