"""Research probe (not a library option): local-linear successors with anchors on the model's rollout.

The local-linear model (:mod:`nopg.local_linear`) interpolates the value at every moved
successor from the data's next states, so each step of its chain lands on a data next state: a
random jump of about a bandwidth (``docs/bandwidths.md``, "The model's chain spreads over the
data"). This probe adds anchors where the policy goes: before every update, the model's mean
rollout from the initial states (``s_{t+1} = sum_j eps_j y_j(s_t, pi(s_t))``, ``horizon`` steps,
no gradient; ``clip_to_box`` clips it to the box of the data's next states, off by default) is
appended to the interpolation's points and to the query states. Each anchor goes on with the
continuation interpolated at it from the data's next states; the thinness stays measured against
the data's next states. The gradient is the model's exact gradient with the anchors held fixed
(they are drawn afresh at every update, like the next-state draws); with ``--differentiable``
it also follows the anchors through the rollout (back-propagation through its steps).

    python benchmarks/anchored_rollout_probe.py [--differentiable] invertedpendulum-random --seeds 0 1 \\
        --set 'nopg.successors="local-linear"' --label "anchored rollout" --out OUT.csv

(the arguments are ``benchmarks/bandwidth_study.py``'s; the probe replaces the library's
local-linear model for that run).

    python benchmarks/anchored_rollout_probe.py rank STUDY_DIR invertedpendulum-random
    python benchmarks/anchored_rollout_probe.py ascend SEED UPDATES

``ascend`` fits the inverted pendulum's policy under the anchored model (rollout differentiated)
by monotone ascent: ``J_hat`` is computed with fixed next-state draws, and a step that lowers it
by more than 1% is undone and the learning rate halved (down to 1e-4); it grows by 1.2 after each
kept step, up to the default 1e-2.

    python benchmarks/anchored_rollout_probe.py search SEED [HORIZON] [--penalty]

``search`` fits a linear controller ``3 tanh(-K s / 3)`` (the four gains ``K``, from 0) to the
inverted pendulum's anchored model (rollout of ``HORIZON`` steps, 400 by default, no gradient)
by Powell's derivative-free method (``scipy.optimize.minimize``, at most 400 evaluations of
``J_hat``, fixed next-state draws), and prints the real return (5 episodes), ``J_hat``, the
gains, the evaluations and the seconds. ``--penalty`` adds ``unsupported="penalty"`` (a
successor pays for its thinness against the data's next states).

``rank`` scores the final policy of every ``seed_<k>/checkpoint`` of a ``bandwidth_study.py``
folder (any model) by its ``J_hat`` under the anchored model (``successors="local-linear"``,
rollout without gradient) and prints it beside the fit's own ``J_hat``, the return, and both
Spearman rank correlations with the return.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import numpy as np
import torch
from scipy.spatial import cKDTree

import nopg.local_linear as local_linear
from nopg.kernels import gather_rows, softmax_log_mass, squared_norm


class AnchoredLocalLinear(local_linear.LocalLinearBellman):
    """:class:`nopg.local_linear.LocalLinearBellman` with anchors on the model's mean rollout."""

    clip_to_box = False
    horizon = 150               # steps of the rollout
    differentiable = False      # the anchors in the policy's graph (the rollout differentiated)

    def _build_successors(self) -> None:
        super()._build_successors()
        self.anchors = self.next_states
        self.anchor_cont = self.continuing
        self.anchor_tree = self.next_tree
        nxt = self.next_states
        self.box = (nxt.min(0).values, nxt.max(0).values)

    def _rollout(self, policy: torch.nn.Module, initial: torch.Tensor) -> torch.Tensor:
        if not self.differentiable:
            with torch.no_grad():
                return self._rollout_steps(policy, initial)
        return self._rollout_steps(policy, initial)

    def _rollout_steps(self, policy: torch.nn.Module, initial: torch.Tensor) -> torch.Tensor:
        s, out = initial, []
        for _ in range(self.horizon):
            a = policy(s)[:, None, :]
            rows, _ = self.kernel_rows.rows(self._prepare(s), a / self.h_a, 1)
            succ, _ = self._moved(s, a.expand(-1, rows.index.shape[1], -1), rows.index)
            s = (rows.values[..., None] * succ).sum(1)
            if self.clip_to_box:
                s = torch.minimum(torch.maximum(s, self.box[0]), self.box[1])
            out.append(s)
        return torch.cat(out)

    def _set_anchors(self, extra: torch.Tensor) -> None:
        # With the rollout differentiated, where the episode ends along it follows the anchors.
        cols, interp, _ = super()._interpolation(extra if self.differentiable else extra.detach())
        cont = (interp * gather_rows(self.continuing, cols)).sum(-1)
        self.anchors = torch.cat([self.next_states, extra])
        self.anchor_cont = torch.cat([self.continuing, cont])
        self.anchor_tree = cKDTree((self.anchors.detach() / self.h_s).cpu().numpy())

    def _interpolation(self, succ: torch.Tensor):
        _, _, thin = super()._interpolation(succ)           # thinness against the data
        flat = succ.reshape(-1, succ.shape[-1])
        _, near = self.anchor_tree.query((flat.detach() / self.h_s).cpu().numpy(), self.n_interp)
        near = torch.as_tensor(near.reshape(len(flat), self.n_interp))
        diff = (flat[:, None, :] - gather_rows(self.anchors, near)) / self.h_s
        weights, _ = softmax_log_mass(-0.5 * squared_norm(diff))
        shape = succ.shape[:-1]
        return near.reshape(*shape, -1), weights.reshape(*shape, -1), thin

    @property
    def n_columns(self) -> int:
        return len(self.anchors)

    def _continuation(self, cols: torch.Tensor) -> torch.Tensor:
        return gather_rows(self.anchor_cont, cols)

    def _next_queries_rows(self, policy, generator):
        # Draws around the data's next states as in the library; the anchors are queried
        # where they are (a draw around them would add back the jump the anchors remove).
        k = self.n_mc_next or 1
        xi = self._noise((self.n, k, self.data.state_dim), generator)
        scale = self.h_next if self.n_mc_next else 0.0
        drawn = self.next_states[:, None, :] + scale * xi
        fixed = self.anchors[self.n:, None, :].expand(-1, k, -1)
        states = torch.cat([drawn, fixed]).reshape(-1, self.data.state_dim)
        return self._policy_successors(policy, states, k, generator)

    def solution(self, policy, initial_states, generator=None, warm_start=None):
        z = self._tensor(np.asarray(initial_states, float))
        self._set_anchors(self._rollout(policy, z))
        return super().solution(policy, initial_states, generator, None)


