"""Reading a long log back: ``trainmon logs``, GetLogEvents and FilterLogEvents against ``cat``.

A job's stream of 17,000,000 records (about 1 GB at scale 1), stored as a flood would store it:
chunks of about a megabyte, written through the store's own batch path. Then, over the same
records:

- cat (baseline): ``cat`` of the same text, from a file, into /dev/null;
- trainmon logs: ``python -m trainmon logs JOB > /dev/null``, end to end, as a user runs it;
- GetLogEvents: ``trainmon.client("logs").get_log_events`` paged forward, 10,000 events a call,
  over the first ``GET_EVENTS`` records;
- FilterLogEvents: the same client, a pattern that one record in a thousand holds, over the
  first ``FILTER_RECORDS`` records.

Figures: records/s of each (target for ``trainmon logs``: at least 1,000,000 records/s), each as a
ratio against cat's records/s. Checks: ``trainmon logs`` printed every record, in order, byte for
byte; GetLogEvents returned each record once.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from pathlib import Path

from .common import Report, child_env, heading, rate, scratch_dir, table, timed

RECORDS = 17_000_000
GET_EVENTS = 500_000
FILTER_RECORDS = 2_000_000
CHUNK_RECORDS = 16_384  # about 1 MB of the lines below: what one read of a flooding job holds
TARGET_RECORDS_PER_S = 1_000_000


def _line(index: int) -> str:
    marker = " checkpoint" if index % 1000 == 0 else ""
    return f"INFO step {index:09d} data loader prefetching shard {index % 4096:04d} (queue depth 17){marker}"


def _write_log(home: Path, records: int) -> tuple[str, Path]:
    """The job and its stream in a store under ``home``; the same text as a plain file."""
    from trainmon.api import sagemaker
    from trainmon.store import Batch, open_store

    store = open_store(home)
    job = sagemaker.register_job(store, {"TrainingJobName": "readback", "AlgorithmSpecification": {
        "TrainingInputMode": "File", "ContainerEntrypoint": ["true"]}, "ProfilerConfig": {"DisableProfiler": True}})
    stream = store.add_stream(job.id, "algo-1", "readback/algo-1-1700000000", 1_700_000_000_000)
    text_file = home / "log.txt"
    stamp = 1_700_000_000_000
    with open(text_file, "w", encoding="utf-8") as plain:
        for first in range(0, records, CHUNK_RECORDS):
            count = min(CHUNK_RECORDS, records - first)
            text = "\n".join(_line(i) for i in range(first, first + count))
            plain.write(text + "\n")
            batch = Batch(job.id)
            batch.chunks.append((stream.id, first, count, stamp + first // CHUNK_RECORDS, text))
            batch.text_bytes = len(text)
            batch.stream_stats[stream.id] = (count, len(text) + 1, stamp)
            store.write_batch(batch)
    store.close()
    return stream.name, text_file


def run(scale: float) -> Report:
    report = Report("readback")
    records = max(100_000, int(RECORDS * scale))
    heading(f"Reading back a log of {records:,} records")
    with scratch_dir("readback-") as home:
        write_s, (stream_name, text_file) = timed(lambda: _write_log(home, records))
        size = text_file.stat().st_size
        print(f"  stored {records:,} records ({size / 1e6:.0f} MB) in {write_s:.1f} s")
        cat_s, _ = timed(lambda: subprocess.run(["cat", str(text_file)], stdout=subprocess.DEVNULL, check=True))
        env = child_env(TRAINMON_HOME=str(home))
        digest = hashlib.sha256()
        logs_s, printed = timed(lambda: _logs(env, digest))
        expected = hashlib.sha256(text_file.read_bytes()).hexdigest()
        report.check(printed == records and digest.hexdigest() == expected,
                     f"trainmon logs printed every record byte for byte ({printed:,} of {records:,})")
        events = min(records, int(GET_EVENTS * max(scale, 0.2)))
        get_s, seen = timed(lambda: _get_log_events(home, stream_name, events))
        report.check(seen == list(range(events)), f"GetLogEvents returned each record once ({len(seen):,})")
        scanned = min(records, max(1, int(FILTER_RECORDS * max(scale, 0.2)) // CHUNK_RECORDS) * CHUNK_RECORDS)
        filter_s, found = timed(lambda: _filter_log_events(home, stream_name, scanned))
        report.check(found == (scanned + 999) // 1000, f"FilterLogEvents found every matching record ({found:,})")
        table(["reader", "seconds", "records/s", "MB/s"], [
            ["cat (baseline)", f"{cat_s:.3f}", rate(records, cat_s), f"{size / 1e6 / cat_s:.0f}"],
            ["trainmon logs > /dev/null", f"{logs_s:.3f}", rate(records, logs_s), f"{size / 1e6 / logs_s:.0f}"],
            [f"GetLogEvents, {events:,} records", f"{get_s:.3f}", rate(events, get_s), "-"],
            [f"FilterLogEvents, {scanned:,} records", f"{filter_s:.3f}", rate(scanned, filter_s), "-"],
        ])
        cat_rate = records / cat_s
        logs_rate = records / logs_s
        report.absolute("trainmon logs, records/s", rate(records, logs_s), f">= {rate(TARGET_RECORDS_PER_S, 1)}",
                        logs_rate >= TARGET_RECORDS_PER_S, f"{logs_rate / cat_rate:.2f}x cat's {rate(records, cat_s)}")
        report.ratio("GetLogEvents records/s / cat's", (events / get_s) / cat_rate,
                     detail=f"{rate(events, get_s)} records/s")
        report.ratio("FilterLogEvents records scanned/s / cat's", (scanned / filter_s) / cat_rate,
                     detail=f"{rate(scanned, filter_s)} records/s")
    return report


def _logs(env: dict[str, str], digest: hashlib._Hash) -> int:
    """``trainmon logs`` into a pipe read here (hashed and counted; a pipe, not a terminal)."""
    process = subprocess.Popen([sys.executable, "-m", "trainmon", "logs", "readback"], stdout=subprocess.PIPE,
                               env=env)
    assert process.stdout is not None
    lines = 0
    while chunk := process.stdout.read(1 << 20):
        digest.update(chunk)
        lines += chunk.count(b"\n")
    process.wait()
    return lines


def _get_log_events(home: Path, stream_name: str, events: int) -> list[int]:
    import trainmon

    logs = trainmon.client("logs", home=home)
    seen: list[int] = []
    token = None
    while len(seen) < events:
        arguments = {"logGroupName": "/aws/sagemaker/TrainingJobs", "logStreamName": stream_name,
                     "startFromHead": True, "limit": min(10_000, events - len(seen))}
        if token:
            arguments["nextToken"] = token
        page = logs.get_log_events(**arguments)
        seen.extend(int(event["message"][10:19]) for event in page["events"])
        token = page["nextForwardToken"]
        if not page["events"]:
            break
    return seen


def _filter_log_events(home: Path, stream_name: str, scanned: int) -> int:
    """Matches of "checkpoint" among the first ``scanned`` records (one in a thousand holds it)."""
    import trainmon

    logs = trainmon.client("logs", home=home)
    end_ms = 1_700_000_000_000 + (scanned - 1) // CHUNK_RECORDS
    found, token = 0, None
    start = time.perf_counter()
    while True:
        arguments = {"logGroupName": "/aws/sagemaker/TrainingJobs", "logStreamNames": [stream_name],
                     "filterPattern": "checkpoint", "endTime": end_ms}
        if token:
            arguments["nextToken"] = token
        page = logs.filter_log_events(**arguments)
        found += sum(1 for event in page["events"] if int(event["message"][10:19]) < scanned)
        token = page.get("nextToken")
        if not token or time.perf_counter() - start > 600:
            return found
