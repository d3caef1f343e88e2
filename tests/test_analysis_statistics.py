"""Error statistics of gradient estimates (bias², variance, MSE, angles) and their bootstrap."""

from __future__ import annotations

import csv
import logging
import math

import numpy as np
import pytest

from nopg.analysis import statistics as st
from nopg.analysis.statistics import (
    CSV_COLUMNS,
    angles_degrees,
    error_statistics,
    rank_correlation,
    read_csv,
    summary_rows,
    write_csv,
)
from nopg.viz.gradient_plots import ESTIMATOR_ORDER, estimator_colors, plot_gradient_sweep

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TRUTH = np.array([-1.0, 0.5])


def heavy_tailed(m: int, seed: int, shift=(0.3, -0.2)) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return TRUTH + np.asarray(shift) + rng.standard_t(3, size=(m, 2)) * [1.0, 0.4]


# ---------------------------------------------------------------- angles


def test_angles_known_cases():
    est = np.array([[0.0, 1.0], [-2.0, 0.0], [3.0, 0.0], [1.0, 1.0], [0.0, 0.0], [1.0, -1.0]])
    got = angles_degrees(est, [1.0, 0.0])
    np.testing.assert_allclose(got[[0, 1, 2, 3, 5]], [90.0, 180.0, 0.0, 45.0, 45.0], atol=1e-12)
    assert math.isnan(got[4])  # zero estimate
    assert np.isnan(angles_degrees(est, [0.0, 0.0])).all()  # zero truth: undefined


def test_angles_match_arccos_and_are_exact_for_identical_vectors():
    rng = np.random.default_rng(0)
    est, truth = rng.normal(size=(200, 3)), rng.normal(size=3)
    cos = est @ truth / (np.linalg.norm(est, axis=1) * np.linalg.norm(truth))
    np.testing.assert_allclose(angles_degrees(est, truth), np.degrees(np.arccos(cos)), atol=1e-9)
    same = np.array([truth, 7.5 * truth, -truth])
    np.testing.assert_allclose(angles_degrees(same, truth), [0.0, 0.0, 180.0], atol=1e-12)


# ---------------------------------------------------------------- point values


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mse_is_bias2_plus_variance_and_matches_numpy(seed):
    est = heavy_tailed(60, seed)
    s = error_statistics(est, TRUTH, n_boot=200, seed=seed)
    assert s.mse == pytest.approx(s.bias2 + s.variance, rel=1e-14)
    assert s.mse == pytest.approx(np.mean(np.sum((est - TRUTH) ** 2, axis=1)), rel=1e-12)
    assert s.bias2 == pytest.approx(np.sum((est.mean(0) - TRUTH) ** 2), rel=1e-12)
    assert s.variance == pytest.approx(np.trace(np.cov(est.T, bias=True)), rel=1e-12)
    assert s.relative_mse == pytest.approx(s.mse / (TRUTH @ TRUTH), rel=1e-14)
    angles = angles_degrees(est, TRUTH)
    assert s.angle_mean == pytest.approx(angles.mean()) and s.angle_median == pytest.approx(np.median(angles))
    assert (s.n, s.n_dropped) == (60, 0)


def test_estimates_equal_truth_give_zeros():
    s = error_statistics(np.tile(TRUTH, (10, 1)), TRUTH, n_boot=100)
    for name in st.STATISTICS:
        assert getattr(s, name) == pytest.approx(0.0, abs=1e-12), name
        assert getattr(s, f"{name}_ci") == pytest.approx((0.0, 0.0), abs=1e-12), name


def test_constant_offset_is_pure_bias():
    offset = np.array([0.3, -0.4])  # ||offset||^2 = 0.25
    s = error_statistics(np.tile(TRUTH + offset, (25, 1)), TRUTH, n_boot=100)
    assert s.bias2 == pytest.approx(0.25, rel=1e-12)
    assert s.variance == pytest.approx(0.0, abs=1e-15)
    assert s.mse == pytest.approx(0.25, rel=1e-12)
    assert s.bias2_ci == pytest.approx((0.25, 0.25), rel=1e-12)
    cos = (TRUTH + offset) @ TRUTH / np.linalg.norm(TRUTH + offset) / np.linalg.norm(TRUTH)
    expected = np.degrees(np.arccos(cos))
    assert s.angle_median == pytest.approx(expected, rel=1e-10)


