"""Gradient-estimator analysis: NOPG against importance sampling and semi-gradients.

* :mod:`.estimators` -- NOPG-D/S, G(PO)MDP+N/+BN and DPG+Q behind one ``estimate(data, policy)``.
* :mod:`.lqg_cases` -- the estimators set up on any LQG, each with its exact gradient.
* :mod:`.statistics` -- bias^2, variance, MSE and angle with bootstrap percentile intervals.
* :mod:`.parallel` -- independent jobs on local processes or a Ray cluster.
"""

from .estimators import DPGEstimator, GPOMDPEstimator, GradientEstimator, NOPGEstimator
from .lqg_cases import ESTIMATOR_NAMES, EstimatorCase, lqg_cases, lqg_q_gradient
from .parallel import parallel_map
from .statistics import ErrorStatistics, angles_degrees, error_statistics, summary_rows

__all__ = [
    "DPGEstimator", "ESTIMATOR_NAMES", "ErrorStatistics", "EstimatorCase", "GPOMDPEstimator",
    "GradientEstimator", "NOPGEstimator", "angles_degrees", "error_statistics", "lqg_cases",
    "lqg_q_gradient", "parallel_map", "summary_rows",
]
