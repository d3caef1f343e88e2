"""The paper's gradient analysis on the LQG (paper §6.3, appendix "Gradient Analysis").

``nopg reproduce gradient-analysis`` compares NOPG-D, NOPG-S, G(PO)MDP+N, G(PO)MDP+BN and DPG+Q
against the exact gradient of the paper's LQG (target ``theta = [-0.6, -0.8]``, behaviour gain
``(1 - alpha) theta + alpha theta'`` with ``theta' = [-0.35, -0.5]``, ``Sigma = I``, 50-step
episodes, ``gamma = 0.9``) in three sweeps:

* ``samples``: data-set size at ``alpha = 0.5``;
* ``alpha``: off-policiness at ``sample_size`` transitions;
* ``bandwidth``: NOPG with every bandwidth equal to ``kappa`` at ``sample_size`` transitions and
  ``alpha = 0.5`` (NOPG estimators only: the others have no bandwidth).

Every point draws ``n_seeds`` independent data sets; every estimator sees the same data sets.
Bias^2, variance and MSE against the exact gradient and the angle to it come with bootstrap
percentile intervals (:mod:`nopg.analysis.statistics`). Data sets run in parallel on local
processes or on Ray (``ray_address``).

Outputs in the run folder: ``estimates.csv`` (every estimate, long format), ``summary.csv`` (one
row per sweep, value and estimator), ``<sweep>.png`` (bias^2, variance, MSE and the angle
distributions, as the paper's figure), ``summary.json`` and ``run.log``.

Reduced default: 50 data sets per point (the paper uses 1000-5000) and sample sizes up to 2500;
:meth:`GradientAnalysisConfig.paper_size` gives 1000 data sets per point and sizes up to 5000.

Measured results, and where they differ from the paper: ``docs/experiments.md`` and the
README's results.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..analysis.lqg_cases import ESTIMATOR_NAMES, lqg_cases
from ..analysis.parallel import parallel_map
from ..envs.lqg import LQG, PAPER_BEHAVIOUR_THETA, PAPER_THETA, collect_lqg, paper_lqg
from ..model.config import ModelConfig, keyword_config
from .common import checked_replace, nests_model
from .runner import run_log

__all__ = ["GradientAnalysisConfig", "SWEEPS", "run_gradient_analysis"]

logger = logging.getLogger(__name__)

SWEEPS: tuple[str, ...] = ("samples", "alpha", "bandwidth")
NOPG_NAMES = ("NOPG-D", "NOPG-S")
_TUPLE_FIELDS = ("theta", "behaviour_theta", "estimators", "sweeps", "sample_sizes", "alphas",
                 "bandwidths")


@nests_model
@dataclass(frozen=True)
class GradientAnalysisConfig:
    """Settings of the gradient analysis (defaults: the paper's LQG, a reduced seed count).

    Attributes
    ----------
    theta, behaviour_theta : tuple of float
        Target gain and the off-policy gain ``theta'``.
    sigma : float
        Standard deviation of the behaviour policy and of the stochastic target policy.
    horizon : int
        Steps per episode (and of the exact gradient).
    gamma : float
    system : dict, optional
        Another LQG: ``{"A": ..., "B": ..., "Q": ..., "R": ..., "s0": ...}`` (and optionally
        ``transition_std``); default the paper's.
    estimators : tuple of str
        Subset of ``NOPG-D, NOPG-S, G(PO)MDP+N, G(PO)MDP+BN, DPG+Q``.
    sweeps : tuple of str
        Subset of ``samples, alpha, bandwidth``.
    sample_sizes : tuple of int
        Transitions per data set in the ``samples`` sweep (multiples of ``horizon``).
    alphas : tuple of float
        Off-policiness values of the ``alpha`` sweep.
    bandwidths : tuple of float
        ``kappa`` values of the ``bandwidth`` sweep.
    alpha : float
        Off-policiness of the ``samples`` and ``bandwidth`` sweeps.
    sample_size : int
        Transitions per data set of the ``alpha`` and ``bandwidth`` sweeps.
    bandwidth : float
        NOPG's bandwidth ``kappa`` in the ``samples`` and ``alpha`` sweeps (0.2: the value of
        least NOPG-S MSE in the bandwidth sweep at 1000 samples, measured in this repository).
    n_seeds : int
        Independent data sets per point.
    seed : int
        Base seed; every data set's seed derives from it, the sweep and the point.
    model : ModelConfig
        NOPG's model settings (default :data:`nopg.model.config.KEYWORD_DEFAULTS`: the dense ``P``,
        ``n_mc_policy=10`` Monte-Carlo actions per state for NOPG-S); ``stochastic`` is set per
        estimator. The former names ``n_mc_policy`` and ``top_k`` are accepted as settings.
    dpg_discounting : {"improper", "proper"}
    n_boot : int
        Bootstrap resamples of the confidence intervals.
    confidence : float
        Level of the bootstrap percentile intervals.
    """

    theta: tuple[float, ...] = tuple(PAPER_THETA.tolist())
    behaviour_theta: tuple[float, ...] = tuple(PAPER_BEHAVIOUR_THETA.tolist())
    sigma: float = 1.0
    horizon: int = 50
    gamma: float = 0.9
    system: dict[str, Any] | None = None
    estimators: tuple[str, ...] = ESTIMATOR_NAMES
    sweeps: tuple[str, ...] = SWEEPS
    sample_sizes: tuple[int, ...] = (100, 250, 500, 1000, 2500)
    alphas: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    bandwidths: tuple[float, ...] = (0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0)
    alpha: float = 0.5
    sample_size: int = 1000
    bandwidth: float = 0.2
    n_seeds: int = 50
    seed: int = 0
    model: ModelConfig = field(default_factory=keyword_config)
    dpg_discounting: str = "improper"
    n_boot: int = 10_000
    confidence: float = 0.95

    MODEL_ALIASES: ClassVar[tuple[str, ...]] = ("n_mc_policy", "top_k")

    def __post_init__(self) -> None:
        for name in _TUPLE_FIELDS:
            value = getattr(self, name)
            if isinstance(value, (str, int, float)):
                value = (value,)
            object.__setattr__(self, name, tuple(value))
        unknown = sorted(set(self.estimators) - set(ESTIMATOR_NAMES))
        if unknown or not self.estimators:
            raise ValueError(f"estimators must be a non-empty subset of {list(ESTIMATOR_NAMES)}; "
                             f"unknown: {unknown}")
        bad = sorted(set(self.sweeps) - set(SWEEPS))
        if bad or not self.sweeps:
            raise ValueError(f"sweeps must be a non-empty subset of {list(SWEEPS)}; unknown: {bad}")
        if self.horizon < 1 or self.n_seeds < 2 or self.n_boot < 1:
            raise ValueError("horizon and n_boot must be >= 1 and n_seeds >= 2; got "
                             f"{self.horizon}, {self.n_boot}, {self.n_seeds}")
        for size in (*self.sample_sizes, self.sample_size):
            if int(size) < self.horizon or int(size) % self.horizon:
                raise ValueError(f"sample sizes must be positive multiples of the horizon "
                                 f"({self.horizon}); got {size}")
        for a in (*self.alphas, self.alpha):
            if not 0.0 <= float(a) <= 1.0:
                raise ValueError(f"alpha values must lie in [0, 1]; got {a}")
        for k in (*self.bandwidths, self.bandwidth):
            if not float(k) > 0.0:
                raise ValueError(f"bandwidths must be positive; got {k}")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError(f"confidence must lie in (0, 1); got {self.confidence}")
        if "bandwidth" in self.sweeps and not set(self.estimators) & set(NOPG_NAMES):
            raise ValueError("the bandwidth sweep needs NOPG-D or NOPG-S among the estimators")
        self.problem()  # validates theta, the system and the stability of the gains

    @classmethod
    def paper_size(cls, **changes: Any) -> GradientAnalysisConfig:
        """The paper's scale: 1000 data sets per point, sample sizes up to 5000."""
        base = dict(n_seeds=1000, sample_sizes=(100, 250, 500, 1000, 2500, 5000),
                    alphas=(0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0))
        return cls(**{**base, **changes})

    def replace(self, **changes: Any) -> GradientAnalysisConfig:
        """A validated copy with the named fields replaced (ValueError on unknown names)."""
        return checked_replace(self, changes, "gradient-analysis")

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {**out, "model": dataclasses.asdict(self.model)}

    def problem(self) -> LQG:
        """The LQG of this configuration (checks that both gains are stabilising)."""
        if self.system is None:
            problem = paper_lqg()
            if self.gamma != problem.gamma:
                problem = dataclasses.replace(problem, gamma=float(self.gamma))
        else:
            problem = LQG(**{**dict(self.system), "gamma": float(self.gamma)})
        for name in ("theta", "behaviour_theta"):
            problem.gain(getattr(self, name))
        for a in (*self.alphas, self.alpha):
            problem.check_stable(self.behaviour_gain(float(a)))
        problem.check_stable(np.asarray(self.theta))
        return problem

    def behaviour_gain(self, alpha: float) -> np.ndarray:
        """``(1 - alpha) theta + alpha theta'``."""
        return (1.0 - alpha) * np.asarray(self.theta) + alpha * np.asarray(self.behaviour_theta)

    def points(self, sweep: str) -> list[tuple[float, int, float, float]]:
        """``(x, sample_size, alpha, kappa)`` of every point of ``sweep``."""
        if sweep == "samples":
            return [(float(n), int(n), self.alpha, self.bandwidth) for n in self.sample_sizes]
        if sweep == "alpha":
            return [(float(a), self.sample_size, float(a), self.bandwidth) for a in self.alphas]
        return [(float(k), self.sample_size, self.alpha, float(k)) for k in self.bandwidths]

    def sweep_estimators(self, sweep: str) -> tuple[str, ...]:
        if sweep == "bandwidth":
            return tuple(n for n in self.estimators if n in NOPG_NAMES)
        return self.estimators


