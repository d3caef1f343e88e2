"""Policy improvement against data size and against other algorithms (paper §6.4, appendix): the
sweep's algorithms, tasks and configuration (:class:`SampleEfficiencyConfig`); the sweep itself
runs in :mod:`nopg.experiments.sample_efficiency_sweep`, its jobs in
:mod:`nopg.experiments.sample_efficiency_jobs`.

``nopg reproduce sample-efficiency --task <name>`` runs data sizes x seeds x algorithms through
:func:`nopg.analysis.parallel.parallel_map` (local processes, or Ray with ``--ray-address``):

* NOPG-D / NOPG-S with the task's defaults (no factors per data size);
* the offline baselines of d3rlpy (BC, TD3+BC, IQL, CQL, BCQ, BEAR) in their isolated
  environment (:mod:`nopg.baselines.d3rlpy_bridge`), trained on the very same transitions
  (their SHA-256 is in every row and checked);
* MOPO and MOReL (:mod:`nopg.baselines.model_based`, written here on Stable-Baselines3's SAC
  with an ensemble dynamics model; no maintained implementation installs with this project's
  dependencies), in this environment, on the same transitions (SHA-256 in every row);
* PWIS (G(PO)MDP+N gradient ascent, :mod:`nopg.baselines.pwis`) where the behaviour density is
  known (the random-agent data);
* the online baselines DDPG, TD3 and SAC of Stable-Baselines3 (:mod:`nopg.baselines.online`)
  against environment steps.

Every policy is scored by the task's own evaluation (``task.evaluate``: the same start states,
horizon and episodes for a seed). Outputs in ``<out>/sample-efficiency__<task>__<time>/``:
``runs.csv`` (one row per run), ``summary.csv`` (mean and 95% bootstrap interval per algorithm
and size), ``sample_efficiency.png``, ``table.md``, ``config.json``, ``summary.json``, ``run.log``
and ``jobs/`` (the d3rlpy jobs' files).

The default is reduced to fit about an hour on two cores (see :meth:`SampleEfficiencyConfig`);
:meth:`SampleEfficiencyConfig.paper_size` is the paper's size, meant for more cores or Ray.
BRAC is not included (not in d3rlpy 2.x).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..validation import check_positive_int
from .common import checked_replace

__all__ = ["ALGORITHMS", "D3RLPY_ALGORITHMS", "MODEL_BASED", "NOPG_ALGORITHMS", "ONLINE",
           "SWEEP_TASKS", "SampleEfficiencyConfig"]

NOPG_ALGORITHMS = ("NOPG-D", "NOPG-S")
D3RLPY_ALGORITHMS = ("BC", "TD3+BC", "IQL", "CQL", "BCQ", "BEAR")
MODEL_BASED = ("MOPO", "MOReL")
ONLINE = ("DDPG", "TD3", "SAC")
ALGORITHMS = (*NOPG_ALGORITHMS, *D3RLPY_ALGORITHMS, *MODEL_BASED, "PWIS", *ONLINE)


def _grid_size(n: int) -> dict[str, Any]:
    k = int(round(math.sqrt(n / 2)))
    if 2 * k * k != n:
        raise ValueError(f"pendulum-grid sizes are 2 k^2 (k x k states, 2 actions), e.g. 200, 450, "
                         f"800, 1250, 1800, 3200. Got {n}.")
    return {"n_theta": k, "n_theta_dot": k, "n_action": 2}


def _demonstrations(n: int) -> dict[str, Any]:
    if not 1 <= n <= 10:
        raise ValueError(f"mountaincar-human sizes are 1-10 demonstrations. Got {n}.")
    return {"n_demonstrations": n, "demonstrations": None}


@dataclass(frozen=True)
class SweepTask:
    """How the sweep sizes, evaluates and compares on one task."""

    unit: str                                   # what a size counts
    sizes: tuple[int, ...]                      # reduced default
    paper_sizes: tuple[int, ...]
    task_settings: Callable[[int], dict[str, Any]]
    online_budgets: tuple[int, ...] = ()        # reduced default; () for no online baselines
    paper_online_budgets: tuple[int, ...] = ()
    behaviour: str | None = None                # PWIS: "pendulum-mixture" | "uniform" | None


def _n_samples(n: int) -> dict[str, Any]:
    if n < 1:
        raise ValueError(f"data sizes must be positive. Got {n}.")
    return {"n_samples": n}


def _pendulum_episodes(n: int) -> dict[str, Any]:
    if n < 200 or n % 200:
        raise ValueError(f"pendulum-uniform/-controller sizes are multiples of the 200-step "
                         f"episodes, e.g. 1000, 2000. Got {n}.")
    return {"n_episodes": n // 200, "episode_length": 200}


_ONLINE_PAPER = (1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000)
SWEEP_TASKS: dict[str, SweepTask] = {
    "pendulum-grid": SweepTask("transitions", (200, 450, 800), (200, 450, 800, 1250, 1800, 3200),
                               _grid_size, (1000, 5000), _ONLINE_PAPER),
    "pendulum-random": SweepTask(
        "transitions", (200, 1000, 5000),
        (100, 500, 1000, 1500, 2000, 3000, 5000, 7000, 9000, 10_000), _n_samples,
        (1000, 5000), _ONLINE_PAPER, "pendulum-mixture"),
    # The reduced sizes stop where NOPG-D's run alone would break the hour on two workers
    # (cart-pole 2500, mountain car 10 demonstrations: docs/sample_efficiency.md); --full has them.
    "cartpole-random": SweepTask(
        "transitions", (250, 1000),
        (100, 250, 500, 1000, 1500, 2500, 3000, 5000, 6000, 8000, 10_000), _n_samples,
        (1000, 5000), _ONLINE_PAPER, "uniform"),
    "mountaincar-human": SweepTask("demonstrations", (1, 2, 5), tuple(range(1, 11)),
                                   _demonstrations),
    "umaze": SweepTask("transitions", (100, 300, 1000), (100, 200, 300, 500, 700, 1000),
                       _n_samples),
    # The data nobody tuned for (the user-data tasks): their one default size, 10 seeds in full.
    "pendulum-uniform": SweepTask("transitions", (2000,), (2000,), _pendulum_episodes,
                                  (1000, 5000), _ONLINE_PAPER),
    "pendulum-controller": SweepTask("transitions", (2000,), (2000,), _pendulum_episodes,
                                     (1000, 5000), _ONLINE_PAPER),
    "mountaincar-uniform": SweepTask("transitions", (3000,), (3000,), _n_samples,
                                     (1000, 5000), _ONLINE_PAPER),
    "invertedpendulum-random": SweepTask("transitions", (5000,), (5000,), _n_samples),
}
"""The tasks the sweep knows, with their reduced and paper sizes."""


@dataclass(frozen=True)
class SampleEfficiencyConfig:
    """Settings of the sweep.

    The reduced default (3 seeds, 3 sizes, 1000 d3rlpy steps, 2000 MOPO/MOReL SAC steps, 500
    PWIS updates, online budgets 1000 and 5000) is sized to finish within an hour on two
    workers of the 2-core machine (its measured cost per run: ``docs/sample_efficiency.md``).

    Attributes
    ----------
    task : str
        One of :data:`SWEEP_TASKS`.
    algorithms : tuple of str
        Subset of :data:`ALGORITHMS`; those that do not apply to the task (PWIS without a known
        behaviour density, online ones without an environment) are skipped with a log line.
    sizes, online_budgets : tuple of int
        Data sizes (transitions, or demonstrations for mountaincar-human) and environment-step
        budgets of the online algorithms; empty: the task's reduced default.
    seeds : tuple of int
    offline_steps : int
        Gradient steps of every d3rlpy algorithm (d3rlpy's own examples use 20 000+).
    model_based_steps : int
        SAC gradient steps of MOPO and MOReL in their learned model (one model step each).
    pwis_updates : int
        Adam updates of PWIS (paper: 2000).
    nopg_updates : int, optional
        NOPG updates (default: the task's, the paper's).
    settings : dict
        Overrides of the task's experiment config for NOPG and the data (``--set``-style keys,
        e.g. ``{"nopg.model.top_k": 10}``); ``task.n_samples`` is set by the sweep.
    d3rlpy : dict
        Per algorithm, extra fields of its d3rlpy ``Config`` (e.g. ``{"BEAR": {...}}``).
    confidence, n_boot : float, int
        The bootstrap interval (paper: 95%, 10 000 resamples).
    """

    task: str = "pendulum-random"
    algorithms: tuple[str, ...] = ALGORITHMS[:1] + ALGORITHMS[2:]
    sizes: tuple[int, ...] = ()
    online_budgets: tuple[int, ...] = ()
    seeds: tuple[int, ...] = (0, 1, 2)
    offline_steps: int = 1000
    model_based_steps: int = 2000
    pwis_updates: int = 500
    nopg_updates: int | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    d3rlpy: dict[str, dict[str, Any]] = field(default_factory=dict)
    confidence: float = 0.95
    n_boot: int = 10000

    def __post_init__(self) -> None:
        if self.task not in SWEEP_TASKS:
            raise ValueError(f"The 'task' parameter must be one of {', '.join(SWEEP_TASKS)}. "
                             f"Got {self.task!r} instead.")
        unknown = [a for a in self.algorithms if a not in ALGORITHMS]
        if unknown or not self.algorithms:
            raise ValueError(f"The 'algorithms' parameter must name some of {', '.join(ALGORITHMS)}."
                             f" Got {list(self.algorithms)!r} instead.")
        for name in ("sizes", "online_budgets", "seeds"):
            values = getattr(self, name)
            if any(isinstance(v, bool) or not isinstance(v, int) for v in values) or \
                    (name != "seeds" and any(v < 1 for v in values)):
                raise ValueError(f"The '{name}' parameter must be a tuple of "
                                 f"{'ints' if name == 'seeds' else 'positive ints'}. "
                                 f"Got {values!r} instead.")
        if not self.seeds:
            raise ValueError("The 'seeds' parameter must name at least one seed. Got () instead.")
        for name in ("offline_steps", "model_based_steps", "pwis_updates", "n_boot"):
            check_positive_int(name, getattr(self, name))
        check_positive_int("nopg_updates", self.nopg_updates, allow_none=True)
        if not 0 < self.confidence < 1:
            raise ValueError(f"The 'confidence' parameter must lie in (0, 1). "
                             f"Got {self.confidence!r} instead.")
        bad = [k for k in self.d3rlpy if k not in D3RLPY_ALGORITHMS]
        if bad:
            raise ValueError(f"The 'd3rlpy' parameter takes keys among "
                             f"{', '.join(D3RLPY_ALGORITHMS)}. Got {bad!r}.")

    @classmethod
    def paper_size(cls, task: str = "pendulum-random") -> SampleEfficiencyConfig:
        """10 seeds, the paper's sizes and training lengths (for many cores or a Ray cluster)."""
        spec = SWEEP_TASKS.get(task)
        if spec is None:
            raise ValueError(f"unknown sweep task {task!r}; known: {', '.join(SWEEP_TASKS)}")
        return cls(task=task, sizes=spec.paper_sizes, online_budgets=spec.paper_online_budgets,
                   seeds=tuple(range(10)), offline_steps=20_000, model_based_steps=20_000,
                   pwis_updates=2000)

    def replace(self, **changes: Any) -> SampleEfficiencyConfig:
        """A checked copy; lists become tuples."""
        tuples = ("algorithms", "sizes", "online_budgets", "seeds")
        changes = {k: tuple(v) if k in tuples and isinstance(v, list) else v
                   for k, v in changes.items()}
        return checked_replace(self, changes, "sample-efficiency")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def spec(self) -> SweepTask:
        return SWEEP_TASKS[self.task]

    def data_sizes(self) -> tuple[int, ...]:
        return self.sizes or self.spec.sizes

    def budgets(self) -> tuple[int, ...]:
        return self.online_budgets or self.spec.online_budgets
