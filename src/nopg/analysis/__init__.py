"""Gradient-estimator analysis: NOPG against importance sampling and semi-gradients."""