def _job(job: dict[str, Any]) -> dict[str, Any]:
    """One data set of one point: every estimator's gradient (runs in a worker)."""
    config = GradientAnalysisConfig(**job["config"])
    problem = config.problem()
    behaviour = config.behaviour_gain(job["alpha"])
    data = collect_lqg(theta=np.asarray(config.theta), sigma=config.sigma,
                       n_episodes=job["size"] // config.horizon, horizon=config.horizon,
                       seed=job["data_seed"], alpha=job["alpha"],
                       behaviour_theta=np.asarray(config.behaviour_theta), problem=problem)
    cases = lqg_cases(problem, config.theta, behaviour, sigma=config.sigma, horizon=config.horizon,
                      bandwidth=job["kappa"], names=job["names"], config=config.model,
                      dpg_discounting=config.dpg_discounting,
                      seed=job["data_seed"])
    out: dict[str, Any] = {"estimates": {}, "seconds": {}}
    for name, case in cases.items():
        start = time.perf_counter()
        out["estimates"][name] = case.estimate(data)
        out["seconds"][name] = time.perf_counter() - start
    return out


def _truths(config: GradientAnalysisConfig) -> dict[str, np.ndarray]:
    cases = lqg_cases(config.problem(), config.theta, config.theta, sigma=config.sigma,
                      horizon=config.horizon, names=config.estimators)
    return {name: case.truth for name, case in cases.items()}


