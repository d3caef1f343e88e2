"""benchmarks/paper_curves.py: the paper's NOPG curves read from pgfplots source, and the verdicts."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "paper_curves.py"


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
