"""Recipes: named ways to fit a policy, for fitting several per seed and keeping the best.

A recipe is a set of experiment settings applied over the experiment's configuration
(:meth:`nopg.MethodConfig.replace`). With ``recipes`` naming more than
one, each seed fits every recipe from the same data and bandwidths, and :class:`nopg.AutoNOPG` keeps the
policy that one anchored model of the data rates best (:mod:`nopg.select.policy_selection`).

- ``given``: the experiment's configuration as it stands (its model, policy and optimiser).
- ``stabilise``: the anchored model (:mod:`nopg.model.anchored`) searched by CMA-ES
  (:mod:`nopg.train.search`) over a linear policy ``a_max tanh(W (s - mean)/std + b)``, 50
  generations, fresh restarts after 8 without a better ``J_hat``, and candidates ranked first by
  how long the model keeps their episodes going over ``10 / (1 - gamma)`` steps
  (``optimizer.horizon``): the recipe of the balancing tasks (cart-pole, the inverted pendulum),
  where gradient ascent on the kernel model's ``J_hat`` drives the policy off the data.
- ``anchored``: the experiment's policy and optimiser on the anchored model, with
  :data:`ANCHORED_DATA_STARTS` data states as extra starts of the objective
  (``NOPGConfig.starts.data``, :mod:`nopg.train.starts`): the option that swings pendulum-uniform's
  random data up, where the kernel model learns to spin. From the initial states alone,
  gradient ascent on this model often settles in a spinning policy the model itself rates far
  below the swing-up; from starts spread over the data it learns the catch at the top too.

``auto`` (alone, the default) names a list by the data: ``given`` and ``stabilise`` where the
data's episodes end in failures (:func:`ends_in_failure`) and one restart is asked for, else
``given`` alone (:func:`resolve_recipes`). No size of the data chooses the list: what the judge and the
later fits may cost is a budget in units of one plain fit's time (``MethodConfig.budget``, spent
by :class:`nopg.AutoNOPG`).
``stabilise`` ranks its candidates by how long they keep the episode going, which is the task
only where an end is a failure; where an end is a goal (mountain car) it prefers episodes that
never reach it, and where nothing ends (a swing-up, a maze without terminals) it is a linear
policy on a model the judge rates with no end to see. Its CMA-ES rolls every candidate out
from every initial state and solves a model with an anchor per step of every rollout, which
grows past a fit's cost on large data. The recipes whose successors move, and the judge, use at
most :data:`SELECTION_STARTS` of the initial states (:func:`selection_starts`), so their cost
does not grow with the number of episodes in a user's file.

Where nothing ends (no terminal transition), ``auto`` fits ``given`` and then *escalates* to
``anchored`` only where the judge forecasts that ``given``'s policy gains nothing along its
episodes (:func:`gains_nothing`): its mean reward per step over the evaluation is no higher
than its discounted mean per step, so the policy does not bring the system to better states than
those it starts from (a pendulum that spins instead of swinging up). The judge then keeps one of
the two fits as among any recipes. This holds with one restart (:func:`escalation`); an
``anchored`` fit solves a model with anchors along the rollout of every start, many times a
``given`` fit's cost, and the budget bounds it. Where ``given``'s policy gains along its
episodes, the run is the ``given`` fit alone: ``anchored`` fits that fail can look good to the
judge, an anchored model too, on sparse data or data from one behaviour, so the judge is not
asked to choose where the first fit already does what a policy should.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ..train.starts import farthest_data_states
from .policy_selection import JudgeScore, anchored_config

if TYPE_CHECKING:
    from ..data.dataset import TransitionDataset
    from .method_config import MethodConfig

__all__ = ["ANCHORED_DATA_STARTS", "AUTO", "BUDGET", "BUDGET_FLOOR_S", "ESCALATION", "RECIPES",
           "SELECTION_STARTS", "apply_recipe", "check_recipes",
           "discount_horizon", "ends_in_failure", "escalation", "gains_nothing",
           "resolve_recipes", "reward_rates", "selection_starts"]

STABILISE_GENERATIONS = 50
STABILISE_PATIENCE = 8
STABILISE_HORIZON_DISCOUNTS = 10.0     # optimizer.horizon = 10 / (1 - gamma) steps
SELECTION_STARTS = 16                  # initial states the judge and moved-successor recipes use
ANCHORED_DATA_STARTS = 7               # the anchored recipe's data states as extra starts
ESCALATION = "anchored"                # ... the recipe it escalates to
BUDGET = 30.0                          # what follows the plain fit, in plain fits
"""The default ``MethodConfig.budget``: everything after a seed's first fit's updates (one plain
fit of the data) may spend this many times that fit's CPU seconds together (this process's, so
that other work on the machine does not change the result; the caller's record-only evaluations
are not charged): the judge's snapshot
choices and the later fits (``stabilise``, the escalation to ``anchored``). A later fit that
reaches it stops there, no fit starts after it, and no further snapshot is scored. The unit is
the plain fit, not the first fit with its judged snapshots, whose cost grows with the
evaluation's length (10 000-step forecasts on cart-pole) and would loosen the bound exactly where
the forecasts are long. It bounds cost, never chooses the fits: it lies above what follows the
plain fit on every benchmark data set measured (cart-pole seed 0 about 25 plain fits: the
snapshot choice 4.0 and ``stabilise`` 20.6; the escalated ``anchored`` on pendulum-uniform 16
first fits through ``nopg fit``, each a plain fit and a few seconds of snapshot choice, so about
19), so none of them is cut."""
BUDGET_FLOOR_S = 60.0                  # ... but never less than this many seconds
"""A budget above 0 is never less than a minute: on small data the first fit takes seconds and the
later fits' fixed costs (an anchored model along every rollout) dominate, and stopping them
within a minute saves nothing a user waits for."""
AUTO = "auto"

RECIPES: dict[str, dict[str, Any]] = {
    "given": {},
    "stabilise": {"hidden": (), "normalize_states": True, "n_updates": STABILISE_GENERATIONS,
                  "nopg.model.successors": "anchored", "nopg.optimizer": "cma-es",
                  "nopg.optimizer.patience": STABILISE_PATIENCE, "nopg.optimizer.restart": "fresh"},
    "anchored": {"nopg.model.successors": "anchored", "nopg.starts.data": ANCHORED_DATA_STARTS},
}
"""The recipes by name: their settings over the experiment's (``stabilise``'s
``optimizer.horizon``, and ``model.top_k`` for the anchored ones, are filled in by :func:`apply_recipe`)."""


def discount_horizon(gamma: float) -> int:
    """``ceil(10 / (1 - gamma))`` steps, after which the discount has fallen below ``e^-10``:
    ``stabilise``'s ``optimizer.horizon`` and the judge's episode length where a task names none."""
    return int(math.ceil(STABILISE_HORIZON_DISCOUNTS / (1.0 - float(gamma)) - 1e-9))


def check_recipes(recipes: tuple[str, ...]) -> None:
    """Refuse an empty, repeated or unknown recipe list (named in the error), and ``auto`` beside
    other names."""
    if not recipes or isinstance(recipes, str):
        raise ValueError(f"The 'recipes' parameter must be a non-empty list of recipe names "
                         f"({', '.join(RECIPES)}) or ['{AUTO}']. Got {recipes!r} instead.")
    if AUTO in recipes:
        if len(recipes) > 1:
            raise ValueError(f"'{AUTO}' in 'recipes' chooses the list itself and cannot stand "
                             f"beside other names: {list(recipes)!r}")
        return
    unknown = [r for r in recipes if r not in RECIPES]
    if unknown:
        raise ValueError(f"unknown recipe {unknown[0]!r} in 'recipes'; known: "
                         f"{', '.join(RECIPES)}, or '{AUTO}' alone")
    if len(set(recipes)) != len(recipes):
        raise ValueError(f"The 'recipes' parameter names a recipe twice: {list(recipes)!r}")


def ends_in_failure(data: TransitionDataset, gamma: float) -> bool:
    """Whether the data's episodes end in failures: some transitions (not all) are terminal, and
    they earn less on the mean than the steps that go on would keep earning, their mean reward
    over ``1 / (1 - gamma)`` steps. An end then forfeits more than it gives: an alive bonus
    (cart-pole, the inverted pendulum, hopper). Where the steps that go on cost (mountain car's
    -1 a step, an action cost) or the end pays a bonus worth more, an end is a goal; without
    terminals nothing ends."""
    terminals = np.asarray(data.terminals, dtype=bool)
    if not terminals.any() or terminals.all():
        return False
    rewards = np.asarray(data.rewards, dtype=float)
    return float(rewards[terminals].mean()) < float(rewards[~terminals].mean()) / (1.0 - gamma)


def resolve_recipes(recipes: tuple[str, ...], data: TransitionDataset, gamma: float,
                    restarts: int = 1) -> tuple[str, ...]:
    """The recipes to fit on ``data`` (discount ``gamma``): ``recipes`` itself, unless it is
    ``("auto",)``, which gives ``("given", "stabilise")`` where the episodes end in failures
    (:func:`ends_in_failure`) with one restart, else ``("given",)``."""
    check_recipes(recipes)
    if tuple(recipes) != (AUTO,):
        return tuple(recipes)
    if restarts == 1 and ends_in_failure(data, gamma):
        return ("given", "stabilise")
    return ("given",)


def selection_starts(initial_states: np.ndarray, m: int = SELECTION_STARTS) -> np.ndarray:
    """At most ``m`` of ``initial_states`` (k, d): all of them where ``k <= m``, else ``m``
    spread over them by farthest-point sampling (:func:`nopg.train.starts.farthest_data_states`,
    deterministic, in units of their spread per dimension, the first state first).

    The judge's forecast and the objectives of the recipes whose successors move are means over
    the initial states whose cost grows with their number (an anchored rollout per start); this
    subsample estimates those means at a cost that does not grow with the number of episodes in
    the data. :data:`SELECTION_STARTS` (16) is above the 15 initial states every benchmark that
    these mechanisms were measured on used, so their results are those of all the states."""
    states = np.asarray(initial_states, dtype=np.float64)
    if len(states) <= m:
        return states
    picked = farthest_data_states(states, states[:0], m)
    return states[np.sort(picked)]


def escalation(recipes: tuple[str, ...], data: TransitionDataset, restarts: int = 1
               ) -> str | None:
    """The recipe ``auto`` escalates to where ``given``'s policy gains nothing
    (:func:`gains_nothing`): :data:`ESCALATION` where ``recipes`` is ``("auto",)`` and no
    transition of ``data`` is terminal, with one restart; else ``None``."""
    check_recipes(recipes)
    if (tuple(recipes) == (AUTO,) and restarts == 1
            and not np.asarray(data.terminals, dtype=bool).any()):
        return ESCALATION
    return None


def gains_nothing(score: JudgeScore, gamma: float) -> bool:
    """Whether the judge forecasts that a policy's rewards do not rise along its episodes: the
    mean reward per step of its forecast (``episode_return_mean`` over ``steps``) is no higher
    than the discounted mean per step, ``(1 - gamma) J_hat`` under the judge, which weighs the
    first steps most. A policy that brings the system to better states than those it starts
    from earns more later than at first, and its undiscounted mean lies above the discounted
    one."""
    per_step, discounted = reward_rates(score, gamma)
    return per_step <= discounted


def reward_rates(score: JudgeScore, gamma: float) -> tuple[float, float]:
    """The two means :func:`gains_nothing` compares: the forecast's reward per step
    (``episode_return_mean / steps``) and the discounted one, ``(1 - gamma) J_hat``."""
    return score.episode_return_mean / score.steps, (1.0 - float(gamma)) * score.J_hat


def apply_recipe(config: MethodConfig, name: str) -> MethodConfig:
    """``config`` with recipe ``name``'s settings (and ``recipes`` reduced to it)."""
    check_recipes((name,))
    if name not in RECIPES:
        raise ValueError(f"'{AUTO}' names a list of recipes, not one: resolve it first "
                         "(resolve_recipes)")
    changes: dict[str, Any] = {**RECIPES[name], "recipes": (name,)}
    if name == "stabilise":
        changes["nopg.optimizer.horizon"] = discount_horizon(config.nopg.gamma)
    out = config.replace(**changes)
    if changes.get("nopg.model.successors") == "anchored":
        out = dataclasses.replace(out, nopg=anchored_config(out.nopg))
    return out
