"""Policies for NOPG: the deterministic and Gaussian MLPs and the linear policies
(:mod:`nopg.policies.networks`), a policy evaluated in cache-sized chunks
(:mod:`nopg.policies.chunked`) and several parameter sets of one policy scored together
(:mod:`nopg.policies.candidates`)."""

from .networks import (
    DeterministicMLPPolicy,
    DiagonalLinearPolicy,
    GaussianMLPPolicy,
    LinearPolicy,
    gaussian_log_prob,
    is_stochastic,
)

__all__ = ["DeterministicMLPPolicy", "DiagonalLinearPolicy", "GaussianMLPPolicy", "LinearPolicy",
           "gaussian_log_prob", "is_stochastic"]
