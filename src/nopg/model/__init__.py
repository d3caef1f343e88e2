"""The nonparametric Bellman model: kernels, neighbour search, top-k rows, the kernel,
local-linear and anchored variants, their factory and their settings.
"""

from .anchored import AnchoredBellman
from .bellman import BellmanSolution, NonparametricBellman
from .config import ModelConfig
from .factory import bellman_model
from .local_linear import LocalLinearBellman

__all__ = ["ModelConfig", "NonparametricBellman", "LocalLinearBellman", "AnchoredBellman",
           "bellman_model", "BellmanSolution"]
