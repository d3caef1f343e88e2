"""Rows, summary and figure of the sample-efficiency sweep (:mod:`.sample_efficiency`).

A run is one row (:data:`ROW_COLUMNS`); :func:`summarize` groups the rows by task, algorithm and
data size and gives the mean return with a percentile-bootstrap interval over seeds
(:func:`nopg.io.run_evaluation.bootstrap_mean_ci`, 10 000 resamples by default, as the paper);
:func:`plot_sample_efficiency` draws the figure (log x, one panel per algorithm family on a
shared y axis, the interval as error bars; online algorithms against environment steps).
"""

from __future__ import annotations

import csv
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..analysis.statistics import check_bootstrap_options
from ..io.run_evaluation import bootstrap_mean_ci

logger = logging.getLogger("nopg.experiments")

__all__ = ["DODGE", "FAMILIES", "ROW_COLUMNS", "SUMMARY_COLUMNS", "check_identical_data", "figure_families",
           "format_table", "merge_rows", "paper_points", "plot_sample_efficiency", "read_rows",
           "read_summary", "sample_efficiency_figure", "summarize", "write_report", "write_rows",
           "write_summary"]

ROW_COLUMNS: dict[str, type] = {
    "task": str, "algorithm": str, "kind": str,          # kind: offline | online
    "size": int, "size_unit": str,                        # transitions | demonstrations | env steps
    "n_transitions": int, "seed": int, "return": float,
    "J_hat": float,                                       # NOPG's (and PWIS's) own estimate
    "wall_time_s": float, "train_steps": int, "env_steps": int,
    "data_sha256": str,                                   # of the transitions trained on
    "error": str,                                         # why a run failed (else empty)
}
"""The CSV columns of one run and their types (empty cells are ``None``)."""

SUMMARY_COLUMNS = ("task", "algorithm", "kind", "size", "size_unit", "n", "mean", "ci_lo",
                   "ci_hi", "std", "wall_time_mean_s", "J_hat_mean")


