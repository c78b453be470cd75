"""What a benchmark reports: named figures, each with its target and verdict, and how they are
shown (one table) and written (``--json``). The repository's benchmarks report the same way."""

from __future__ import annotations

import json
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["BenchReport", "Figure", "machine", "show", "time_per_call", "write_json"]


@dataclass(frozen=True, slots=True)
class Figure:
    """One reported figure. ``target`` is text (e.g. ``"<= 1x"``); ``ok`` is None if none."""

    name: str
    value: float
    unit: str
    target: str = ""
    ok: bool | None = None


@dataclass
class BenchReport:
    """A benchmark's figures plus everything it measured, for ``--json``."""

    name: str
    figures: list[Figure] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def add(self, name: str, value: float, unit: str, target: str = "", ok: bool | None = None) -> None:
        self.figures.append(Figure(name, value, unit, target, ok))

    @property
    def ok(self) -> bool:
        return all(f.ok is not False for f in self.figures)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "machine": machine(),
            "figures": [asdict(f) for f in self.figures],
            "data": self.data,
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=True)


def machine() -> dict[str, Any]:
    """Where the figures were measured."""
    import os

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.machine(),
        "cpus": os.cpu_count(),
    }


def time_per_call(fn: Callable[[], object], *, repeat: int = 7, min_time: float = 0.05) -> float:
    """Median seconds per call of ``fn`` over ``repeat`` rounds of at least ``min_time`` each."""
    number = 1
    while True:
        start = time.perf_counter()
        for _ in range(number):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed >= min_time or number >= 1 << 20:
            break
        number *= 2
    rounds = [elapsed / number]
    for _ in range(repeat - 1):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        rounds.append((time.perf_counter() - start) / number)
    return statistics.median(rounds)


def show(reports: list[BenchReport], console: Console, *, title: str = "residency bench") -> None:
    """Print every report's figures as one table, then where they were measured."""
    from rich.table import Table

    table = Table(title=title, show_lines=False)
    for col in ("bench", "figure", "value", "target", "ok"):
        table.add_column(col, justify="right" if col == "value" else "left")
    for report in reports:
        for f in report.figures:
            verdict = "" if f.ok is None else ("yes" if f.ok else "NO")
            table.add_row(report.name, f.name, f"{f.value:,.3g} {f.unit}".strip(), f.target, verdict)
    console.print(table)
    m = machine()
    console.print(f"measured on {m['platform']}, {m['cpus']} CPUs, Python {m['python']}")


def write_json(path: Path | None, reports: list[BenchReport]) -> None:
    """Write every report to ``path`` as a JSON list (nothing when ``path`` is None)."""
    if path is not None:
        path.write_text(json.dumps([r.to_json() for r in reports], indent=2, sort_keys=True) + "\n")
