"""One NOPG fit: the estimator, its configuration and its sections, the gradient, the behaviour
term, CMA-ES, callbacks, loggers and checkpoints.
"""

from .algorithm import NOPG
from .config import NOPGConfig
from .config_sections import CMAES, Behaviour, Continuation, GradientAscent, SigmaDecay, Starts
from .gradient import policy_gradient

__all__ = ["NOPG", "NOPGConfig", "GradientAscent", "CMAES", "Starts", "Behaviour", "Continuation",
           "SigmaDecay", "policy_gradient"]
