"""trainmon's benchmarks: extraction throughput, capture overhead and capture latency.

Run them all with ``python3 -m benchmarks`` from the repository root, or one with
``python3 -m benchmarks extraction`` (see benchmarks/README.md).

They measure this checkout: its ``src/`` comes first on the path, here and (through
``PYTHONPATH``) in every process they start, whatever trainmon is installed.
"""

import sys
from pathlib import Path

_SRC = str(Path(__file__).resolve().parent.parent / "src")
if _SRC not in sys.path:
    sys.path.insert(0, _SRC)
