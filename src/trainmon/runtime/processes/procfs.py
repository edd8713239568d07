"""Who a process is, from ``/proc/<pid>/stat``: its state, parent, process group and start time; and
the trees they make. One reading for the launcher (which processes are the job's) and the sampler
(whose use is the job's). What a process uses, read every tick, is :func:`trainmon.runtime.watch.sampler.parse_stat`."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

PROC = Path("/proc")


class ProcessStat(NamedTuple):
    state: str
    ppid: int
    pgrp: int
    start_ticks: int  # since boot: with the pid, it names one process


def parse_process_stat(data: bytes) -> ProcessStat:
    """The contents of ``/proc/<pid>/stat``, read from the end of the command name (which may hold
    spaces and parentheses itself)."""
    fields = data[data.rfind(b")") + 2:].split(None, 20)  # state ppid pgrp ... starttime
    return ProcessStat(fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[19]))


def read_process_stat(pid: int, root: Path = PROC) -> ProcessStat | None:
    """Process ``pid``'s stat; None when it is gone."""
    try:
        data = (root / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    return parse_process_stat(data)


def process_table(root: Path = PROC) -> dict[int, ProcessStat]:
    """Every process there is now."""
    table = {}
    for entry in os.listdir(root):
        if entry.isdigit():
            found = read_process_stat(int(entry), root)
            if found is not None:
                table[int(entry)] = found
    return table


def children_of(table: Mapping[int, ProcessStat]) -> dict[int, list[int]]:
    """Each parent's children, among the processes of ``table``."""
    children: dict[int, list[int]] = {}
    for pid, stat in table.items():
        children.setdefault(stat.ppid, []).append(pid)
    return children


def descendants(roots: Iterable[int], children: Mapping[int, list[int]]) -> list[int]:
    """``roots`` and every process below them, each once, depth first."""
    stack = list(roots)
    found: dict[int, None] = {}  # in the order they were reached
    while stack:
        pid = stack.pop()
        if pid not in found:
            found[pid] = None
            stack.extend(children.get(pid, ()))
    return list(found)