# ---------------------------------------------------------------- bootstrap


def test_resampler_matches_naive_loop():
    est = heavy_tailed(37, 5)
    d = est - TRUTH
    dbar = d.mean(0)
    cn = np.sum((d - dbar) ** 2, axis=1)
    angles = angles_degrees(est, TRUTH)
    idx = np.random.default_rng(1).integers(0, 37, size=(20, 37))
    got = st._resampled_values(np.ascontiguousarray(d.T), cn, dbar, angles, TRUTH @ TRUTH, idx)
    for b in range(20):
        g = est[idx[b]]
        assert got["bias2"][b] == pytest.approx(np.sum((g.mean(0) - TRUTH) ** 2), rel=1e-10)
        assert got["variance"][b] == pytest.approx(np.trace(np.cov(g.T, bias=True)), rel=1e-10)
        assert got["mse"][b] == pytest.approx(np.mean(np.sum((g - TRUTH) ** 2, axis=1)), rel=1e-10)
        assert got["angle_mean"][b] == pytest.approx(angles[idx[b]].mean(), rel=1e-12)
        assert got["angle_median"][b] == pytest.approx(np.median(angles[idx[b]]), rel=1e-12)


def test_batching_does_not_change_the_result(monkeypatch):
    est = heavy_tailed(50, 3)
    full = error_statistics(est, TRUTH, n_boot=300, seed=4)
    monkeypatch.setattr(st, "_BATCH_ELEMENTS", 50 * 7)  # 7 resamples per batch, last one partial
    assert error_statistics(est, TRUTH, n_boot=300, seed=4) == full


def gaussian(m: int, seed: int) -> np.ndarray:
    """Biased (by (1, 1)) Gaussian estimates: light tails, so every interval shrinks like 1/sqrt(m)."""
    return TRUTH + 1.0 + np.random.default_rng(seed).normal(size=(m, 2)) * [1.0, 0.4]


def test_ci_contains_point_and_shrinks_with_m():
    small = error_statistics(gaussian(50, 0), TRUTH, n_boot=2000, seed=0)
    large = error_statistics(gaussian(2000, 0), TRUTH, n_boot=2000, seed=0)
    for s in (small, large):
        for name in st.STATISTICS:
            lo, hi = getattr(s, f"{name}_ci")
            assert lo <= getattr(s, name) <= hi, name
    for name in st.STATISTICS:
        w_small = np.diff(getattr(small, f"{name}_ci"))[0]
        w_large = np.diff(getattr(large, f"{name}_ci"))[0]
        assert w_large < w_small / 2.5, name  # ~ sqrt(40) = 6.3 expected


def test_wider_confidence_gives_wider_interval():
    est = heavy_tailed(80, 2)
    narrow = error_statistics(est, TRUTH, n_boot=2000, confidence=0.5)
    wide = error_statistics(est, TRUTH, n_boot=2000, confidence=0.99)
    assert wide.mse_ci[0] < narrow.mse_ci[0] < narrow.mse_ci[1] < wide.mse_ci[1]


def test_variance_ci_covers_the_true_variance():
    cov = np.array([[1.0, 0.6], [0.6, 2.0]])
    m, reps = 200, 50
    true_var = np.trace(cov) * (m - 1) / m  # expectation of the 1/m estimator
    chol = np.linalg.cholesky(cov)
    covered = 0
    for rep in range(reps):
        rng = np.random.default_rng(100 + rep)
        est = TRUTH + rng.normal(size=(m, 2)) @ chol.T
        lo, hi = error_statistics(est, TRUTH, n_boot=500, seed=rep).variance_ci
        covered += lo <= true_var <= hi
    assert covered >= 0.8 * reps  # nominal 95%; percentile intervals undercover a little


# ---------------------------------------------------------------- non-finite rows, errors


