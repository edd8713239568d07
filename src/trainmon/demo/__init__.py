"""``trainmon demo``: a real training job on generated data, with live metrics."""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from .. import config

HERE = Path(__file__).parent


def make_dataset(directory: Path, rows: int, seed: int) -> Path:
    """Two noisy classes in 8 dimensions, as CSV with the label first (SageMaker's convention)."""
    directory.mkdir(parents=True, exist_ok=True)
    concept = random.Random(42)  # the same true weights for every split
    weights = [concept.uniform(-2, 2) for _ in range(8)]
    rng = random.Random(seed)
    lines = []
    for _ in range(rows):
        x = [rng.gauss(0, 1) for _ in weights]
        score = sum(a * b for a, b in zip(weights, x, strict=False)) + rng.gauss(0, 1.5)
        lines.append(",".join([str(int(score > 0))] + [f"{v:.5f}" for v in x]))
    path = directory / f"{directory.name}.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return directory


def run_demo(args: argparse.Namespace, run: Callable[[argparse.Namespace], int]) -> int:
    try:
        import numpy  # noqa: F401
    except ImportError:
        print("trainmon: the demo job needs numpy: pip install 'trainmon[demo]'", file=sys.stderr)
        return 1
    from ..cli import build_parser

    data = config.home() / "demo-data"
    train = make_dataset(data / "train", 4000, seed=1)
    validation = make_dataset(data / "validation", 1000, seed=2)
    name = args.name or datetime.now(UTC).strftime("demo-%Y%m%d-%H%M%S")
    argv = [
        "run", "--name", name,
        "--metric-definitions", str(HERE / "definitions.json"),
        "-H", f"epochs={args.epochs}", "-H", "learning_rate=0.5", "-H", "batch_size=64",
        "--channel", f"train={train}", "--channel", f"validation={validation}",
        "--max-runtime-seconds", "3600", "--stop-grace-seconds", "10", "--live-metrics",
        "--", sys.executable, str(HERE / "train.py"),
    ]
    run_args = build_parser().parse_args(argv)  # the very options a user would type
    run_args.home, run_args.debug = args.home, args.debug
    return run(run_args)
