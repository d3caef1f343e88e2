"""Kernel bandwidths: the rules (auto k-NN, Silverman, Scott, cross-validation, relevance) and the
:class:`Bandwidths` vectors.
"""

from .selection import (
    Bandwidths,
    cross_validated_bandwidth,
    relevance_bandwidths,
    scott_bandwidth,
    select_bandwidths,
    silverman_bandwidth,
)

__all__ = ["Bandwidths", "select_bandwidths", "silverman_bandwidth", "scott_bandwidth",
           "cross_validated_bandwidth", "relevance_bandwidths"]
