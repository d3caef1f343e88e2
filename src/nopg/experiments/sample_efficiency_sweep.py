"""The sample-efficiency sweep (:mod:`nopg.experiments.sample_efficiency`): its jobs planned
costliest first, run through :func:`nopg.analysis.parallel.parallel_map` (one job a data size,
seed and algorithm: :func:`nopg.experiments.sample_efficiency_jobs.run_job`), and its results
folder written (:mod:`nopg.experiments.sample_efficiency_report`)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import torch

from ..analysis.parallel import parallel_map
from .runner import run_log
from .sample_efficiency import (
    ALGORITHMS,
    D3RLPY_ALGORITHMS,
    NOPG_ALGORITHMS,
    ONLINE,
    SampleEfficiencyConfig,
)
from .sample_efficiency_jobs import experiment_config, online_env, run_job
from .sample_efficiency_report import check_identical_data, write_report

__all__ = ["plan", "run_sample_efficiency"]

logger = logging.getLogger("nopg.experiments")

_COST = {"MOPO": 3, "MOReL": 2, "CQL": 10, "BCQ": 10, "BEAR": 4, "PWIS": 3, "IQL": 2, "TD3+BC": 2,
         "BC": 1}
"""Relative cost of one job per algorithm (NOPG's and PWIS's times the data size), for load
balance."""


def plan(cfg: SampleEfficiencyConfig, work_dir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The jobs (costliest first, for load balance) and the algorithms left out, with why."""
    skipped = []
    jobs = []
    if any(a in NOPG_ALGORITHMS for a in cfg.algorithms):
        experiment_config(cfg, None)[1].nopg.torch_device  # noqa: B018 -- refuses a missing device
    for algorithm in cfg.algorithms:
        if algorithm == "PWIS" and cfg.spec.behaviour is None:
            skipped.append(f"PWIS (the behaviour density of {cfg.task}'s data is unknown)")
            continue
        if algorithm in ONLINE:
            if not cfg.budgets() or online_env(cfg.task, experiment_config(cfg, None)[1]) is None:
                skipped.append(f"{algorithm} (no online budgets/environment for {cfg.task})")
                continue
            jobs += [{"config": cfg, "algorithm": algorithm, "seed": s, "size": max(cfg.budgets())}
                     for s in cfg.seeds]
            continue
        for size in cfg.data_sizes():
            cfg.spec.task_settings(size)             # refuse a bad size before anything runs
            jobs += [{"config": cfg, "algorithm": algorithm, "size": size, "seed": s,
                      "work_dir": str(work_dir / f"{algorithm.replace('+', 'p')}__n{size}__s{s}")}
                     for s in cfg.seeds]
    if any(job["algorithm"] in D3RLPY_ALGORITHMS for job in jobs):
        from ..baselines.d3rlpy_bridge import isolated_python

        isolated_python()                            # refuse early when it is missing
    jobs.sort(key=lambda j: -_COST.get(j["algorithm"], 1) * (j["size"] if j["algorithm"] in
                                                             ("PWIS", *NOPG_ALGORITHMS) else 1))
    return jobs, skipped


def run_sample_efficiency(cfg: SampleEfficiencyConfig, out: str | Path = "results",
                          progress: bool = True, run_name: str | None = None,
                          workers: int | None = None, ray_address: str | None = None
                          ) -> dict[str, Any]:
    """Run the sweep and write its folder (module docstring); returns the summary."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = Path(out) / (run_name or f"sample-efficiency__{cfg.task}__{stamp}")
    jobs, skipped = plan(cfg, run_dir / "jobs")
    if not jobs:
        raise ValueError(f"no algorithm of {list(cfg.algorithms)} applies to {cfg.task}: "
                         f"{'; '.join(skipped)}")
    run_dir.mkdir(parents=True, exist_ok=True)
    with run_log(run_dir):
        (run_dir / "config.json").write_text(json.dumps(
            {"experiment": "sample-efficiency", **cfg.to_dict(), "data_sizes": cfg.data_sizes(),
             "budgets": cfg.budgets()}, indent=2, default=str))
        for reason in skipped:
            logger.info("sample-efficiency: skipping %s", reason)
        logger.info("sample-efficiency on %s: %d jobs (sizes %s, seeds %s, online budgets %s)",
                    cfg.task, len(jobs), cfg.data_sizes(), cfg.seeds, cfg.budgets())
        start = time.perf_counter()
        results = parallel_map(run_job, jobs, workers=workers, ray_address=ray_address,
                               progress=progress, desc=f"sample-efficiency {cfg.task}")
        order = {a: i for i, a in enumerate(ALGORITHMS)}
        rows = sorted((r for rs in results for r in rs),
                      key=lambda r: (order[r["algorithm"]], r["size"], r["seed"]))
        check_identical_data(rows)
        summary = write_report(rows, run_dir, cfg.confidence, cfg.n_boot)
        wall = time.perf_counter() - start
        for r in summary:
            logger.info("%s n=%d: return %.2f [%.2f, %.2f] over %d seeds, %.1f s per run",
                        r["algorithm"], r["size"], r["mean"], r["ci_lo"], r["ci_hi"], r["n"],
                        r["wall_time_mean_s"])
        failed = [r for r in rows if r["error"]]
        if failed:
            logger.warning("sample-efficiency: %d of %d runs failed (the 'error' column of "
                           "runs.csv): %s", len(failed), len(rows), failed[0]["error"])
        out_summary = {"task": cfg.task, "run_dir": str(run_dir), "wall_time_s": wall,
                       "n_runs": len(rows), "n_failed": len(failed), "skipped": skipped,
                       "identical_data": True,
                       "torch_threads": torch.get_num_threads(), "summary": summary}
        (run_dir / "summary.json").write_text(json.dumps(out_summary, indent=2))
        logger.info("sample-efficiency on %s: %d runs in %.0f s; results in %s", cfg.task,
                    len(rows), wall, run_dir)
        return out_summary
