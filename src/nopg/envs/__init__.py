"""Environments used by the NOPG experiments (gymnasium-based)."""

from nopg.envs.pendulum import (
    BOTTOM_STATE,
    PENDULUM_ENV_ID,
    angle_normalize,
    angle_to_obs,
    collect_pendulum_grid,
    make_pendulum_env,
    obs_to_angle,
    set_pendulum_state,
)

__all__ = [
    "BOTTOM_STATE",
    "PENDULUM_ENV_ID",
    "angle_normalize",
    "angle_to_obs",
    "collect_pendulum_grid",
    "make_pendulum_env",
    "obs_to_angle",
    "set_pendulum_state",
]
