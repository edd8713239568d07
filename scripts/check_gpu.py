"""Exercise the real GPU path on a machine with an NVIDIA GPU and its driver.

    pip install -e '.[gpu,profiler]' && python3 scripts/check_gpu.py

It reads NVML directly, then runs a short job that keeps the GPU busy (with PyTorch or CuPy when
one is installed, else it just holds the GPU idle) under `trainmon run` with 1 s system metrics and
the 100 ms profiler, and prints what trainmon recorded. It exits non-zero when a GPU metric is
missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from trainmon.runtime.watch.gpu import NvmlSource, visible_gpus

JOB = """
import time
try:
    import torch
    x = torch.randn(4096, 4096, device="cuda")
    t = time.time()
    while time.time() - t < 8:
        x = x @ x
        x = x / x.norm()
    torch.cuda.synchronize()
except ImportError:
    time.sleep(8)
print("done")
"""


def main() -> int:
    source = NvmlSource(visible_gpus())
    readings = source.read()
    source.close()
    print("NVML readings:", readings)
    if not readings:
        print("no GPU visible to NVML", file=sys.stderr)
        return 1
    home = tempfile.mkdtemp()
    env = {**os.environ, "TRAINMON_HOME": home}
    script = os.path.join(home, "gpu_job.py")
    with open(script, "w") as handle:
        handle.write(JOB)
    subprocess.run([sys.executable, "-m", "trainmon", "run", "--name", "gpu-check", "--system-metrics-interval", "1",
                    "--profiling-interval-ms", "100", "--", sys.executable, script], env=env, check=True)
    table = subprocess.run([sys.executable, "-m", "trainmon", "metrics", "gpu-check", "--system", "--json",
                            "--metric", "GPUUtilization", "--metric", "GPUMemoryUtilization"],
                           env=env, check=True, capture_output=True, text=True).stdout
    rows = json.loads(table)
    print(json.dumps(rows, indent=2, default=str))
    profile = subprocess.run([sys.executable, "-m", "trainmon", "profile", "gpu-check"], env=env, check=True,
                             capture_output=True, text=True).stdout
    print(profile)
    return 0 if rows and "gpu0_utilization_pct" in profile else 1


if __name__ == "__main__":
    sys.exit(main())