def write_rows(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Write runs to a CSV file with the columns :data:`ROW_COLUMNS` (unknown keys refused)."""
    path = Path(path)
    for row in rows:
        extra = set(row) - set(ROW_COLUMNS)
        if extra:
            raise ValueError(f"unknown row fields {sorted(extra)}; known: {list(ROW_COLUMNS)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(ROW_COLUMNS))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if row.get(k) is None else
                             (repr(row[k]) if isinstance(row[k], float) else row[k])
                             for k in ROW_COLUMNS})
    return path


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Read a :func:`write_rows` file back with the column types (``""`` becomes ``None``).

    ``error`` may be absent (files written before it existed): it is then ``None``.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path} does not exist")
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        missing = set(ROW_COLUMNS) - set(reader.fieldnames or []) - {"error"}
        if missing:
            raise ValueError(f"{path} is not a sample-efficiency CSV: missing {sorted(missing)}")
        return [{k: _parse(k, row.get(k, "")) for k in ROW_COLUMNS} for row in reader]


def check_identical_data(rows: Sequence[Mapping[str, Any]]) -> None:
    """Raise if two offline runs of one size and seed trained on different transitions."""
    seen: dict[tuple[int, int], tuple[str, str]] = {}
    for row in rows:
        if row["kind"] != "offline" or not row["data_sha256"]:
            continue
        key = (row["size"], row["seed"])
        first = seen.setdefault(key, (row["data_sha256"], row["algorithm"]))
        if first[0] != row["data_sha256"]:
            raise RuntimeError(f"size {key[0]}, seed {key[1]}: {row['algorithm']} trained on other "
                               f"transitions than {first[1]}")


def merge_rows(runs: Sequence[Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """The runs of several sweeps of one task as one list (e.g. from other machines or days).

    A run of a later list replaces one of an earlier list with the same algorithm, kind, size
    and seed (re-running one algorithm with new settings keeps every other algorithm's runs).
    Raises ``ValueError`` when the lists hold several tasks or when offline runs of one size
    and seed trained on different transitions (their ``data_sha256``), so that merged sweeps
    still compare the algorithms on identical data.
    """
    merged: dict[tuple, dict[str, Any]] = {}
    for rows in runs:
        for row in rows:
            merged[(row["algorithm"], row["kind"], int(row["size"]), int(row["seed"]))] = dict(row)
    rows = list(merged.values())
    if not rows:
        raise ValueError("nothing to merge: the runs are empty")
    tasks = sorted({r["task"] for r in rows})
    if len(tasks) > 1:
        raise ValueError(f"the runs hold several tasks ({', '.join(tasks)}); merge one task at a time")
    try:
        check_identical_data(rows)
    except RuntimeError as err:
        raise ValueError(f"the runs did not train on the same data: {err}") from None
    return rows


def write_summary(summary: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Write the rows of :func:`summarize` to the CSV file ``path``."""
    path = Path(path)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(SUMMARY_COLUMNS))
        writer.writeheader()
        writer.writerows(summary)
    return path


_SUMMARY_TYPES = {"size": int, "n": int, "task": str, "algorithm": str, "kind": str,
                  "size_unit": str}


def read_summary(path: str | Path) -> list[dict[str, Any]]:
    """Read a :func:`write_summary` file back (``size`` and ``n`` as ints, the statistics as
    floats, empty cells as ``None``), e.g. to redraw a published figure from its summary."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path} does not exist")
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        missing = set(SUMMARY_COLUMNS) - set(reader.fieldnames or [])
        if missing:
            raise ValueError(f"{path} is not a sample-efficiency summary: missing {sorted(missing)}")
        return [{k: None if row[k] == "" else _SUMMARY_TYPES.get(k, float)(row[k])
                 for k in SUMMARY_COLUMNS} for row in reader]


def write_report(rows: Sequence[Mapping[str, Any]], run_dir: str | Path, confidence: float = 0.95,
                 n_boot: int = 10000) -> list[dict[str, Any]]:
    """Write ``runs.csv``, ``summary.csv``, ``table.md`` and ``sample_efficiency.png`` of the
    runs of one task into ``run_dir`` (created if needed; bad bootstrap options are refused
    before anything is written); returns the summary (:func:`summarize`)."""
    check_bootstrap_options(n_boot, confidence)
    run_dir = Path(run_dir)
    write_rows(rows, run_dir / "runs.csv")
    summary = summarize(rows, confidence, n_boot)
    write_summary(summary, run_dir / "summary.csv")
    (run_dir / "table.md").write_text(format_table(summary) + "\n")
    task = rows[0]["task"]
    reference = None
    if task == "mountaincar-human":
        from .mountaincar_human import HUMAN_MEAN_RETURN

        reference = HUMAN_MEAN_RETURN
    if not any(math.isfinite(r["mean"]) for r in summary):
        logger.warning("no run has a return (see the 'error' column of runs.csv): no figure")
        return summary
    from ..datasets import paper_curves

    plot_sample_efficiency(summary, run_dir / "sample_efficiency.png",
                           title=f"{task}: mean return, {100 * confidence:.0f}% bootstrap interval "
                                 f"over {seeds_phrase(summary)}",
                           reference=reference, paper=paper_curves(task))
    return summary


def _parse(column: str, text: str | None) -> Any:
    if text is None or text == "":
        return None
    kind = ROW_COLUMNS[column]
    return int(float(text)) if kind is int else kind(text)


def summarize(rows: Sequence[Mapping[str, Any]], confidence: float = 0.95, n_boot: int = 10000,
              seed: int = 0) -> list[dict[str, Any]]:
    """Mean return and its percentile-bootstrap interval per (task, algorithm, kind, size).

    Rows whose return is missing or not finite are left out (and counted out of ``n``).
    """
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for row in rows:
        key = (row["task"], row["algorithm"], row["kind"], int(row["size"]), row["size_unit"])
        groups.setdefault(key, []).append(row)
    out = []
    for (task, algo, kind, size, unit), members in groups.items():
        values = np.array([r["return"] for r in members if r["return"] is not None
                           and math.isfinite(r["return"])], dtype=float)
        j_hats = [r["J_hat"] for r in members if r.get("J_hat") is not None]
        lo, hi = bootstrap_mean_ci(values, confidence, n_boot, seed) if values.size else \
            (math.nan, math.nan)
        out.append({"task": task, "algorithm": algo, "kind": kind, "size": size,
                    "size_unit": unit, "n": int(values.size),
                    "mean": float(values.mean()) if values.size else math.nan,
                    "ci_lo": lo, "ci_hi": hi,
                    "std": float(values.std()) if values.size else math.nan,
                    "wall_time_mean_s": _mean([r["wall_time_s"] for r in members]),
                    "J_hat_mean": float(np.mean(j_hats)) if j_hats else None})
    first = {algo: i for i, algo in enumerate(dict.fromkeys(r["algorithm"] for r in rows))}
    return sorted(out, key=lambda r: (r["task"], first[r["algorithm"]], r["size"]))


def _mean(values: Sequence[float | None]) -> float:
    kept = [v for v in values if v is not None]
    return float(np.mean(kept)) if kept else math.nan


def format_table(summary: Sequence[Mapping[str, Any]]) -> str:
    """Markdown tables (offline against data size, online against environment steps): one line
    per algorithm, one column per size, ``mean [lo, hi]``, and the range of time per run."""
    tables = []
    for kind in ("offline", "online"):
        part = [r for r in summary if r["kind"] == kind]
        if not part:
            continue
        sizes = sorted({int(r["size"]) for r in part})
        unit = part[0]["size_unit"]
        cell = {(r["algorithm"], int(r["size"])): r for r in part}
        lines = [f"| {kind} ({unit}) | " + " | ".join(str(s) for s in sizes) + " | time per run |",
                 "|---" * (len(sizes) + 2) + "|"]
        for algo in dict.fromkeys(r["algorithm"] for r in part):
            parts, times = [], []
            for s in sizes:
                r = cell.get((algo, s))
                if r is None:
                    parts.append("")
                    continue
                parts.append(f"{r['mean']:.1f} [{r['ci_lo']:.1f}, {r['ci_hi']:.1f}]")
                times.append(r["wall_time_mean_s"])
            span = f"{_seconds(min(times))}-{_seconds(max(times))}" if times else ""
            lines.append(f"| {algo} | " + " | ".join(parts) + f" | {span} |")
        tables.append("\n".join(lines))
    return "\n\n".join(tables)


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"


# One colour per algorithm in every figure, chosen so that the algorithms drawn in one panel of
# the figure (its family, :data:`FAMILIES`) differ clearly: tab10 for the NOPG, d3rlpy and
# model-based panels, NOPG-S in red beside NOPG-D's blue, the online baselines in tab20c's darker
# shades. Other algorithms take tab20b's colours in order.
_COLORS = {
    "NOPG-D": "#1f77b4", "NOPG-S": "#d62728",
    "BC": "#ff7f0e", "TD3+BC": "#2ca02c", "IQL": "#9467bd", "CQL": "#8c564b", "BCQ": "#e377c2",
    "BEAR": "#bcbd22",
    "MOPO": "#7f7f7f", "MOReL": "#17becf", "PWIS": "#393b79",
    "DDPG": "#e6550d", "TD3": "#31a354", "SAC": "#756bb1",
}


def algorithm_colors(algorithms: Sequence[str]) -> dict[str, tuple[float, ...]]:
    """A distinct colour per algorithm (RGBA), the same one in every figure for the sweep's own
    algorithms (others take tab20b's colours in order; beyond those they repeat)."""
    from matplotlib import colormaps
    from matplotlib.colors import to_rgba

    known = {name: to_rgba(color) for name, color in _COLORS.items()}
    spare = [tuple(c) for c in colormaps["tab20b"].colors if tuple(c) + (1.0,) not in known.values()]
    out: dict[str, tuple[float, ...]] = {}
    extra = 0
    for name in algorithms:
        if name not in known:
            known[name] = to_rgba(spare[extra % len(spare)])
            extra += 1
        out[name] = known[name]
    return out


FAMILIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("NOPG", ("NOPG-D", "NOPG-S")),
    ("offline: d3rlpy", ("BC", "TD3+BC", "IQL", "CQL", "BCQ", "BEAR")),
    ("offline: model-based, PWIS", ("MOPO", "MOReL", "PWIS")),
    ("online", ("DDPG", "TD3", "SAC")),
)
"""The figure's panels: a family's name and its algorithms. An algorithm of none of them goes
to the last offline panel or to the online one, by its kind."""

_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")
_LINESTYLES = ("-", "--", "-.", (0, (1, 1)), (0, (5, 1, 1, 1, 1, 1)))
DODGE = 0.02
"""Within a panel the k-th of ``m`` algorithms is drawn ``DODGE * (k - (m - 1) / 2)`` of the
panel's width (log x) off its size, so that equal values at one size stay visible side by side."""


def figure_families(summary: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[str]]]:
    """The panels of the figure of ``summary``: ``[(family, [algorithm, ...]), ...]`` in the order
    of :data:`FAMILIES`, only families with an algorithm that has a finite mean."""
    drawn = [a for a in dict.fromkeys(r["algorithm"] for r in summary)
             if any(r["algorithm"] == a and math.isfinite(r["mean"]) for r in summary)]
    kind = {r["algorithm"]: r["kind"] for r in summary}
    panels: dict[str, list[str]] = {name: [] for name, _ in FAMILIES}
    for name, members in FAMILIES:
        panels[name] += [a for a in members if a in drawn]
    known = {a for _, members in FAMILIES for a in members}
    for algo in drawn:
        if algo not in known:
            panels[FAMILIES[-1][0] if kind[algo] == "online" else FAMILIES[-2][0]].append(algo)
    return [(name, algos) for name, algos in panels.items() if algos]