def _jobs(config: GradientAnalysisConfig) -> list[dict[str, Any]]:
    jobs = []
    cfg = config.to_dict()
    for sweep in config.sweeps:
        for p, (x, size, alpha, kappa) in enumerate(config.points(sweep)):
            for r in range(config.n_seeds):
                data_seed = int(np.random.SeedSequence([config.seed, SWEEPS.index(sweep), p, r]
                                                       ).generate_state(1)[0])
                jobs.append(dict(config=cfg, sweep=sweep, x=x, point=p, replicate=r, size=size,
                                 alpha=alpha, kappa=kappa, data_seed=data_seed,
                                 names=config.sweep_estimators(sweep)))
    return jobs


def _write_estimates(path: Path, jobs: list[dict[str, Any]], outputs: list[dict[str, Any]],
                     truths: dict[str, np.ndarray]) -> None:
    p = len(next(iter(truths.values())))
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["sweep", "x", "replicate", "data_seed", "estimator", "seconds",
                         *[f"g{i}" for i in range(p)], *[f"truth{i}" for i in range(p)]])
        for job, out in zip(jobs, outputs):
            for name, g in out["estimates"].items():
                writer.writerow([job["sweep"], job["x"], job["replicate"], job["data_seed"], name,
                                 f"{out['seconds'][name]:.6f}", *[repr(float(v)) for v in g],
                                 *[repr(float(v)) for v in truths[name]]])


def _assemble(config: GradientAnalysisConfig, jobs: list[dict[str, Any]],
              outputs: list[dict[str, Any]], truths: dict[str, np.ndarray]) -> dict[str, Any]:
    """``{sweep: {estimator: {"truth", "values", "estimates" (points, seeds, p)}}}``."""
    results: dict[str, Any] = {}
    p = len(next(iter(truths.values())))
    for sweep in config.sweeps:
        points = config.points(sweep)
        results[sweep] = {}
        for name in config.sweep_estimators(sweep):
            est = np.full((len(points), config.n_seeds, p), np.nan)
            results[sweep][name] = {"truth": truths[name], "values": [pt[0] for pt in points],
                                    "estimates": est}
    for job, out in zip(jobs, outputs):
        for name, g in out["estimates"].items():
            results[job["sweep"]][name]["estimates"][job["point"], job["replicate"]] = g
    return results


