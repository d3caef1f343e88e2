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
from .bandwidth.selection import (
    Bandwidths,
    DuplicatedDataWarning,
    cross_validated_bandwidth,
    scott_bandwidth,
    select_bandwidths,
    silverman_bandwidth,
)
from .data.dataset import TransitionDataset
from .linalg.solvers import SolveInfo, SolverWarning, bicgstab, solve_dense
from .model.anchored import AnchoredBellman
from .model.bellman import BellmanSolution, NonparametricBellman
from .model.config import ModelConfig
from .model.factory import bellman_model
from .model.local_linear import LocalLinearBellman
from .policies.networks import (
    DeterministicMLPPolicy,
    DiagonalLinearPolicy,
    GaussianMLPPolicy,
    LinearPolicy,
    gaussian_log_prob,
)
from .select.auto import AutoNOPG
from .select.fit_report import FitReport
from .select.method_config import MethodConfig
from .train.algorithm import NOPG, CheckpointCallback, EvalCallback, SupportWarning
from .train.config import NOPGConfig
from .train.config_sections import CMAES, Behaviour, Continuation, GradientAscent, SigmaDecay, Starts
from .train.gradient import PolicyGradientResult, policy_gradient

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
