"""The options that give metric definitions, shared by ``trainmon run`` and ``trainmon parse``."""

from __future__ import annotations

import argparse
from typing import Any

from ..parsing.definitions import load_definitions, parse_short_form
from ..parsing.framing import Mode


def add_definition_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--metric-definitions", metavar="DEFS",
                         help='JSON file or inline JSON: [{"Name": "train:error", "Regex": "Train_error=(.*?);"}]')
    command.add_argument("--metric", action="append", metavar="NAME=REGEX", help="one definition (repeatable)")
    command.add_argument("--mode", choices=[m.value for m in Mode], default=Mode.TERMINAL.value,
                         help="record splitting: terminal (\\n, \\r\\n and \\r end records; default), "
                         "sagemaker (only \\n, as SageMaker), raw (as terminal, no #011 escaping)")


def definitions_given(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The definitions of --metric-definitions and --metric, in that order (not yet validated)."""
    return load_definitions(args.metric_definitions) + parse_short_form(args.metric or [])
