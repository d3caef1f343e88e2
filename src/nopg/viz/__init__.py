"""Figures: learning curves, policies against the data, bandwidth reports, the gradient analysis
and the pendulum and mountain-car portraits.
"""
