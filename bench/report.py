"""The benchmark's figures and how they are written: rows with the service, its ceiling
and the peers, printed as they come and rewritten into bench/RESULTS.md's generated block."""

from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

RESULTS_BEGIN = "<!-- bench/run.py writes from here -->"
RESULTS_END = "<!-- bench/run.py writes up to here -->"


@dataclass
class Measurement:
    value: float
    cpu: dict[str, float] = field(default_factory=dict)


@dataclass
class Row:
    """One line of the results: a workload's figure for each system."""

    name: str
    unit: str
    service: float | None
    ceiling: float | None
    peers: dict[str, float | None]
    cpu: dict[str, dict[str, float]] = field(default_factory=dict)
    rounds: dict[str, list[float]] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        if self.service is None or not self.ceiling or self.unit == "x":
            return None  # a growth factor's "ceiling" column is the ceiling's own growth
        return self.service / self.ceiling

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio}


def _number(value: float | None) -> str:
    if value is None:
        return "—"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.2f}"


def format_row(row: Row) -> str:
    peers = ", ".join(f"{name} {_number(value)}" for name, value in row.peers.items())
    ratio = f" (x{row.ratio:.2f})" if row.ratio is not None else ""
    return (
        f"{row.name}: {_number(row.service)} {row.unit}{ratio}"
        + (f"; ceiling {_number(row.ceiling)}" if row.ceiling is not None else "")
        + (f"; {peers}" if peers else "")
    )


def machine_description(dsn: str) -> str:
    with psycopg.connect(dsn) as connection:
        version = connection.execute("SHOW server_version").fetchone()[0]
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.machine(),
    )
    return (
        f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, "
        f"PostgreSQL {version}, {platform.system()} {platform.release()}"
    )


def markdown(rows: list[Row], peer_names: list[str], machine: str, command: str) -> str:
    header = [
        "workload",
        "unit",
        "hourglass",
        "ceiling",
        "ratio",
        *peer_names,
        "CPU % server / bench / postgres",
    ]
    lines = [
        RESULTS_BEGIN,
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {machine}.",
        "",
        "```sh",
        command,
        "```",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for row in rows:
        cpu = row.cpu.get("hourglass")
        split = f"{cpu['server_pct']} / {cpu['bench_pct']} / {cpu['postgres_pct']}" if cpu else ""
        ratio = f"{row.ratio:.2f}" if row.ratio is not None else ""
        cells = [
            row.name,
            row.unit,
            _number(row.service),
            _number(row.ceiling),
            ratio,
            *(_number(row.peers.get(name)) for name in peer_names),
            split,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", RESULTS_END]
    return "\n".join(lines)


def write_results(path: Path, block: str) -> None:
    """Replace the generated block of `path`, keeping the prose around it."""
    text = (
        path.read_text()
        if path.exists()
        else f"# Benchmark results\n\n{RESULTS_BEGIN}\n{RESULTS_END}\n"
    )
    if RESULTS_BEGIN in text and RESULTS_END in text:
        before, rest = text.split(RESULTS_BEGIN, 1)
        after = rest.split(RESULTS_END, 1)[1]
        text = before + block + after
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)
