"""Research probe (not a library option): local-linear successors with anchors on the model's rollout.

The local-linear model (:mod:`nopg.local_linear`) interpolates the value at every moved
successor from the data's next states, so each step of its chain lands on a data next state: a
random jump of about a bandwidth (``docs/bandwidths.md``, "The model's chain spreads over the
data"). This probe adds anchors where the policy goes: before every update, the model's mean
rollout from the initial states (``s_{t+1} = sum_j eps_j y_j(s_t, pi(s_t))``, ``HORIZON`` steps,
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

HORIZON = 150


class AnchoredLocalLinear(local_linear.LocalLinearBellman):
    """:class:`nopg.local_linear.LocalLinearBellman` with anchors on the model's mean rollout."""

    clip_to_box = False
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
        for _ in range(HORIZON):
            a = policy(s)[:, None, :]
            rows, _ = self.kernel_rows.rows(self._prepare(s), a / self.h_a, 1)
            succ, _ = self._moved(s, a.expand(-1, rows.index.shape[1], -1), rows.index)
            s = (rows.values[..., None] * succ).sum(1)
            if self.clip_to_box:
                s = torch.minimum(torch.maximum(s, self.box[0]), self.box[1])
            out.append(s)
        return torch.cat(out)

    def _set_anchors(self, extra: torch.Tensor) -> None:
        cols, interp, _ = super()._interpolation(extra.detach())
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


if __name__ == "__main__":
    local_linear.LocalLinearBellman = AnchoredLocalLinear     # what NonparametricBellman builds
    if "--differentiable" in sys.argv:
        AnchoredLocalLinear.differentiable = True
        sys.argv.remove("--differentiable")
    sys.argv = ["bandwidth_study.py", *sys.argv[1:]]
    runpy.run_path(str(Path(__file__).with_name("bandwidth_study.py")), run_name="__main__")
