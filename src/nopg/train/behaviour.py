"""A behaviour-cloning term for the policy objective (a policy constraint, as in TD3+BC).

With a weight ``w > 0`` each update ascends
``J_hat / |J_hat| - w * mean_i ||(pi(s_i) - a_i) / std(a)||^2`` over the data's states ``s_i``
and actions ``a_i`` (``pi``: the policy's mean action). Dividing ``J_hat`` by its magnitude and
the action error by the data's action spread makes ``w`` free of the reward's and the action's
units. Where the kernel model cannot tell actions apart (a flat ``J_hat`` in the action, as on
data from one controller) the term keeps the policy on the data's actions instead of letting it
drift to where the model extrapolates. ``NOPG`` weights the mean per sample by the model's
advantage of the logged action over the policy's (``NOPGConfig.behaviour.filter``), so that
the better of the logged actions are cloned more.

``behaviour.weight="auto"`` sets ``w = AUTO_SCALE * rho``, with ``rho`` the data's *action
predictability* (:func:`action_predictability`): the leave-one-out R^2 of predicting each
action from the actions of its state's ``k`` nearest data states, clipped at 0. Exploration data
(random actions, a grid of actions) have ``rho = 0``: the data show no behaviour to keep to, and
the objective is the paper's. Data logged by a controller or a person have ``rho > 0``.

When the term is on, ``fit`` first fits the policy to the data's actions alone
(``NOPGConfig.behaviour.pretrain`` Adam steps), so the policy gradient starts from the logged
behaviour instead of from a random policy that the term must pull back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..bandwidth.selection import seed_generator
from ..data.dataset import TransitionDataset
from ..policies.networks import mean_actions
from ..validation import check_positive_int

AUTO_SCALE = 2.0
"""``behaviour.weight="auto"`` is ``AUTO_SCALE`` times the action predictability."""
WEIGHT_LOG_MAX = math.log(20.0)
"""Cap of the exponent of the advantage weights (``behaviour.filter="weighted"``): no sample
weighs more than 20 times one with zero advantage."""
PRETRAIN_BATCH = 16_384
"""Largest batch of a behaviour-pretraining step (more samples: random batches of this size)."""


@dataclass
class BehaviourTargets:
    """The data's states and actions, and the action spread that scales the error."""

    states: torch.Tensor
    actions: torch.Tensor
    inv_std: torch.Tensor

    def loss(self, policy: nn.Module, rows: torch.Tensor | None = None,
             weights: torch.Tensor | None = None) -> torch.Tensor:
        """``mean_i ||(pi(s_i) - a_i) / std(a)||^2`` over all data (or ``rows``), differentiable.

        ``weights`` (non-negative, one per sample of all data) turn the mean into the weighted
        mean ``sum_i w_i e_i / sum_i w_i`` (the behaviour filters: a 0/1 mask or advantage
        weights); with all weights 0 the loss is 0.
        """
        states, actions = (self.states, self.actions) if rows is None \
            else (self.states[rows], self.actions[rows])
        err = (mean_actions(policy, states) - actions) * self.inv_std
        sq = (err * err).sum(-1)
        if weights is None:
            return sq.mean()
        w = weights.to(sq.dtype)
        total = w.sum()
        return (sq * w).sum() / torch.where(total > 0, total, torch.ones_like(total))

    def pretrain(self, policy: nn.Module, steps: int, learning_rate: float, seed: int) -> float:
        """Fit ``policy`` to the data's actions by ``steps`` Adam steps on :meth:`loss` alone.

        Full batches up to ``PRETRAIN_BATCH`` samples, random batches of that size above (drawn
        from a generator of ``seed``). Returns the final loss over all data.
        """
        params = [p for p in policy.parameters() if p.requires_grad]
        opt = torch.optim.Adam(params, lr=learning_rate)
        n = self.states.shape[0]
        gen = torch.Generator().manual_seed(seed)
        for _ in range(steps):
            rows = None if n <= PRETRAIN_BATCH else \
                torch.randint(n, (PRETRAIN_BATCH,), generator=gen).to(self.states.device)
            opt.zero_grad()
            self.loss(policy, rows).backward()
            opt.step()
        with torch.no_grad():
            return float(self.loss(policy))


def action_predictability(data: TransitionDataset, k: int = 10, max_queries: int = 20_000,
                          seed: np.random.Generator | int | None = None) -> float:
    """How much the data's actions depend on their states, in ``[0, 1]``.

    Each action is predicted by the mean action of its state's ``k`` nearest other data states
    (states standardised per dimension); the score is ``1 - MSE / var(a)`` per action dimension,
    averaged over the dimensions and clipped at 0. Actions drawn independently of the state
    score about ``-1 / k`` before clipping, a deterministic policy close to 1. A constant
    action dimension scores 0 (there is no spread to explain).

    Parameters
    ----------
    data : TransitionDataset
    k : int
        Neighbours per prediction (capped at ``n - 1``).
    max_queries : int
        At most this many data points (drawn without replacement) are predicted.
    seed : numpy Generator or int, optional
        Randomness of that subsample (default seed 0).
    """
    from scipy.spatial import cKDTree

    check_positive_int("k", k)
    check_positive_int("max_queries", max_queries)
    n = data.n
    if n < 3:
        return 0.0
    states = np.asarray(data.states, dtype=np.float64)
    actions = np.asarray(data.actions, dtype=np.float64)
    std = states.std(0)
    z = states / np.where(std > 0, std, 1.0)
    rows = np.arange(n)
    if n > max_queries:
        rows = np.sort(seed_generator(seed).choice(n, size=max_queries, replace=False))
    k = min(int(k), n - 1)
    _, idx = cKDTree(z).query(z[rows], k=k + 1)
    # drop each query's own row (with duplicate states it may not come first, or may be
    # crowded out, in which case the farthest of the k + 1 goes)
    self_hit = idx == rows[:, None]
    drop = np.where(self_hit.any(1), self_hit.argmax(1), k)
    mask = np.ones(idx.shape, dtype=bool)
    mask[np.arange(rows.size), drop] = False
    keep = idx[mask].reshape(rows.size, k)
    pred = actions[keep].mean(1)
    var = actions.var(0)
    mse = ((actions[rows] - pred) ** 2).mean(0)
    r2 = np.where(var > 0, 1.0 - mse / np.where(var > 0, var, 1.0), 0.0)
    return float(np.clip(r2, 0.0, 1.0).mean())


def behaviour_targets(data: TransitionDataset, weight: float, device: torch.device,
                      dtype: torch.dtype) -> BehaviourTargets | None:
    """The targets of the behaviour term, or ``None`` when ``weight`` is 0 (the term is off)."""
    if weight == 0:
        return None
    actions = torch.tensor(data.actions, device=device, dtype=dtype)
    std = actions.std(0, unbiased=False)
    # a constant action dimension has nothing to clone: its error is counted in its own units
    inv_std = torch.where(std > 0, std.reciprocal(), torch.ones_like(std))
    return BehaviourTargets(torch.tensor(data.states, device=device, dtype=dtype), actions, inv_std)


def resolve_behaviour_weight(weight: float | str, data: TransitionDataset
                             ) -> tuple[float, float | None]:
    """The concrete weight of the behaviour term for ``data``, and the action predictability.

    A number is returned as it is (with ``None`` for the predictability, not computed);
    ``"auto"`` is ``AUTO_SCALE * action_predictability(data)``.
    """
    if weight == "auto":
        rho = action_predictability(data)
        return AUTO_SCALE * rho, rho
    return float(weight), None
