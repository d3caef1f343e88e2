"""What the benchmarks share: timing, output files, the common flags, medians, ratios, tables.

Each benchmark is a script run from the repository root (``python benchmarks/bench_X.py``), so
this folder is on ``sys.path`` and ``from _harness import ...`` finds this module. It imports
nothing of ``nopg``, only the standard library (``torch`` only in :func:`sync`, when asked to
wait for a GPU), so it costs nothing to import and changes nothing of what is measured.

Timing
    :class:`Stopwatch` (wall seconds by ``time.perf_counter`` and the process's CPU seconds by
    ``time.process_time``, optionally waiting for a device first), :func:`timed` (one call),
    :func:`best_of` (the fastest of repeated calls), :func:`time_calls` (every call of a method,
    logged), :func:`peak_rss_mb` and :func:`sync`.
Output
    :func:`append_jsonl` / :func:`read_jsonl` (one JSON object per line, appended as each result
    ends, so a stopped run keeps what it finished), :func:`write_json`, :func:`write_csv`.
Flags
    :func:`add_out_arg` (``--out``, with a benchmark's older spellings kept as aliases),
    :func:`add_seeds_arg` (``--seeds``).
Summaries
    :func:`median`, :func:`ratio`, :func:`ratios_to`, :class:`TablePrinter` (a table
    printed row by row), :func:`format_table` / :func:`print_table`, :func:`machine_line`.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Stopwatch", "TablePrinter", "add_out_arg", "add_seeds_arg", "append_jsonl",
           "best_of", "format_table", "machine_line", "median", "peak_rss_mb", "print_table",
           "ratio", "ratios_to", "read_jsonl", "sync", "time_calls", "timed", "write_csv",
           "write_json"]


# --- timing -------------------------------------------------------------------------------------

def sync(device: str) -> None:
    """Wait for the GPU's queued work when ``device`` is a CUDA device (nothing on the CPU)."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


@dataclass
class Stopwatch:
    """Wall and process CPU seconds of a ``with`` block.

    ``device``: a CUDA device is synchronised before the clocks are read at both ends, so the
    block's queued GPU work is counted. A CPU time above the wall time means several threads.

    >>> with Stopwatch() as watch:
    ...     pass
    >>> watch.wall_s >= 0 and watch.cpu_s >= 0
    True
    """

    device: str = "cpu"
    wall_s: float = field(default=float("nan"), init=False)
    cpu_s: float = field(default=float("nan"), init=False)

    def __enter__(self) -> Stopwatch:
        sync(self.device)
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        sync(self.device)
        self.wall_s = time.perf_counter() - self._wall
        self.cpu_s = time.process_time() - self._cpu


def timed(fn: Callable[..., Any], *args: Any, device: str = "cpu", **kwargs: Any
          ) -> tuple[Any, Stopwatch]:
    """``fn(*args, **kwargs)`` and the :class:`Stopwatch` of that one call."""
    with Stopwatch(device) as watch:
        out = fn(*args, **kwargs)
    return out, watch


