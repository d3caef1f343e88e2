"""Environments used by the NOPG experiments (gymnasium-based)."""

from nopg.envs.lqg import (
    LQG,
    PAPER_BEHAVIOUR_THETA,
    PAPER_HORIZON,
    PAPER_THETA,
    collect_lqg,
    paper_lqg,
)
from nopg.envs.pendulum import (
    BOTTOM_STATE,
    PENDULUM_ENV_ID,
    angle_normalize,
    angle_to_obs,
    collect_pendulum_grid,
    collect_pendulum_random,
    make_pendulum_env,
    obs_to_angle,
    set_pendulum_state,
)

__all__ = [
    "LQG",
    "PAPER_BEHAVIOUR_THETA",
    "PAPER_HORIZON",
    "PAPER_THETA",
    "collect_lqg",
    "collect_pendulum_random",
    "paper_lqg",
    "BOTTOM_STATE",
    "PENDULUM_ENV_ID",
    "angle_normalize",
    "angle_to_obs",
    "collect_pendulum_grid",
    "make_pendulum_env",
    "obs_to_angle",
    "set_pendulum_state",
]
