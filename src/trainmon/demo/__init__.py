"""``trainmon demo``: a real training job on generated data, with live metrics."""

from __future__ import annotations

import random
import sys
from datetime import UTC, datetime
from pathlib import Path

from ..config import make_private_dir

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


def demo_arguments(home: Path, name: str | None, epochs: int) -> list[str]:
    """The ``trainmon run`` options of the demo job (its data sets made under ``home``)."""
    make_private_dir(home)
    data = home / "demo-data"
    train = make_dataset(data / "train", 4000, seed=1)
    validation = make_dataset(data / "validation", 1000, seed=2)
    return [
        "--name", name or datetime.now(UTC).strftime("demo-%Y%m%d-%H%M%S"),
        "--metric-definitions", str(HERE / "definitions.json"),
        "-H", f"epochs={epochs}", "-H", "learning_rate=0.5", "-H", "batch_size=64",
        "--channel", f"train={train}", "--channel", f"validation={validation}",
        "--max-runtime-seconds", "3600", "--stop-grace-seconds", "10", "--live-metrics",
        "--", sys.executable, str(HERE / "train.py"),
    ]
