"""Seconds per update of the moved-successor models (``local-linear``, ``anchored``) on the
paper's cart-pole data, CPU against CUDA on one machine, and whether the two give the same
``J_hat``.

    python benchmarks/bench_moved_successors_device.py --devices cpu cuda --updates 3

Each fit is the cart-pole option of the README (anchored model, CMA-ES, linear policy,
standardised states, the task's terminal bounds) or the local-linear model with Adam and the
experiment's MLP, seed 0, float64. The k-d-tree interpolation of the moved successors runs on the
CPU whatever the device; the products and solves run on the device. Printed as one line per
(model, device): seconds per update after the first, the first update's ``J_hat``, and the ratio
to the CPU run of the same model.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import time
import warnings

import numpy as np
import torch
from _harness import ratio

from nopg import NOPG
from nopg.bandwidth.selection import select_bandwidths
from nopg.experiments import get_task
from nopg.experiments.runner import make_policy, with_task_bounds

OPTIONS = {
    "anchored+cma-es": {"hidden": [], "normalize_states": True, "nopg.model.successors": "anchored",
                        "nopg.optimizer": "cma-es", "nopg.model.top_k": 10},
    "local-linear+adam": {"normalize_states": True, "nopg.model.successors": "local-linear",
                          "nopg.model.top_k": 10},
}


def time_fit(name: str, device: str, updates: int, seed: int = 0) -> tuple[float, float]:
    task = get_task("cartpole-random")
    config = task.default_config().replace(**OPTIONS[name], **{"nopg.model.device": device})
    data = task.make_dataset(config, seed)
    config = with_task_bounds(task, config, data.state_dim)
    bw = select_bandwidths(data, method=config.bandwidth_method, seed=seed,
                           max_action_effect=config.max_action_effect)
    s0 = task.initial_states(data, config, seed)
    torch.manual_seed(seed)
    policy = make_policy(task, config, data)
    algo = NOPG(policy, dataclasses.replace(config.nopg, seed=seed))
    stamps: list[float] = []
    algo.fit(data, bw, s0, updates, progress=False,
             callbacks=[lambda *_: stamps.append(time.perf_counter())])
    per_update = float(np.mean(np.diff(stamps))) if len(stamps) > 1 else float("nan")
    return per_update, float(algo.history_[0]["J_hat"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", nargs="+", default=["cpu", "cuda"])
    parser.add_argument("--updates", type=int, default=3)
    parser.add_argument("--models", nargs="+", default=list(OPTIONS), choices=list(OPTIONS))
    args = parser.parse_args()
    warnings.simplefilter("ignore")         # the support warnings of an untrained policy
    logging.disable(logging.WARNING)
    for name in args.models:
        base = None
        for device in args.devices:
            seconds, j_hat = time_fit(name, device, args.updates)
            base = seconds if base is None else base
            print(f"{name:18s} {device:5s} {seconds:8.3f} s/update  J_hat {j_hat:.10f}  "
                  f"ratio to {args.devices[0]} {ratio(seconds, base):.3f}", flush=True)


if __name__ == "__main__":
    main()
