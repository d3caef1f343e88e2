"""nopg: Nonparametric Off-Policy Policy Gradient for batch (offline) reinforcement learning.

The method, as ``nopg fit`` runs it (bandwidths, fits, the judge's selection, a fit report)::

    import nopg
    data = nopg.TransitionDataset(states, actions, rewards, next_states, terminals)
    method = nopg.AutoNOPG(nopg.MethodConfig(), seed=0).fit(data, initial_states=s0)
    method.policy_, method.J_hat_, method.report_.to_dict()

Its parts (one gradient fit with given bandwidths, the gradient alone)::

    bw = nopg.select_bandwidths(data)
    res = nopg.policy_gradient(data, policy, bandwidths=bw, gamma=0.99, initial_states=s0)
    algo = nopg.NOPG(policy, nopg.NOPGConfig(gamma=0.99)).fit(data, bw, s0, n_updates=1000)
"""

from ._version import __version__ as __version__
from .algorithm import NOPG, CheckpointCallback, EvalCallback, SupportWarning
from .anchored import AnchoredBellman
from .auto import AutoNOPG
from .bandwidth import (
    Bandwidths,
    DuplicatedDataWarning,
    cross_validated_bandwidth,
    scott_bandwidth,
    select_bandwidths,
    silverman_bandwidth,
)
from .bellman import BellmanSolution, NonparametricBellman
from .config import NOPGConfig
from .config_sections import CMAES, Behaviour, Continuation, GradientAscent, SigmaDecay, Starts
from .data import TransitionDataset
from .fit_report import FitReport
from .gradient import PolicyGradientResult, policy_gradient
from .local_linear import LocalLinearBellman
from .method_config import MethodConfig
from .model_config import ModelConfig
from .models import bellman_model
from .policies import (
    DeterministicMLPPolicy,
    DiagonalLinearPolicy,
    GaussianMLPPolicy,
    LinearPolicy,
    gaussian_log_prob,
)
from .solvers import SolveInfo, SolverWarning, bicgstab, solve_dense

__all__ = [
    "AutoNOPG", "MethodConfig", "FitReport",
    "NOPG", "NOPGConfig", "ModelConfig", "GradientAscent", "CMAES", "Starts", "Behaviour",
    "Continuation", "SigmaDecay", "CheckpointCallback", "EvalCallback", "SupportWarning",
    "TransitionDataset", "Bandwidths", "DuplicatedDataWarning", "select_bandwidths",
    "silverman_bandwidth", "scott_bandwidth", "cross_validated_bandwidth",
    "NonparametricBellman", "LocalLinearBellman", "AnchoredBellman", "bellman_model",
    "BellmanSolution", "policy_gradient",
    "PolicyGradientResult",
    "DeterministicMLPPolicy", "DiagonalLinearPolicy", "GaussianMLPPolicy", "LinearPolicy",
    "gaussian_log_prob",
    "SolveInfo", "SolverWarning", "bicgstab", "solve_dense",
]