def test_nonfinite_rows_are_dropped_counted_and_logged(caplog):
    est = heavy_tailed(40, 7)
    bad = est.copy()
    bad[[3, 11, 20]] = [[np.inf, 0.0], [np.nan, 1.0], [1.0, -np.inf]]
    with caplog.at_level(logging.WARNING, logger="nopg.analysis.statistics"):
        s = error_statistics(bad, TRUTH, n_boot=300, seed=1)
    assert (s.n, s.n_dropped) == (37, 3)
    assert "Dropped 3 of 40" in caplog.text
    clean = error_statistics(np.delete(est, [3, 11, 20], axis=0), TRUTH, n_boot=300, seed=1)
    assert s.mse == clean.mse and s.mse_ci == clean.mse_ci and s.angle_median_ci == clean.angle_median_ci


def test_zero_estimates_are_ignored_by_the_angle_statistics_only():
    est = heavy_tailed(30, 8)
    est[[0, 5]] = 0.0
    s = error_statistics(est, TRUTH, n_boot=300)
    assert s.n == 30 and s.mse == pytest.approx(np.mean(np.sum((est - TRUTH) ** 2, axis=1)))
    angles = angles_degrees(est[[i for i in range(30) if i not in (0, 5)]], TRUTH)
    assert s.angle_median == pytest.approx(np.median(angles))
    assert s.angle_median_ci[0] <= s.angle_median <= s.angle_median_ci[1]


@pytest.mark.parametrize(
    ("estimates", "truth", "kwargs", "match"),
    [
        (np.zeros(5), TRUTH, {}, "shape"),
        (np.zeros((5, 2)), np.zeros(3), {}, "shape"),
        (np.zeros((1, 2)), TRUTH, {}, "m = 2"),
        (np.zeros((5, 2)), [np.nan, 1.0], {}, "finite"),
        (np.zeros((5, 2)), TRUTH, {"confidence": 1.0}, "confidence"),
        (np.zeros((5, 2)), TRUTH, {"confidence": 0.0}, "confidence"),
        (np.zeros((5, 2)), TRUTH, {"n_boot": 0}, "n_boot"),
        (np.zeros((5, 2)), TRUTH, {"n_boot": 2.5}, "n_boot"),
        (np.array([[np.nan, 0.0], [0.0, 0.0]]), TRUTH, {}, "Fewer than 2 finite"),
    ],
)
def test_errors(estimates, truth, kwargs, match):
    with pytest.raises(ValueError, match=match):
        error_statistics(estimates, truth, **kwargs)


# ---------------------------------------------------------------- rows, CSV, figure


def fake_results(m: int = 5) -> dict:
    rng = np.random.default_rng(0)
    out = {}
    for sweep, values in (("samples", [10, 100, 1000]), ("alpha", [0.0, 0.5, 1.0])):
        out[sweep] = {
            name: {"truth": TRUTH + k, "values": values,
                   "estimates": TRUTH + k + rng.normal(scale=0.5 + k, size=(3, m, 2))}
            for k, name in enumerate(("NOPG-D", "G(PO)MDP+N"))
        }
    return out


def test_summary_rows_and_csv_round_trip(tmp_path):
    results = fake_results()
    results["alpha"]["G(PO)MDP+N"]["estimates"][1, 2] = np.nan
    rows = summary_rows(results, n_boot=200, confidence=0.9, seed=3)
    assert len(rows) == 2 * 3 * 2
    assert [tuple(r) for r in rows] == [CSV_COLUMNS] * len(rows)
    assert [(r["sweep"], r["x"], r["estimator"]) for r in rows[:4]] == [
        ("samples", 10, "NOPG-D"), ("samples", 10, "G(PO)MDP+N"),
        ("samples", 100, "NOPG-D"), ("samples", 100, "G(PO)MDP+N"),
    ]
    cell = error_statistics(results["alpha"]["G(PO)MDP+N"]["estimates"][1], TRUTH + 1, 200, 0.9, 3)
    row = next(r for r in rows if (r["sweep"], r["x"], r["estimator"]) == ("alpha", 0.5, "G(PO)MDP+N"))
    assert row == {"sweep": "alpha", "x": 0.5, "estimator": "G(PO)MDP+N", **cell.as_dict()}
    assert (row["n"], row["n_dropped"]) == (4, 1)

    path = write_csv(rows, tmp_path / "out" / "stats.csv")
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        assert tuple(reader.fieldnames) == CSV_COLUMNS
        raw = list(reader)
    assert len(raw) == len(rows)
    for back, orig in zip(raw, rows, strict=True):
        assert back["sweep"] == orig["sweep"] and back["estimator"] == orig["estimator"]
        for key in CSV_COLUMNS[3:]:
            assert float(back[key]) == orig[key], key  # exact: floats are written with repr
    parsed = read_csv(path)
    assert parsed[5]["mse_hi"] == rows[5]["mse_hi"] and parsed[5]["n"] == rows[5]["n"]


