"""The paper's NOPG curves (§6.4 figures), read from the paper's LaTeX source, against our sweeps.

The paper's figures are pgfplots drawn from tables in its source: per task, one mean line per
algorithm (``\\addplot ... table {x y \\\\ ...}``) and a filled band (``\\path ... (axis cs:x,y)
-- ... --cycle``), the 95% interval over 10 trials. This script reads NOPG-D's and NOPG-S's
lines and bands (the figures' colours ``color0`` and ``green!50...!black``, as their legends say)
and writes one row per (task, algorithm, size)::

    python scripts/paper_curves.py extract ../shared/paper/nopg_paper.tex \\
        --out src/nopg/datasets/paper_nopg_curves.csv

and compares them with the summaries of ``nopg reproduce sample-efficiency`` / ``nopg
sweep-report`` (``summary.csv``) at the sizes both have::

    python scripts/paper_curves.py compare src/nopg/datasets/paper_nopg_curves.csv \\
        records/sample_efficiency_*_summary.csv

A size is "above" when our mean is at least the paper's mean, "within" when the paper's mean
lies inside our interval or ours inside the paper's band, and "below" otherwise. Two tasks need
care, and the extractor marks them in the ``note`` column: the source's U-Maze axis carries
the cart-pole's NOPG tables unchanged (its y-range, −10 to 200, clips them), so the paper has no
U-Maze NOPG curve to compare with; the mountain-car figure is in the paper's reward units (its
human baseline is −434.1 there, 82.4 in this project's MountainCarContinuous returns).
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from pathlib import Path

COLOURS = {"color0": "NOPG-D", "green!50.19607843137255!black": "NOPG-S"}
_AXIS = re.compile(r"\\begin\{axis\}")
_TITLE = re.compile(r"title=\{([^}]*)\}")
_XMAX = re.compile(r"xmax=([-\d.e+]+)")
_POINT = re.compile(r"axis cs:([-\d.e+]+),([-\d.e+]+)")
_ROW = re.compile(r"^\s*([-\d.e+]+)\s+([-\d.e+]+)\s*\\\\")
FIELDS = ("task", "algorithm", "size", "mean", "low", "high", "note")


def _task(title: str, xmax: float) -> str | None:
    if title == "Pendulum-v0":
        return "pendulum-grid" if xmax <= 3200 else "pendulum-random"
    return {"Quanser Cart-Pole": "cartpole-random", "U-Maze": "umaze",
            "Mountain Car": "mountaincar-human"}.get(title)


def _colour(line: str) -> str | None:
    for colour, algorithm in COLOURS.items():
        if re.search(r"[\[,=]\s*" + re.escape(colour) + r"\s*[,\]]", line):
            return algorithm
    return None


def _axes(lines: list[str]) -> list[tuple[str, list[str]]]:
    """(task, the axis's lines) for every axis whose title names a sweep task."""
    starts = [i for i, line in enumerate(lines) if _AXIS.search(line)] + [len(lines)]
    axes = []
    for a, b in zip(starts, starts[1:]):
        body = lines[a:b]
        head = "\n".join(body[:40])
        title, xmax = _TITLE.search(head), _XMAX.search(head)
        task = _task(title.group(1), float(xmax.group(1))) if title and xmax else None
        if task is not None:
            axes.append((task, body))
    return axes


def _curves(body: list[str]) -> tuple[dict[str, dict[float, float]], dict[str, dict[float, list]]]:
    """The NOPG mean lines and bands of one axis: {algorithm: {x: y}}, {algorithm: {x: [ys]}}."""
    means: dict[str, dict[float, float]] = {}
    bands: dict[str, dict[float, list[float]]] = {}
    i = 0
    while i < len(body):
        line = body[i]
        algorithm = _colour(line)
        if algorithm and line.lstrip().startswith("\\path") and "fill=" in line:
            band = bands.setdefault(algorithm, {})
            while True:
                for x, y in _POINT.findall(body[i]):
                    band.setdefault(float(x), []).append(float(y))
                if "cycle" in body[i] or i + 1 >= len(body):
                    break
                i += 1
        elif algorithm and line.lstrip().startswith("\\addplot") and algorithm not in means:
            rows, i = {}, i + 1
            if i < len(body) and body[i].lstrip().startswith("table"):
                i += 1
                while i < len(body) and "}" not in body[i]:
                    match = _ROW.match(body[i])
                    if match:
                        rows[float(match.group(1))] = float(match.group(2))
                    i += 1
            if rows:
                means[algorithm] = rows
            continue
        i += 1
    return means, bands


def extract(tex: Path) -> list[dict]:
    """One row per (task, algorithm, size) of the paper's NOPG-D/NOPG-S curves."""
    rows, seen = [], {}
    for task, body in _axes(tex.read_text().splitlines()):
        means, bands = _curves(body)
        signature = repr(sorted((a, sorted(m.items())) for a, m in means.items()))
        note = ""
        if signature in seen and seen[signature] != task:
            note = f"the source's tables are {seen[signature]}'s, unchanged: no curve of its own"
        seen.setdefault(signature, task)
        if task == "mountaincar-human":
            note = "the paper's reward units (human baseline -434.1 there, 82.4 here)"
        for algorithm, line in sorted(means.items()):
            for x, y in sorted(line.items()):
                ys = bands.get(algorithm, {}).get(x, [])
                rows.append({"task": task, "algorithm": algorithm, "size": int(x), "mean": y,
                             "low": min(ys) if ys else "", "high": max(ys) if ys else "",
                             "note": note})
    return rows


def compare(paper: list[dict], summaries: list[dict]) -> list[dict]:
    """Our mean and interval beside the paper's, where task, algorithm and size match."""
    ours = {(r["task"], r["algorithm"], int(r["size"])): r for r in summaries}
    out = []
    for p in paper:
        r = ours.get((p["task"], p["algorithm"], int(p["size"])))
        if r is None or p["note"]:
            continue
        mean, lo, hi = float(r["mean"]), float(r["ci_lo"]), float(r["ci_hi"])
        pm = float(p["mean"])
        plo = float(p["low"]) if p["low"] != "" else pm
        phi = float(p["high"]) if p["high"] != "" else pm
        verdict = "above" if mean >= pm else "within" if lo <= pm <= hi or plo <= mean <= phi \
            else "below"
        out.append({"task": p["task"], "algorithm": p["algorithm"], "size": int(p["size"]),
                    "paper": f"{pm:.1f} [{plo:.1f}, {phi:.1f}]",
                    "ours": f"{mean:.1f} [{lo:.1f}, {hi:.1f}]", "n_seeds": r.get("n", ""),
                    "verdict": verdict})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ext = sub.add_parser("extract", help="the paper's NOPG curves from its LaTeX source")
    ext.add_argument("tex", type=Path)
    ext.add_argument("--out", type=Path, required=True)
    cmp_ = sub.add_parser("compare", help="our summaries against the extracted curves")
    cmp_.add_argument("curves", type=Path)
    cmp_.add_argument("summaries", type=Path, nargs="+")
    args = parser.parse_args(argv)
    if args.command == "extract":
        rows = extract(args.tex)
        if not rows:
            raise SystemExit(f"no NOPG curves found in {args.tex}")
        with open(args.out, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=FIELDS)
            writer.writeheader()
            writer.writerows(rows)
        print(f"{len(rows)} points of {len({r['task'] for r in rows})} tasks -> {args.out}")
        return 0
    with open(args.curves, newline="") as f:
        paper = list(csv.DictReader(f))
    summaries = []
    for path in args.summaries:
        with open(path, newline="") as f:
            summaries += list(csv.DictReader(f))
    rows = compare(paper, summaries)
    print("| task | algorithm | size | paper (10 trials) | ours | seeds | verdict |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['task']} | {r['algorithm']} | {r['size']} | {r['paper']} | {r['ours']} | "
              f"{r['n_seeds']} | {r['verdict']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
