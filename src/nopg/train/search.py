"""Derivative-free policy search: CMA-ES over a policy's parameters (``optimizer="cma-es"``).

Gradient ascent needs ``J_hat`` to be smooth at the scale of its steps. Under the anchored model
(:mod:`nopg.model.anchored`) it is not: the neighbour sets of the rollout change discretely with the
policy, so the local slope says little about the slope over a whole gain, and Adam stalls far
below the optimum (``docs/bandwidths.md``). An evolution strategy compares whole policies
instead. One update of a fit is one generation of the covariance matrix adaptation evolution
strategy (CMA-ES; Hansen's ``cma`` package, ask and tell):

1. ``popsize`` parameter vectors are drawn around the search's mean;
2. each is loaded into the policy and scored by ``fitness()`` (``J_hat`` with the same
   Monte-Carlo draws for every candidate, so the scores compare policies, not draws);
3. the strategy moves its mean, step size and covariance towards the better candidates.

The policy holds the best candidate scored so far (the incumbent) after every update, so the
fit's ``J_hat`` never decreases and a stopped fit keeps its best policy.

With ``patience``, a search whose incumbent has not improved for that many generations
restarts; the incumbent is kept. ``restart="ipop"`` restarts from its starting mean and step
size with twice the population (IPOP-CMA-ES, Auger and Hansen 2005), which trades local
refinement for a wider look; its population grows without bound while the incumbent stays (also
on a search that has converged). ``restart="fresh"`` keeps the population and restarts from a
mean drawn around the start, ``start + sigma z`` with ``z ~ N(0, I)`` (seeded by the search's
seed and the restart's number): a new basin at the same cost per generation.

The search suits policies with few parameters (a linear controller, a small network: pycma's
full covariance costs ``O(d^2)`` per candidate, and it needs about ``4 + 3 ln d`` candidates per
generation). Its state in a checkpoint is tensors only (no pickle): the mean, the step size and
the incumbent. A resumed search restarts CMA-ES from that mean and step size with an isotropic
covariance.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters

logger = logging.getLogger(__name__)

__all__ = ["EvolutionSearch", "RESTARTS", "fitness_key"]

RESTARTS = ("fresh", "ipop")


class EvolutionSearch:
    """CMA-ES over the flattened ``params``, one generation per :meth:`step` (module docstring).

    Parameters
    ----------
    params : sequence of tensors
        The parameters searched over (the policy's); they start the search's mean.
    sigma : float
        Initial step size, in the parameters' units (> 0).
    seed : int
        Seed of the strategy's sampling.
    popsize : int or None
        Candidates per generation (``None``: pycma's ``4 + floor(3 ln d)``).
    patience : int or None
        Generations without a better incumbent after which the search restarts (``None``:
        never).
    restart : {"fresh", "ipop"}
        How it restarts: the same population from a mean drawn around the start, or twice the
        population from the start (module docstring).

    Attributes
    ----------
    best_fitness : float
        The incumbent's fitness (``-inf`` before the first step).
    best_alive : float
        The share of the incumbent's episodes that last (1 without ``(alive, value)`` scores).
    evaluations : int
        Fitness evaluations so far.
    restarts : int
        Restarts so far.
    """

    def __init__(self, params: Sequence[torch.Tensor], sigma: float, seed: int,
                 popsize: int | None = None, patience: int | None = None,
                 restart: str = "fresh") -> None:
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError("the policy has no parameters to search over")
        if not (isinstance(sigma, (int, float)) and math.isfinite(sigma) and sigma > 0):
            raise ValueError(f"sigma must be a finite float > 0. Got {sigma!r} instead.")
        self.sigma0, self.seed, self.popsize = float(sigma), int(seed), popsize
        if restart not in RESTARTS:
            raise ValueError(f"restart must be one of {RESTARTS}. Got {restart!r} instead.")
        self.patience, self.restart = patience, restart
        self.best = self._vector()
        self.start = self.best.copy()
        self.best_fitness = -math.inf
        self.best_alive = 1.0
        self.evaluations = 0
        self.restarts = 0
        self._stalled = 0
        self._es = self._strategy(self.best, self.sigma0)

    def _vector(self) -> np.ndarray:
        return parameters_to_vector(self.params).detach().cpu().double().numpy()

    def load(self, x: np.ndarray) -> None:
        """Load the parameter vector ``x`` into the parameters."""
        ref = self.params[0]
        with torch.no_grad():
            vector_to_parameters(torch.as_tensor(x, dtype=ref.dtype, device=ref.device),
                                 self.params)

    def _strategy(self, mean: np.ndarray, sigma: float) -> Any:
        import cma

        options: dict[str, Any] = {"seed": self.seed + 1 + 1000 * self.restarts, "verbose": -9}
        if self.popsize is not None:
            options["popsize"] = int(self.popsize)
        return cma.CMAEvolutionStrategy(mean, sigma, options)

    @property
    def sigma(self) -> float:
        """The current overall step size."""
        return float(self._es.sigma)

    @property
    def population(self) -> int:
        """Candidates per generation."""
        return int(self._es.popsize)

    def step(self, fitness: Callable[[], float | tuple[float, float]],
             fitness_many: Callable[[list[np.ndarray]], list[float | tuple[float, float]]]
             | None = None) -> dict[str, float]:
        """One generation: score ``popsize`` candidates by ``fitness()`` (higher is better,
        called with each candidate loaded into the parameters) and leave the incumbent loaded.
        The first step (and the first after :meth:`rescore`) scores the loaded parameters first.
        ``fitness_many(candidates)``, where given, scores a generation's parameter vectors
        together instead (the same scores as ``fitness()`` of each, computed in one batch; it
        may load them).

        ``fitness()`` may return ``(alive, value)``, ``alive`` in [0, 1] (the share of its
        episodes a candidate keeps alive, ``CMAES.horizon``): candidates then rank by ``alive``
        first, and those with ``alive = 1`` by ``value`` (a float is ``(1, value)``).

        Returns
        -------
        dict
            ``generation_best`` (the best fitness of this generation), ``evaluations`` (so far),
            ``search_sigma`` (the step size after the generation), ``search_restarts`` and
            ``search_alive`` (the incumbent's ``alive``).
        """
        if self.best_fitness == -math.inf:       # the loaded parameters are the first incumbent
            self.best_alive, self.best_fitness = fitness_key(fitness())
            self.best = self._vector()
            self.evaluations += 1
        candidates = self._es.ask()
        if fitness_many is not None:
            keys = [fitness_key(k) for k in fitness_many(list(candidates))]
        else:
            keys = []
            for x in candidates:
                self.load(x)
                keys.append(fitness_key(fitness()))
        self.evaluations += len(candidates)
        # pycma minimises; an infinite score becomes a finite worst one, and a candidate whose
        # episodes end ranks below that by how many of them end
        finite = [v for a, v in keys if math.isfinite(v)]
        worst = min((v for a, v in keys if a >= 1.0 and math.isfinite(v)), default=min(
            finite, default=0.0))
        self._es.tell(candidates, [-(v if a >= 1.0 and math.isfinite(v) else
                                     worst - 1.0 - (1.0 - a)) for a, v in keys])
        i = max(range(len(keys)), key=lambda j: keys[j])
        self._stalled += 1
        if keys[i] > (self.best_alive, self.best_fitness):
            self.best = np.asarray(candidates[i], float)
            self.best_alive, self.best_fitness = keys[i]
            self._stalled = 0
        self.load(self.best)
        if self.patience is not None and self._stalled >= self.patience:
            self._restart()
        return {"generation_best": keys[i][1], "evaluations": float(self.evaluations),
                "search_sigma": self.sigma, "search_restarts": float(self.restarts),
                "search_alive": self.best_alive}

    def _restart(self) -> None:
        """IPOP: the starting mean and step size again, twice the population; fresh: the same
        population from a mean drawn around the start."""
        self.restarts += 1
        self._stalled = 0
        mean = self.start
        if self.restart == "ipop":
            self.popsize = 2 * self.population
        else:
            self.popsize = self.population
            rng = np.random.default_rng([self.seed, self.restarts])
            mean = self.start + self.sigma0 * rng.standard_normal(self.start.shape)
        self._es = self._strategy(mean, self.sigma0)
        logger.info("CMA-ES %s restart %d after %d generations without improvement: population "
                    "%d (incumbent %.6g)", self.restart, self.restarts, self.patience,
                    self.popsize, self.best_fitness)

    def rescore(self) -> None:
        """Score the incumbent again at the next step (the objective changed, e.g. the model's
        bandwidths); the incumbent must be loaded in the parameters."""
        self.best_fitness = -math.inf
        self.best_alive = 1.0

    def stopped(self) -> dict[str, Any]:
        """pycma's termination conditions that hold (empty while the search goes on)."""
        return dict(self._es.stop())

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, torch.Tensor]:
        """Tensors only: the mean, the step size, the incumbent and the counters."""
        return {"mean": torch.from_numpy(np.asarray(self._es.mean, float).copy()),
                "sigma": torch.tensor(self.sigma, dtype=torch.float64),
                "best": torch.from_numpy(self.best.copy()),
                "best_fitness": torch.tensor(self.best_fitness, dtype=torch.float64),
                "best_alive": torch.tensor(self.best_alive, dtype=torch.float64),
                "evaluations": torch.tensor(self.evaluations),
                "restarts": torch.tensor(self.restarts),
                "population": torch.tensor(self.population),
                "start": torch.from_numpy(self.start.copy())}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Restart the strategy at a saved mean and step size (isotropic covariance)."""
        mean = state["mean"].double().cpu().numpy()
        if mean.shape != self.best.shape:
            raise ValueError(f"the saved search has {mean.size} parameters, the policy "
                             f"{self.best.size}")
        self.best = state["best"].double().cpu().numpy()
        self.best_fitness = float(state["best_fitness"])
        self.best_alive = float(state.get("best_alive", 1.0))
        self.evaluations = int(state["evaluations"])
        if "restarts" in state:
            self.restarts, self.popsize = int(state["restarts"]), int(state["population"])
            self.start = state["start"].double().cpu().numpy()
        self._es = self._strategy(mean, float(state["sigma"]))
        logger.info("CMA-ES restarted from the checkpoint's mean, step size %.3g (the "
                    "covariance is not saved)", float(state["sigma"]))


def fitness_key(score: float | tuple[float, float]) -> tuple[float, float]:
    """``(alive, value)`` of a fitness, a non-finite value as ``-inf``: the search's ranking
    (higher tuples are better)."""
    alive, value = (1.0, score) if not isinstance(score, tuple) else score
    value = float(value)
    return float(alive), (value if math.isfinite(value) else -math.inf)
