"""CPU and memory accounting from /proc: a process's CPU time, PostgreSQL's, the split
between server, load generator and database over a run, and percentiles."""

from __future__ import annotations

import os
import time
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def process_tree_cpu(pid: int) -> float:
    """CPU time of `pid` and of its children (`hourglass serve --workers N`'s workers)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except (FileNotFoundError, ProcessLookupError):
        children = []
    return process_cpu(pid) + sum(process_cpu(int(child)) for child in children)


def postgres_cpu() -> dict[int, float]:
    """CPU seconds of every PostgreSQL process now, by pid."""
    used: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == "postgres":
                    used[int(entry.name)] = process_cpu(int(entry.name))
            except (FileNotFoundError, ProcessLookupError):
                continue
    return used


class CpuSplit:
    """CPU time of the server, this process and PostgreSQL between start() and stop()."""

    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid

    def _sample(self) -> tuple[float, float, float, dict[int, float]]:
        times = os.times()
        return (
            time.perf_counter(),
            process_tree_cpu(self.server_pid),
            times.user + times.system,
            postgres_cpu(),
        )

    def start(self) -> None:
        self._before = self._sample()

    def stop(self) -> dict[str, float]:
        after = self._sample()
        wall = after[0] - self._before[0]
        # PostgreSQL: what each backend alive at the end used since the start (a
        # backend started meanwhile, from zero); one that ended meanwhile is lost.
        postgres = sum(cpu - self._before[3].get(pid, 0.0) for pid, cpu in after[3].items())
        return {
            "server_pct": round(100 * (after[1] - self._before[1]) / wall),
            "bench_pct": round(100 * (after[2] - self._before[2]) / wall),
            "postgres_pct": round(100 * postgres / wall),
        }


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0
