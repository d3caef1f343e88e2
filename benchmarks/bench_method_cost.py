"""What the default method costs against one plain fit of the same data, on the benchmark data sets.

    OMP_NUM_THREADS=1 python benchmarks/bench_method_cost.py --seeds 0 \
        --out records/method_cost.jsonl

For every data set and seed the script builds the task's data and initial states (what
``nopg reproduce`` fits, and what ``scripts/make_user_data.py`` saves for ``nopg fit``), and
then, one after the other in this process, fits

- the **plain fit**: ``AutoNOPG(MethodConfig(recipes=("given",), snapshot_every=None))``, one
  gradient fit with the library's defaults and nothing chosen after it;
- the **default method**: ``AutoNOPG(MethodConfig())``, what ``nopg fit FILE`` runs,

both with the task knowledge the user path passes (action bound, state and terminal bounds,
the evaluation's length), and evaluates each policy with the task's own protocol. One JSON line
per data set and seed: both wall times and CPU times (the process's, one torch thread: the
ratio that other jobs on a shared machine do not move), their ratios, both returns, the
default's kept fit and decisions. The summary gives the median CPU-time ratio over the data
sets and the longest seed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from nopg import AutoNOPG, MethodConfig
from nopg.experiments import get_task
from nopg.experiments.runner import environment_state_bounds, task_terminal_bounds

DATA_SETS: dict[str, tuple[str, dict]] = {
    "pendulum-grid": ("pendulum-grid", {}),
    "pendulum-grid-200": ("pendulum-grid", {"n_theta": 10, "n_theta_dot": 10}),
    "pendulum-random": ("pendulum-random", {}),
    "pendulum-controller": ("pendulum-controller", {}),
    "mountaincar-human": ("mountaincar-human", {}),
    "mountaincar-uniform": ("mountaincar-uniform", {}),
    "pendulum-uniform": ("pendulum-uniform", {}),
    "cartpole-random": ("cartpole-random", {}),
    "invertedpendulum-random": ("invertedpendulum-random", {}),
}
"""The nine benchmark data sets of the issue "One NOPG": name -> (task, task settings)."""


def task_knowledge(task, config, data) -> dict:
    """What ``nopg fit`` is given for this task's file: the flags of the user path."""
    steps = config.task.get("eval_steps") if hasattr(config.task, "get") else None
    return {"action_max": np.broadcast_to(np.asarray(task.action_max, dtype=float),
                                          (task.action_dim,)).copy(),
            "state_bounds": environment_state_bounds(task, config, data.state_dim),
            "terminal_bounds": task_terminal_bounds(task, config, data.state_dim),
            "horizon": steps}


def task_setup(name: str, seed: int):
    """Data set ``name`` at ``seed``: its task, configuration, data, initial states and the
    task knowledge the user path passes."""
    task_name, settings = DATA_SETS[name]
    task = get_task(task_name)
    config = task.default_config().replace(task=settings) if settings else task.default_config()
    data = task.make_dataset(config, seed)
    return task, config, data, task.initial_states(data, config, seed), \
        task_knowledge(task, config, data)


def run_one(name: str, seed: int) -> dict:
    task, config, data, s0, knowledge = task_setup(name, seed)
    row: dict = {"data": name, "seed": seed, "n": len(data), "initial_states": len(s0)}
    for label, method_config in (("plain", MethodConfig(recipes=("given",), snapshot_every=None)),
                                 ("default", MethodConfig())):
        torch.manual_seed(seed)
        start, cpu = time.perf_counter(), time.process_time()
        method = AutoNOPG(method_config, seed=seed).fit(data, s0, progress=False, **knowledge)
        row[f"{label}_s"] = time.perf_counter() - start
        row[f"{label}_cpu_s"] = time.process_time() - cpu
        row[f"{label}_return"] = float(np.mean(task.evaluate(method.policy_, config, seed,
                                                             config.final_eval_episodes)))
        if label == "default":
            report = method.report_
            row["kept"] = report.kept.name
            row["fits"] = [c.name for c in report.candidates]
            row["stopped_at"] = {c.name: c.stopped_at for c in report.candidates}
            row["decisions"] = report.decisions
    row["ratio"] = row["default_s"] / row["plain_s"]
    row["cpu_ratio"] = row["default_cpu_s"] / row["plain_cpu_s"]
    return row


def run_data_sets(run: Callable[[str, int], dict], description: str,
                  argv: list[str] | None = None) -> list[dict]:
    """``run(name, seed)`` for every ``--data`` and ``--seeds`` (one torch thread), each row
    printed as a JSON line and appended to ``--out`` as it ends; the rows."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--data", nargs="+", default=list(DATA_SETS), choices=list(DATA_SETS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--out", type=Path, default=None, help="append JSON lines here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for name in args.data:
        for seed in args.seeds:
            rows.append(run(name, seed))
            line = json.dumps(rows[-1])
            print(line, flush=True)
            if args.out is not None:
                with args.out.open("a") as f:
                    f.write(line + "\n")
    return rows


def main(argv: list[str] | None = None) -> int:
    rows = run_data_sets(run_one, __doc__.split("\n")[0], argv)
    ratios = [statistics.median(r["cpu_ratio"] for r in rows if r["data"] == d)
              for d in dict.fromkeys(r["data"] for r in rows)]
    print(f"median over {len(ratios)} data sets of the default method's CPU time / the plain "
          f"fit's: {statistics.median(ratios):.2f}; longest seed "
          f"{max(r['default_s'] for r in rows):.0f} s wall, "
          f"{max(r['default_cpu_s'] for r in rows):.0f} s CPU", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
