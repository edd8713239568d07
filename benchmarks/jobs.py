"""Stand-in training jobs, run as separate processes (by path: ``python benchmarks/jobs.py KIND ...``).

Each job writes what it measured about itself (its own elapsed time, CPU time, how far it fell
behind its schedule) as JSON to the file named by ``--report``, never to stdout, so its output
is exactly the lines under test.

- ``paced``: ``--rate`` lines per second for ``--seconds``, paced by the clock, one ``print`` per
  line: ``step N loss=0.123``.
- ``flood``: ``--megabytes`` of ``step N loss=...`` lines, written as fast as the pipe takes them.
- ``replay``: ``--file`` (a saved training log) written ``--copies`` times over, in 61 kB writes, as
  fast as the pipe takes them or, with ``--rate-mb-s``, paced by the clock at that rate.
- ``stamped``: ``--count`` lines ``t=<time.time()> value=<i>``, ``--interval-ms`` apart.
- ``busy``: a job that keeps every core busy: ``--workers`` processes (one a core by default) each
  spin through ``--spin`` iterations of arithmetic, while the main process writes ``--file`` over
  and over at ``--rate-mb-s`` until they are done. It reports the workers' time (the slowest's).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable


def loss_of(step: int) -> float:
    """The value a line carries, so that a reader can check every stored point."""
    return (step * 7919 % 1000) / 1000


def paced(rate: float, seconds: float) -> dict[str, float]:
    total = int(rate * seconds)
    start = time.perf_counter()
    cpu_start = time.process_time()
    step = 0
    worst_lag = 0.0
    while step < total:
        now = time.perf_counter()
        due = min(total, int((now - start) * rate) + 1)
        if due <= step:
            time.sleep(min(0.001, (step / rate) - (now - start)))
            continue
        worst_lag = max(worst_lag, now - (start + step / rate))
        while step < due:
            print(f"step {step} loss={loss_of(step):.3f}")
            step += 1
    elapsed = time.perf_counter() - start
    return {"lines": total, "elapsed_s": elapsed, "cpu_s": time.process_time() - cpu_start,
            "worst_lag_s": worst_lag}


FLOOD_LINE_PAD = "x" * 40


def flood(megabytes: float) -> dict[str, float]:
    lines_per_block = 1000
    block = "".join(
        f"step {step} loss={loss_of(step):.3f} {FLOOD_LINE_PAD}\n" for step in range(lines_per_block)
    ).encode()
    blocks = max(1, int(megabytes * 1e6 / len(block)))
    out = sys.stdout.buffer
    fd = out.fileno()
    start = time.perf_counter()
    cpu_start = time.process_time()
    for _ in range(blocks):
        view = memoryview(block)
        while view:
            view = view[os.write(fd, view):]
    elapsed = time.perf_counter() - start
    return {"lines": blocks * lines_per_block, "bytes": blocks * len(block), "elapsed_s": elapsed,
            "cpu_s": time.process_time() - cpu_start, "ended_at": time.time()}


def _write_over(text: bytes, rate_mb_s: float | None, more: Callable[[int], bool]) -> tuple[int, float]:
    """``text`` written to stdout over and over, 61 kB a write, while ``more(copies written)``: as
    fast as the pipe takes it or, with ``rate_mb_s``, paced by the clock. The bytes written, and
    the worst lag behind the pace."""
    fd = sys.stdout.buffer.fileno()
    start = time.perf_counter()
    written, worst_lag, copies = 0, 0.0, 0
    view = memoryview(text)
    while more(copies):
        if rate_mb_s:  # paced: a write is due when the rate says so
            due = start + written / (rate_mb_s * 1e6)
            now = time.perf_counter()
            if due > now:
                time.sleep(due - now)
            else:
                worst_lag = max(worst_lag, now - due)
        done = os.write(fd, view[:61_000])
        view = view[done:]
        written += done
        if not view:
            copies += 1
            view = memoryview(text)
    return written, worst_lag


def replay(path: str, copies: int, rate_mb_s: float | None) -> dict[str, float]:
    """A saved log written ``copies`` times over (read into memory first)."""
    with open(path, "rb") as handle:
        text = handle.read()
    start = time.perf_counter()
    cpu_start = time.process_time()
    written, worst_lag = _write_over(text, rate_mb_s, lambda done: done < copies)
    elapsed = time.perf_counter() - start
    return {"bytes": written, "elapsed_s": elapsed, "cpu_s": time.process_time() - cpu_start,
            "ended_at": time.time(), "worst_lag_s": worst_lag}


def stamped(count: int, interval_s: float, delay_s: float) -> dict[str, float]:
    time.sleep(delay_s)  # let the reader start polling
    start = time.perf_counter()
    for i in range(count):
        target = start + i * interval_s
        pause = target - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        print(f"t={time.time():.6f} value={i}", flush=True)
    return {"lines": count, "elapsed_s": time.perf_counter() - start}


def _spin(iterations: int) -> float:
    start = time.perf_counter()
    total = 0
    for i in range(iterations):
        total += i * i
    return time.perf_counter() - start


def busy(path: str, rate_mb_s: float, workers: int, iterations: int) -> dict[str, float]:
    """Every core spinning, the log written at a steady rate meanwhile (by a thread of this process,
    which spins nothing)."""
    import multiprocessing
    import threading

    with open(path, "rb") as handle:
        text = handle.read()
    done = threading.Event()
    written: list[int] = []
    writer = threading.Thread(target=lambda: written.append(_write_over(text, rate_mb_s, lambda _: not done.is_set())[0]))
    writer.start()
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        times = pool.map(_spin, [iterations] * workers)
    done.set()
    writer.join()
    return {"spin_s": max(times), "bytes": written[0], "ended_at": time.time()}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["paced", "flood", "replay", "stamped", "busy"])
    parser.add_argument("--report", required=True)
    parser.add_argument("--rate", type=float, default=100_000)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--megabytes", type=float, default=200)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--interval-ms", type=float, default=5.0)
    parser.add_argument("--delay-s", type=float, default=0.5)
    parser.add_argument("--file")
    parser.add_argument("--copies", type=int, default=1)
    parser.add_argument("--rate-mb-s", type=float)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--spin", type=int, default=40_000_000)
    args = parser.parse_args()
    if args.kind == "paced":
        result = paced(args.rate, args.seconds)
    elif args.kind == "flood":
        result = flood(args.megabytes)
    elif args.kind == "replay":
        result = replay(args.file, args.copies, args.rate_mb_s)
    elif args.kind == "busy":
        result = busy(args.file, args.rate_mb_s or 60.0, args.workers, args.spin)
    else:
        result = stamped(args.count, args.interval_ms / 1000, args.delay_s)
    with open(args.report, "w", encoding="utf-8") as handle:
        json.dump(result, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