def _headline(rows: list[dict[str, Any]], config: GradientAnalysisConfig) -> dict[str, Any]:
    """MSE ratios of G(PO)MDP over NOPG at ``alpha`` (the samples sweep) and the angles."""
    out: dict[str, Any] = {}
    by_key = {(r["sweep"], float(r["x"]), r["estimator"]): r for r in rows}
    for n in config.sample_sizes:
        point: dict[str, Any] = {}
        for name in config.estimators:
            r = by_key.get(("samples", float(n), name))
            if r is not None:
                point[name] = {k: r[k] for k in ("mse", "mse_lo", "mse_hi", "relative_mse",
                                                 "angle_median", "angle_mean", "bias2", "variance")}
        for nopg in NOPG_NAMES:
            for other in ("G(PO)MDP+N", "G(PO)MDP+BN"):
                if nopg in point and other in point:
                    point[f"mse_ratio {other} / {nopg}"] = point[other]["mse"] / point[nopg]["mse"]
                    point[f"relative_mse_ratio {other} / {nopg}"] = (
                        point[other]["relative_mse"] / point[nopg]["relative_mse"])
        if point:
            out[f"samples={n}"] = point
    return out


def run_gradient_analysis(config: GradientAnalysisConfig | None = None, out: str | Path = "results",
                          progress: bool = True, run_name: str | None = None,
                          workers: int | None = None, ray_address: str | None = None
                          ) -> dict[str, Any]:
    """Run the sweeps of ``config`` and write the run folder; returns the summary.

    Parameters
    ----------
    config : GradientAnalysisConfig, optional
    out : path
        Parent folder of the run folder ``gradient-analysis__<time>`` (or ``run_name``).
    progress : bool
    run_name : str, optional
    workers : int, optional
        Local worker processes (default: all available cores).
    ray_address : str, optional
        Run the data sets on Ray (``"local"``, ``"auto"`` or a cluster address).
    """
    from ..analysis.statistics import summary_rows, write_csv
    from ..viz.gradient_plots import plot_gradient_sweep

    config = config or GradientAnalysisConfig()
    run_dir = Path(out) / (run_name or f"gradient-analysis__{time.strftime('%Y%m%d-%H%M%S')}")
    run_dir.mkdir(parents=True, exist_ok=True)
    with run_log(run_dir):
        (run_dir / "config.json").write_text(json.dumps(
            {"experiment": "gradient-analysis", **config.to_dict()}, indent=2, default=str))
        truths = _truths(config)
        for name, g in truths.items():
            logger.info("exact gradient for %s: %s", name, np.array2string(g, precision=6))
        jobs = _jobs(config)
        logger.info("gradient analysis: %d data sets (%s), workers=%s, ray=%s", len(jobs),
                    ", ".join(f"{s}: {len(config.points(s))} points" for s in config.sweeps),
                    workers, ray_address)
        start = time.perf_counter()
        outputs = parallel_map(_job, jobs, workers=workers, ray_address=ray_address,
                               progress=progress, desc="data sets")
        elapsed = time.perf_counter() - start
        _write_estimates(run_dir / "estimates.csv", jobs, outputs, truths)
        results = _assemble(config, jobs, outputs, truths)
        rows = summary_rows(results, n_boot=config.n_boot, confidence=config.confidence,
                            seed=config.seed)
        write_csv(rows, run_dir / "summary.csv")
        for r in rows:
            logger.info("%s=%g %-12s bias2 %.4g  variance %.4g  MSE %.4g [%.4g, %.4g]  angle median "
                        "%.1f deg", r["sweep"], r["x"], r["estimator"], r["bias2"], r["variance"],
                        r["mse"], r["mse_lo"], r["mse_hi"], r["angle_median"])
        plots = [str(plot_gradient_sweep(rows, results, s, run_dir / f"{s}.png",
                                         title=f"LQG gradient analysis: {s} sweep"))
                 for s in config.sweeps]
        seconds = {name: float(np.mean([o["seconds"][name] for o in outputs if name in o["seconds"]]))
                   for name in config.estimators}
        summary = {"experiment": "gradient-analysis", "run_dir": str(run_dir),
                   "n_data_sets": len(jobs), "wall_time_s": elapsed,
                   "seconds_per_estimate": seconds,
                   "truth": {k: v.tolist() for k, v in truths.items()},
                   "headline": _headline(rows, config), "plots": plots}
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        logger.info("gradient analysis done in %.1f s; results in %s", elapsed, run_dir)
        return summary