MAX_SIZE_TICKS = 8
"""Up to this many distinct sizes, the figure's x ticks are exactly the sizes measured."""


def seeds_phrase(summary: Sequence[Mapping[str, Any]]) -> str:
    """``"3 seeds"``, or ``"3-10 seeds per point"`` when the points have different counts."""
    counts = sorted({int(r["n"]) for r in summary})
    if len(counts) == 1:
        return f"{counts[0]} seed{'s' if counts[0] > 1 else ''}"
    return f"{counts[0]}-{counts[-1]} seeds per point"


def paper_points(summary: Sequence[Mapping[str, Any]], paper: Sequence[Mapping[str, Any]]
                 ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The paper's points (:func:`nopg.datasets.paper_curves`) of the summary's algorithms, inside
    the summary's range of offline data sizes: ``{algorithm: (sizes, means)}``."""
    sizes = [float(r["size"]) for r in summary if r["kind"] == "offline"]
    if not sizes:
        return {}
    algos = {r["algorithm"] for r in summary}
    out = {}
    for algo in dict.fromkeys(p["algorithm"] for p in paper):
        points = sorted((float(p["size"]), float(p["mean"])) for p in paper
                        if p["algorithm"] == algo and min(sizes) <= float(p["size"]) <= max(sizes))
        if algo in algos and points:
            out[algo] = (np.array([x for x, _ in points]), np.array([y for _, y in points]))
    return out


def sample_efficiency_figure(summary: Sequence[Mapping[str, Any]], title: str | None = None,
                             reference: float | None = None,
                             paper: Sequence[Mapping[str, Any]] = (),
                             figsize: tuple[float, float] = (7.5, 4.8)) -> Any:
    """The figure of :func:`plot_sample_efficiency` as a matplotlib ``Figure`` (not saved).

    One panel per algorithm family (:func:`figure_families`; one row of up to three, else two
    columns), all on one y axis; in each, every algorithm its own colour, marker and line style,
    its mean return against the size (log x) with the interval as an error bar, the points of one
    size spread slightly sideways (:data:`DODGE`). The legend lies below the panels, one column
    per family.
    """
    from ..viz.figures import pyplot

    families = figure_families(summary)
    if not families:
        raise ValueError("nothing to plot: no algorithm of the summary has a return")
    plt = pyplot()
    ncols = len(families) if len(families) <= 3 else 2
    nrows = math.ceil(len(families) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=figsize, sharey=True, squeeze=False,
                             layout="constrained")
    cells = list(axes.flat)
    colors = algorithm_colors([a for _, algos in families for a in algos])
    paper_lines = paper_points(summary, paper)
    offline_sizes = sorted({float(r["size"]) for r in summary if r["kind"] == "offline"})
    units = sorted({r["size_unit"] for r in summary if r["kind"] == "offline"}) or ["transitions"]
    columns = []
    for index, (ax, (family, algos)) in enumerate(zip(cells, families)):
        online = all(r["kind"] == "online" for r in summary if r["algorithm"] in algos)
        sizes = sorted({float(r["size"]) for r in summary if r["algorithm"] in algos}) if online \
            else offline_sizes
        entries = [(_legend_header(plt), family)]
        entries += _draw_family(ax, summary, algos, colors, paper_lines, _size_axis(plt, ax, sizes))
        if reference is not None:
            ref = ax.axhline(reference, color="k", lw=0.8, ls=":")
            if index == 0:
                entries.append((ref, "demonstrators"))
        ax.set_title(family, fontsize="medium")
        ax.grid(alpha=0.3, which="both")
        if ax.get_subplotspec().is_first_col():
            ax.set_ylabel("return")
        if index + ncols >= len(families):          # no panel below this one
            ax.set_xlabel("environment steps" if online else
                          f"data set size ({', '.join(units)})", fontsize="small")
        columns.append(entries)
    for ax in cells[len(families):]:
        ax.set_axis_off()
    _family_legend(plt, fig, columns)
    if title:
        fig.suptitle(title, fontsize="medium")
    return fig


def _draw_family(ax: Any, summary: Sequence[Mapping[str, Any]], algos: Sequence[str],
                 colors: Mapping[str, Any], paper_lines: Mapping[str, Any], span: float
                 ) -> list[tuple[Any, str]]:
    """One panel's algorithms (and the paper's means of them): ``[(handle, label), ...]``."""
    entries = []
    for k, algo in enumerate(algos):
        part = sorted((r for r in summary if r["algorithm"] == algo and math.isfinite(r["mean"])),
                      key=lambda r: r["size"])
        x = np.array([r["size"] for r in part], float)
        mean = np.array([r["mean"] for r in part], float)
        lo = np.nan_to_num(np.array([r["ci_lo"] for r in part], float), nan=mean)
        hi = np.nan_to_num(np.array([r["ci_hi"] for r in part], float), nan=mean)
        shift = 10 ** (DODGE * span * (k - (len(algos) - 1) / 2))
        line = ax.errorbar(x * shift, mean, yerr=[np.maximum(mean - lo, 0), np.maximum(hi - mean, 0)],
                           color=colors[algo], marker=_MARKERS[k % len(_MARKERS)],
                           ls=_LINESTYLES[k % len(_LINESTYLES)], ms=4.5, lw=1.4,
                           elinewidth=0.9, capsize=2, mfc="white" if k % 2 else colors[algo])
        entries.append((line, algo))
        if algo in paper_lines:
            px, pmean = paper_lines[algo]
            (paper_line,) = ax.plot(px, pmean, ls=":", lw=1.0, marker="x", ms=4,
                                    color=colors[algo], alpha=0.8)
            entries.append((paper_line, f"{algo}, paper"))
    return entries


def _family_legend(plt: Any, fig: Any, columns: Sequence[Sequence[tuple[Any, str]]]) -> Any:
    """The figure's legend below the panels, one column per family (its name in bold on top)."""
    rows = max(len(entries) for entries in columns)
    # The legend fills its columns first: pad every family's entries to one length.
    padded = [e for entries in columns
              for e in [*entries, *[(_legend_header(plt), "")] * (rows - len(entries))]]
    legend = fig.legend([h for h, _ in padded], [label for _, label in padded],
                        loc="outside lower center", ncol=len(columns), fontsize="small",
                        handlelength=2.6, frameon=False, columnspacing=1.5)
    headers = {entries[0][1] for entries in columns}
    for text in legend.get_texts():
        if text.get_text() in headers:
            text.set_fontweight("bold")
    return legend


def _legend_header(plt: Any) -> Any:
    """An invisible legend handle, so that a family's name heads its algorithms."""
    return plt.Line2D([], [], ls="none", marker="none")


def _size_axis(plt: Any, ax: Any, sizes: Sequence[float]) -> float:
    """Log x over ``sizes`` (a margin of a tenth of the span each side; up to
    :data:`MAX_SIZE_TICKS` sizes are ticked exactly, in plain numbers); returns the axis's
    width in decades."""
    ax.set_xscale("log")
    if not sizes:
        return 1.0
    lo, hi = math.log10(min(sizes)), math.log10(max(sizes))
    pad = max(0.1 * (hi - lo), 0.1)
    ax.set_xlim(10 ** (lo - pad), 10 ** (hi + pad))
    if len(sizes) <= MAX_SIZE_TICKS:
        ax.set_xticks(list(sizes), [f"{v:g}" for v in sizes])
        ax.xaxis.set_minor_formatter(plt.NullFormatter())
    return hi - lo + 2 * pad


def plot_sample_efficiency(summary: Sequence[Mapping[str, Any]], path: str | Path,
                           title: str | None = None, reference: float | None = None,
                           paper: Sequence[Mapping[str, Any]] = ()) -> Path:
    """Mean return and its interval against data size (log x), one panel per algorithm family.

    Offline algorithms are drawn against the data-set size, online ones (their own panel)
    against environment steps; the panels share the y axis, and every algorithm of a panel has
    its own colour, marker and line style (:func:`sample_efficiency_figure`). ``reference``
    draws a horizontal line (e.g. the demonstrators' return) in every panel; ``paper`` (rows of
    :func:`nopg.datasets.paper_curves`) draws the paper's means of the same algorithms as dotted
    lines with crosses ("paper": its mean over 10 trials), where they fall inside the measured
    sizes.
    """
    from ..viz.figures import save_figure

    if not summary:
        raise ValueError("nothing to plot: the summary is empty")
    return save_figure(sample_efficiency_figure(summary, title, reference, paper), path)