def test_summary_rows_errors():
    with pytest.raises(ValueError, match="non-empty"):
        summary_rows({}, 10, 0.95, 0)
    bad = fake_results()
    bad["samples"]["NOPG-D"]["estimates"] = np.zeros((2, 5, 2))  # 3 values
    with pytest.raises(ValueError, match=r"results\['samples'\]\['NOPG-D'\].*shape"):
        summary_rows(bad, 10, 0.95, 0)
    del bad["samples"]["NOPG-D"]["truth"]
    with pytest.raises(ValueError, match="truth"):
        summary_rows(bad, 10, 0.95, 0)
    with pytest.raises(ValueError, match="empty"):
        write_csv([], "unused.csv")


def test_estimator_colors_fixed_and_distinct():
    colors = estimator_colors(["zeta", "DPG+Q", "NOPG-D", "alpha-est"])
    assert list(colors) == ["NOPG-D", "DPG+Q", "alpha-est", "zeta"]
    full = estimator_colors(ESTIMATOR_ORDER)
    assert colors["DPG+Q"] == full["DPG+Q"] and colors["NOPG-D"] == full["NOPG-D"]
    assert len(set(colors.values())) == 4 and len(set(full.values())) == 5


@pytest.mark.parametrize("sweep", ["samples", "alpha"])
def test_plot_gradient_sweep_writes_png(tmp_path, sweep):
    results = fake_results(m=5)
    rows = summary_rows(results, n_boot=50, confidence=0.95, seed=0)
    path = plot_gradient_sweep(rows, results, sweep, tmp_path / f"{sweep}.png", title="test")
    assert path.is_file() and path.stat().st_size > 1000
    assert path.read_bytes()[:8] == PNG_MAGIC
    csv_rows = read_csv(write_csv(rows, tmp_path / "rows.csv"))  # rows read back also plot
    assert plot_gradient_sweep(csv_rows, results, sweep, tmp_path / "again.png").stat().st_size > 1000


def test_plot_gradient_sweep_errors(tmp_path):
    results = fake_results()
    rows = summary_rows(results, n_boot=20, confidence=0.95, seed=0)
    with pytest.raises(ValueError, match="Unknown sweep"):
        plot_gradient_sweep(rows, results, "bandwidth", tmp_path / "x.png")
    with pytest.raises(ValueError, match="No row"):
        alpha_rows = [r for r in rows if r["sweep"] == "alpha"]
        plot_gradient_sweep(alpha_rows, results, "samples", tmp_path / "x.png")


def test_rank_correlation_is_spearmans_rho_and_none_where_undefined():
    # 1 - 6 sum d^2 / (n (n^2 - 1)) with one swapped pair: 1 - 6 * 2 / 60
    assert rank_correlation([1, 2, 3, 4], [10, 30, 20, 40]) == pytest.approx(0.8, abs=1e-12)
    assert rank_correlation([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0, abs=1e-12)
    assert rank_correlation([0.1, 5, 7], np.exp([0.1, 5, 7])) == pytest.approx(1.0, abs=1e-12)
    assert rank_correlation([1, 2], [1, 2]) is None                     # too few pairs
    assert rank_correlation([1, 1, 1], [1, 2, 3]) is None               # no spread
    with pytest.raises(ValueError, match="paired"):
        rank_correlation([1, 2, 3], [1, 2])
