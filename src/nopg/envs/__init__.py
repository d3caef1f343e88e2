"""Environments used by the NOPG experiments (gymnasium-based).

The package offers what its two most used modules export: the LQG in closed form
(:mod:`nopg.envs.lqg`) and the pendulum (:mod:`nopg.envs.pendulum`); the other environments are
imported from their modules.
"""

from nopg.envs import lqg, pendulum
from nopg.envs.lqg import *  # noqa: F403
from nopg.envs.pendulum import *  # noqa: F403

__all__ = [*lqg.__all__, *pendulum.__all__]