def quiet() -> None:
    """One torch thread, no info logs, no warnings (the modes' output is their table)."""
    import logging
    import warnings

    logging.disable(logging.INFO)
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)


def anchored_algorithm(policy: torch.nn.Module, config, seed: int, inputs, **changes):
    """``NOPG`` on the anchored model (``successors="local-linear"``, ``solver="auto"``), set up
    on ``inputs`` (``task_inputs``'s data, bandwidths and initial states)."""
    import dataclasses

    from nopg import NOPG

    algo = NOPG(policy, dataclasses.replace(config.nopg, seed=seed, successors="local-linear",
                                            solver="auto", **changes))
    algo.setup(*inputs)
    return algo


def real_return(task, config, policy: torch.nn.Module, seed: int, episodes: int) -> float:
    """Mean return of ``episodes`` real episodes (the seeds the reference scripts use)."""
    from nopg.evaluation import evaluate_episodes

    return float(np.mean(evaluate_episodes(task.env_fn(config)(), policy, episodes,
                                           seed=1_000_000 + 1000 * seed)["returns"]))


def rank(study: Path, task_name: str) -> None:
    """The ``rank`` table (module docstring)."""
    import json

    from invertedpendulum_reference_policies import task_inputs
    from scipy.stats import spearmanr

    from nopg import NOPG
    from nopg.checkpoint import load_checkpoint
    from nopg.experiments import get_task

    quiet()
    task = get_task(task_name)
    config = task.default_config()
    rows = []
    for seed_dir in sorted(study.glob("seed_*"), key=lambda p: int(p.name[5:])):
        seed = int(seed_dir.name[5:])
        policy = load_checkpoint(NOPG, seed_dir / "checkpoint").policy
        algo = anchored_algorithm(policy, config, seed, task_inputs(task, config, seed))
        result = json.loads((seed_dir / "evaluation.json").read_text())
        fit_j = float((seed_dir / "log.csv").read_text().strip().splitlines()[-1].split(",")[1])
        rows.append((seed, result["return_mean"], fit_j, algo.J_hat()))
        print(f"| {seed} | {rows[-1][1]:.1f} | {fit_j:.2f} | {rows[-1][3]:.2f} |", flush=True)
    ret, fit_j, anchored = (np.array(c) for c in list(zip(*rows))[1:])
    print(f"Spearman with the return: the fit's J_hat {spearmanr(fit_j, ret).statistic:.2f}, "
          f"anchored J_hat {spearmanr(anchored, ret).statistic:.2f}")