def best_of(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """The fewest wall seconds of ``repeats`` calls of ``fn``, and the last call's result."""
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def time_calls(obj: object, name: str, log: list[float]) -> None:
    """Wrap ``obj.name`` (on this object only) so that the wall seconds of every call are
    appended to ``log``, whether the call returns or raises."""
    fn = getattr(obj, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            log.append(time.perf_counter() - start)

    setattr(obj, name, wrapper)


def peak_rss_mb() -> float:
    """The process's peak resident memory so far, in MiB (Linux reports ``ru_maxrss`` in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# --- numbers ------------------------------------------------------------------------------------

def median(values: Iterable[float]) -> float:
    """The median (``nan`` for no values)."""
    values = list(values)
    return float(statistics.median(values)) if values else float("nan")


def ratio(value: float, base: float) -> float:
    """``value / base``; ``nan`` where ``base`` is zero or either is missing or not finite."""
    if value is None or base is None or not (math.isfinite(value) and math.isfinite(base)) \
            or base == 0:
        return float("nan")
    return value / base


def ratios_to(rows: Sequence[Mapping[str, Any]], key: str, base: float) -> list[float]:
    """``row[key] / base`` for every row (:func:`ratio`)."""
    return [ratio(row[key], base) for row in rows]


# --- output -------------------------------------------------------------------------------------

def _parent(path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def append_jsonl(path: str | Path, row: Mapping[str, Any]) -> Path:
    """Append ``row`` as one JSON line to ``path`` (its folder created), flushed at once."""
    path = _parent(path)
    with path.open("a") as handle:
        handle.write(json.dumps(row) + "\n")
    return path


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file (blank lines skipped)."""
    with Path(path).open() as handle:
        return [json.loads(line) for line in handle if line.strip()]


def write_json(path: str | Path, obj: Any, indent: int = 1) -> Path:
    """Write ``obj`` as one JSON document (its folder created)."""
    path = _parent(path)
    with path.open("w") as handle:
        json.dump(obj, handle, indent=indent)
    return path


def write_csv(path: str | Path, rows: Sequence[Mapping[str, Any]],
              fields: Sequence[str] | None = None, float_format: str | None = None) -> Path:
    """Write ``rows`` as CSV (columns ``fields``, by default the first row's keys; floats
    formatted with ``float_format``, e.g. ``".6g"``, when given)."""
    path = _parent(path)
    fields = list(fields if fields is not None else (rows[0] if rows else []))
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: format(row[k], float_format)
                             if float_format and isinstance(row[k], float) else row[k]
                             for k in fields})
    return path


# --- flags --------------------------------------------------------------------------------------

def add_out_arg(parser: argparse.ArgumentParser, *aliases: str, default: str | None = None,
                help: str = "write the results to this file") -> None:
    """``--out FILE`` (``args.out``); ``aliases`` such as ``"--json"`` keep a benchmark's older
    spelling working."""
    parser.add_argument("--out", *aliases, dest="out", type=str, default=default, metavar="FILE",
                        help=help + (f" (default: {default})" if default else ""))


def add_seeds_arg(parser: argparse.ArgumentParser, default: Sequence[int] = (0,)) -> None:
    """``--seeds S [S ...]`` (``args.seeds``, a list of ints)."""
    parser.add_argument("--seeds", type=int, nargs="+", default=list(default),
                        help=f"seeds to run (default: {' '.join(map(str, default))})")


# --- summaries ----------------------------------------------------------------------------------

Column = tuple[str, str, str]
"""A table column: header, row key, format spec (e.g. ``("ms/upd", "update_ms", "8.1f")``; a
width in the spec sets the column's least width, the header's length the other bound)."""


class TablePrinter:
    """A plain-text table printed row by row as results come (each line flushed), so a long
    benchmark shows what it has finished; missing values print as ``-``."""

    def __init__(self, columns: Sequence[Column]) -> None:
        self.columns = list(columns)
        self.widths = [max(len(header), int(re.match(r"[<>=^]?\+?(\d*)", spec).group(1) or 0))
                       for header, _, spec in self.columns]

    def header_line(self) -> str:
        return " ".join(h.rjust(w) for (h, _, _), w in zip(self.columns, self.widths))

    def line(self, row: Mapping[str, Any]) -> str:
        return " ".join(("-" if row.get(key) is None else format(row[key], spec)).rjust(w)
                        for (_, key, spec), w in zip(self.columns, self.widths))

    def header(self) -> None:
        print(self.header_line(), flush=True)

    def row(self, row: Mapping[str, Any]) -> None:
        print(self.line(row), flush=True)


def format_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column]) -> str:
    """Rows as a plain-text table (:class:`TablePrinter`'s lines, the header first)."""
    table = TablePrinter(columns)
    return "\n".join([table.header_line(), *(table.line(row) for row in rows)])


def print_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column]) -> None:
    """Print :func:`format_table` (flushed)."""
    print(format_table(rows, columns), flush=True)


def machine_line() -> str:
    """``"<torch threads> thread(s) on <cores> cores, python X.Y"`` for a benchmark's header."""
    threads = "?"
    if "torch" in sys.modules:
        threads = str(sys.modules["torch"].get_num_threads())
    return (f"{threads} thread(s) on {os.cpu_count()} cores, "
            f"python {sys.version_info.major}.{sys.version_info.minor}")
