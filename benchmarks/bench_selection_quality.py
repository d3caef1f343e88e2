"""How well the default method's judge chooses, on the benchmark data sets through the user path.

    OMP_NUM_THREADS=1 python benchmarks/bench_selection_quality.py --data pendulum-grid \
        --seeds 0 1 2 3 4 --out records/selection_quality.jsonl

For every data set and seed the script fits ``AutoNOPG(MethodConfig())`` (what ``nopg fit FILE``
runs) with the task knowledge the user path passes (:func:`bench_method_cost.task_setup`) and
``evaluate_candidates=True``: every policy the judge scores (each fit's final policy and its
snapshots, each recipe's kept policy) is also evaluated with the task's own protocol, for the
record only; the judge never sees those returns. One JSON line per data set and seed: the
scored policies (fit, update, forecast, true return, kept), the Spearman correlation of the
forecast with the return within the seed, and the regret@1 of the choice (the best scored
return less the kept one's). The summary per data set gives the Spearman correlation pooled
over the seeds' scored policies, its median within a seed, and the regret@1's mean and largest:
the selection-quality figures of the issue "One NOPG". Each row also gives the method's cost in
the same run: ``plain_fit_cpu_s``, the CPU seconds of the first fit's updates (one plain fit of
the data, ``FitReport.plain_fit_s``), ``method_cpu_s``, that plus everything after it that the
budget charges (``FitReport.budget_spent_s``: snapshot choices, later fits; the record-only
evaluations are not charged), and their ratio ``cost_ratio``; the summary gives its median over
the seeds and the longest ``method_cpu_s``.

By default the method runs as ``nopg fit`` runs it: the judge compares drawn paths
(``MethodConfig.judge_rule="sampled"``). ``--rule mean --particles P`` runs the mean-rollout
rule instead, with ``P`` drawn paths recorded beside it: each row then also holds every
scored policy's drawn-path forecast, and the choice the sampled rule would have made among
the same scored policies (``replay``: each fit's snapshot choice, then the choice among the
fits, by :func:`nopg.select.policy_selection.best_score`; the fits themselves, the escalation
and the budget stay those of the run), with its regret@1: a paired comparison of the rules.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np
import torch
from bench_method_cost import run_data_sets, task_setup

from nopg import AutoNOPG, MethodConfig
from nopg.analysis.statistics import rank_correlation
from nopg.select.policy_selection import best_score

SETTINGS: dict = {}
"""The method's settings given on the command line (``--particles``, ``--rule``)."""


def run_one(name: str, seed: int) -> dict:
    """The default method on data set ``name`` at ``seed``, every judged policy evaluated."""
    task, config, data, s0, knowledge = task_setup(name, seed)

    def evaluate(policy: torch.nn.Module) -> list[float]:
        return [float(r) for r in task.evaluate(policy, config, seed,
                                                config.final_eval_episodes)]

    torch.manual_seed(seed)
    start, cpu = time.perf_counter(), time.process_time()
    method = AutoNOPG(MethodConfig(**SETTINGS), seed=seed).fit(
        data, s0, progress=False, evaluate=evaluate, evaluate_candidates=True, **knowledge)
    report = method.report_
    rows = report.scored()
    extra = replay(report, rows) if method.config.judge_rule == "mean" \
        and method.config.judge_particles else {}
    plain = report.plain_fit_s
    method_cpu = None if plain is None else plain + (report.budget_spent_s or 0.0)
    return {**extra, "settings": dict(SETTINGS), "data": name, "seed": seed, "n": len(data),
            "plain_fit_cpu_s": plain, "method_cpu_s": method_cpu,
            "cost_ratio": None if not plain else method_cpu / plain,
            "initial_states": len(s0),
            "wall_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu,
            "kept": report.kept.name, "fits": [c.name for c in report.candidates],
            "kept_return": next(r["return"] for r in rows if r["kept"]),
            "scored": rows, "regret_at_1": report.regret(),
            "spearman": rank_correlation([r["forecast"] for r in rows],
                                         [r["return"] for r in rows]),
            "decisions": report.decisions}


def replay(report, rows: list[dict]) -> dict:
    """For a run with the mean rule and drawn paths: the sampled rule's choice among the run's
    scored policies, its kept return and regret@1, and the Spearman correlation of the
    drawn-path forecasts with the returns."""
    other = "sampled"
    kept_scores, kept_returns = [], []
    for c in report.candidates:
        snap = c.snapshot
        if snap is not None and snap.returns is not None:
            i = best_score(snap.scores, tie_break=False, rule=other)
            kept_scores.append(snap.scores[i])
            kept_returns.append(snap.returns[i])
        elif c.score is not None and c.return_mean is not None:
            kept_scores.append(c.score)
            kept_returns.append(c.return_mean)
    kept = kept_returns[best_score(kept_scores, rule=other)]
    best = max(r["return"] for r in rows)
    return {"replay_rule": other, "replay_kept_return": kept, "replay_regret_at_1": best - kept,
            "spearman_sampled": rank_correlation([r["sampled"] for r in rows],
                                                 [r["return"] for r in rows])}


def _median(values: list) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def summary(rows: list[dict]) -> list[dict]:
    """Per data set: policies scored, Spearman pooled and median within a seed, regret@1."""
    out = []
    for name in dict.fromkeys(r["data"] for r in rows):
        mine = [r for r in rows if r["data"] == name]
        pooled = [s for r in mine for s in r["scored"]]
        within = [r["spearman"] for r in mine if r["spearman"] is not None]
        regrets = [r["regret_at_1"] for r in mine]
        out.append({"data": name, "seeds": [r["seed"] for r in mine], "scored": len(pooled),
                    "spearman_pooled": rank_correlation([s["forecast"] for s in pooled],
                                                        [s["return"] for s in pooled]),
                    "spearman_within_median": statistics.median(within) if within else None,
                    "regret_at_1_mean": float(np.mean(regrets)),
                    "regret_at_1_max": float(np.max(regrets)),
                    "cost_ratio_median": _median([r.get("cost_ratio") for r in mine]),
                    "method_cpu_s_max": max((r["method_cpu_s"] for r in mine
                                             if r.get("method_cpu_s") is not None), default=None),
                    "kept_return_mean": float(np.mean([r["kept_return"] for r in mine]))})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--particles", type=int, default=None)
    parser.add_argument("--rule", choices=("mean", "sampled"), default=None)
    args, rest = parser.parse_known_args(argv)
    SETTINGS.update({k: v for k, v in (("judge_particles", args.particles),
                                       ("judge_rule", args.rule)) if v is not None})
    rows = run_data_sets(run_one, __doc__.split("\n")[0], rest)
    for row in summary(rows):
        print(json.dumps(row), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