def ascend(seed: int, updates: int) -> None:
    """The ``ascend`` fit (module docstring); prints evaluations every 50 updates."""
    import copy

    from invertedpendulum_reference_policies import task_inputs

    from nopg.experiments import get_task
    from nopg.experiments.runner import make_policy

    quiet()
    AnchoredLocalLinear.differentiable = True
    task = get_task("invertedpendulum-random")
    config = task.default_config()
    inputs = task_inputs(task, config, seed)
    s0 = inputs[2]
    torch.manual_seed(seed)
    policy = make_policy(task, config, inputs[0]).double()
    algo = anchored_algorithm(policy, config, seed, inputs)
    lr = config.nopg.learning_rate
    opt = torch.optim.Adam(policy.parameters(), lr=lr)
    best, kept = None, True

    for update in range(1, updates + 1):
        sol = algo.model_.solution(policy, s0, torch.Generator().manual_seed(1234))
        group = opt.param_groups[0]
        if best is not None and sol.J < best[0] - 0.01 * max(1.0, abs(best[0])) \
                and group["lr"] > 1e-4:
            policy.load_state_dict(best[1])
            opt.load_state_dict(best[2])
            opt.param_groups[0]["lr"] = group["lr"] * 0.5
            kept = False
            continue
        if best is not None and kept:
            group["lr"] = min(lr, group["lr"] * 1.2)
        kept = True
        best = (sol.J, copy.deepcopy(policy.state_dict()), copy.deepcopy(opt.state_dict()))
        opt.zero_grad()
        (-sol.surrogate()).backward()
        opt.step()
        if update % 50 == 0:
            score = real_return(task, config, policy, seed, 4)
            print(f"seed {seed} update {update}: J_hat {best[0]:.2f}, eval {score:.1f}", flush=True)
    policy.load_state_dict(best[1])
    score = real_return(task, config, policy, seed, 10)
    print(f"seed {seed} final: J_hat {best[0]:.2f}, return {score:.1f}", flush=True)


def search(seed: int, horizon: int, penalty: bool = False) -> None:
    """The ``search`` fit (module docstring): Powell over a linear controller's four gains."""
    import time

    import scipy.optimize
    from invertedpendulum_reference_policies import LinearForce, task_inputs

    from nopg.experiments import get_task

    quiet()
    AnchoredLocalLinear.horizon = horizon
    task = get_task("invertedpendulum-random")
    config = task.default_config()
    inputs = task_inputs(task, config, seed)
    s0 = inputs[2]
    policy = LinearForce(np.zeros(4))
    extra = {"unsupported": "penalty"} if penalty else {}
    algo = anchored_algorithm(policy, config, seed, inputs, **extra)

    def minus_j(gain: np.ndarray) -> float:
        policy.gain.copy_(torch.as_tensor(gain))
        with torch.no_grad():
            return -float(algo.model_.solution(policy, s0, torch.Generator().manual_seed(1234)).J)

    start = time.perf_counter()
    found = scipy.optimize.minimize(minus_j, np.zeros(4), method="Powell", options={"maxfev": 400})
    seconds = time.perf_counter() - start
    policy.gain.copy_(torch.as_tensor(found.x))
    print(f"| {seed} | {real_return(task, config, policy, seed, 5):.1f} | {-found.fun:.2f} | "
          f"{np.round(found.x, 3).tolist()} | {found.nfev} | {seconds:.0f} |", flush=True)


if __name__ == "__main__":
    local_linear.LocalLinearBellman = AnchoredLocalLinear     # what NonparametricBellman builds
    if sys.argv[1:2] == ["search"]:
        numbers = [a for a in sys.argv[2:] if a != "--penalty"]
        search(int(numbers[0]), int(numbers[1]) if len(numbers) > 1 else 400,
               "--penalty" in sys.argv)
        sys.exit(0)
    if sys.argv[1:2] == ["rank"]:
        rank(Path(sys.argv[2]), sys.argv[3])
        sys.exit(0)
    if sys.argv[1:2] == ["ascend"]:
        ascend(int(sys.argv[2]), int(sys.argv[3]))
        sys.exit(0)
    if "--differentiable" in sys.argv:
        AnchoredLocalLinear.differentiable = True
        sys.argv.remove("--differentiable")
    sys.argv = ["bandwidth_study.py", *sys.argv[1:]]
    runpy.run_path(str(Path(__file__).with_name("bandwidth_study.py")), run_name="__main__")
