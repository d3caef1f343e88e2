"""scripts/paper_curves.py: the paper's NOPG curves read from pgfplots source, and the verdicts."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

_PATH = Path(__file__).resolve().parents[1] / "scripts" / "paper_curves.py"


@pytest.fixture(scope="module")
def curves():
    spec = importlib.util.spec_from_file_location("paper_curves", _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _axis(title: str, xmax: float, d_line: str, s_line: str) -> str:
    return rf"""\begin{{axis}}[
xmin=0, xmax={xmax},
title={{{title}}},
]
\path [draw=color0, fill=color0, opacity=0.1] (axis cs:200,-3800)
--(axis cs:200,-3700)
--(axis cs:450,-500)
--(axis cs:450,-700)
--(axis cs:200,-3800)
--cycle;
\addplot [semithick, color1, opacity=0.7]
table [row sep=\\]{{%
	200	-1.0 \\
}};
\addplot [semithick, color0, opacity=0.7, mark=*]
table [row sep=\\]{{%
{d_line}
}};
\addplot [semithick, green!50.19607843137255!black, opacity=0.7]
table [row sep=\\]{{%
{s_line}
}};
\end{{axis}}
"""


def test_extract_reads_lines_bands_and_flags_copied_tables(curves, tmp_path):
    d = "\t200\t-3750.0 \\\\\n\t450\t-600.0 \\\\"
    s = "\t200\t-3790.0 \\\\\n\t450\t-590.0 \\\\"
    c = "\t250\t7459.5 \\\\"
    tex = tmp_path / "paper.tex"
    tex.write_text(_axis("Pendulum-v0", 3200.0, d, s) + _axis("Pendulum-v0", 1e5, s, d)
                   + _axis("Quanser Cart-Pole", 5e4, c, s) + _axis("U-Maze", 5e4, c, s)
                   + _axis("Some other task", 10, d, s))
    rows = curves.extract(tex)
    by = {(r["task"], r["algorithm"], r["size"]): r for r in rows}
    assert {r["task"] for r in rows} == {"pendulum-grid", "pendulum-random", "cartpole-random",
                                         "umaze"}
    grid_d = by[("pendulum-grid", "NOPG-D", 450)]
    assert grid_d["mean"] == -600.0 and (grid_d["low"], grid_d["high"]) == (-700.0, -500.0)
    assert by[("pendulum-grid", "NOPG-S", 200)]["mean"] == -3790.0
    assert by[("pendulum-grid", "NOPG-S", 200)]["low"] == ""     # no NOPG-S band in the source
    assert by[("pendulum-random", "NOPG-D", 200)]["mean"] == -3790.0   # the colours decide
    assert all(r["note"] == "" for r in rows if r["task"] != "umaze")
    assert all("cartpole-random" in r["note"] for r in rows if r["task"] == "umaze")


def test_compare_verdicts(curves):
    paper = [{"task": "t", "algorithm": "NOPG-D", "size": s, "mean": m, "low": lo, "high": hi,
              "note": ""} for s, m, lo, hi in [(1, -500, -550, -450), (2, -500, -550, -450),
                                               (3, -500, -550, -450), (4, 9999.9, "", "")]]
    paper.append({"task": "t", "algorithm": "NOPG-D", "size": 5, "mean": 1, "low": "",
                  "high": "", "note": "other units"})
    ours = [{"task": "t", "algorithm": "NOPG-D", "size": str(s), "mean": m, "ci_lo": lo,
             "ci_hi": hi, "n": "3"} for s, m, lo, hi in
            [(1, -400, -450, -380), (2, -520, -600, -300), (3, -900, -1000, -800),
             (4, 7700, 5000, 9999.5), (5, 90, 80, 95)]]
    verdicts = {r["size"]: r["verdict"] for r in curves.compare(paper, ours)}
    assert verdicts == {1: "above", 2: "within", 3: "below", 4: "below"}


def test_packaged_paper_curves_hold_the_figures_values():
    from nopg.datasets import paper_curves

    grid = {(p["algorithm"], p["size"]): p for p in paper_curves("pendulum-grid")}
    assert grid[("NOPG-D", 450.0)]["mean"] == pytest.approx(-593.695486751082)
    assert grid[("NOPG-D", 450.0)]["low"] < -593.7 < grid[("NOPG-D", 450.0)]["high"]
    assert {a for a, _ in grid} == {"NOPG-D", "NOPG-S"}
    assert len(paper_curves("cartpole-random")) == 20
    assert paper_curves("umaze") == [] and paper_curves("mountaincar-human") == []


def test_paper_points_keep_the_summarys_algorithms_and_size_range():
    from nopg.experiments.sample_efficiency_report import paper_points

    summary = [{"algorithm": a, "kind": "offline", "size": s} for a in ("NOPG-D", "BC")
               for s in (250, 1000)]
    summary.append({"algorithm": "SAC", "kind": "online", "size": 5000})
    paper = [{"algorithm": a, "size": s, "mean": m} for a, s, m in
             [("NOPG-D", 100, 1.0), ("NOPG-D", 1000, 3.0), ("NOPG-D", 250, 2.0),
              ("NOPG-D", 5000, 4.0), ("NOPG-S", 250, 5.0)]]
    points = paper_points(summary, paper)
    assert list(points) == ["NOPG-D"]                       # NOPG-S is not in the summary
    np.testing.assert_array_equal(points["NOPG-D"][0], [250.0, 1000.0])   # sorted, in range
    np.testing.assert_array_equal(points["NOPG-D"][1], [2.0, 3.0])
    assert paper_points([{"algorithm": "SAC", "kind": "online", "size": 5000}], paper) == {}
