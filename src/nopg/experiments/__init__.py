"""The paper's experiments as named, configurable runs (``nopg reproduce <name>``).

Also the "user data" experiments of :mod:`nopg.experiments.user_data` (pendulum-uniform,
pendulum-controller, mountaincar-uniform, invertedpendulum-random): data sets no setting was
tuned for, run with the library's defaults.
"""

from .cartpole_random import CartpoleRandomTask
from .hopper import HopperTask
from .mountaincar_human import MountainCarHumanTask
from .pendulum_grid import PendulumGridTask
from .pendulum_random import PendulumRandomTask
from .runner import (
    ExperimentConfig,
    RunSummary,
    SeedResult,
    Task,
    make_policy,
    run_experiment,
    run_seed,
)
from .umaze import UMazeTask
from .user_data import USER_DATA_TASKS

TASKS: dict[str, type] = {PendulumGridTask.name: PendulumGridTask,
                          PendulumRandomTask.name: PendulumRandomTask,
                          MountainCarHumanTask.name: MountainCarHumanTask,
                          UMazeTask.name: UMazeTask,
                          HopperTask.name: HopperTask,
                          CartpoleRandomTask.name: CartpoleRandomTask,
                          **{cls.name: cls for cls in USER_DATA_TASKS}}


ANALYSES: dict[str, str] = {
    "gradient-analysis": "Gradient analysis on the LQG: NOPG vs G(PO)MDP+N/+BN and DPG+Q (bias, "
                         "variance, MSE, angle)",
    "trust-region": "Pendulum trust region: NOPG-D gradient norm against the policy's log-likelihood",
    "sample-efficiency": "Return against data size: NOPG vs d3rlpy offline baselines, PWIS and "
                         "SB3 online baselines (--task <name>)",
}
"""Analyses run by ``nopg reproduce`` that are not NOPG training runs (no Task)."""


def get_task(name: str) -> Task:
    """The task registered under ``name``."""
    if name not in TASKS:
        raise ValueError(f"unknown experiment {name!r}; available: {sorted([*TASKS, *ANALYSES])}")
    return TASKS[name]()


__all__ = ["ANALYSES", "ExperimentConfig", "RunSummary", "SeedResult", "Task", "TASKS", "get_task",
           "make_policy", "run_experiment", "run_seed"]
