"""``python -m trainmon.tuning NAME``: the tuner of one hyperparameter tuning job, as the process
CreateHyperParameterTuningJob starts (in a session of its own, writing to its tuner.log)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..store import open_store
from .tuner import Tuner


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainmon.tuning")
    parser.add_argument("name")
    parser.add_argument("--home", type=Path)
    args = parser.parse_args(argv)
    store = open_store(args.home)
    try:
        Tuner(store, args.name).run()
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
