"""Relevance bandwidths: per-dimension kernel widths fitted by held-out one-step prediction.

In many dimensions a kernel of one spacing per dimension finds hardly any neighbour, and the
``auto`` rule (:mod:`nopg.bandwidth.knn`) then widens every state dimension by one factor. Yet
the dynamics rarely depend on every input alike. Automatic relevance determination fits one
bandwidth per input dimension to what the model must predict: the Nadaraya-Watson regression

    y_hat(x_i) = sum_{j != i} softmax_j(-1/2 ||(x_i - x_j) / h||^2) y_j

of the targets ``y = (s' - s, r)`` (each column standardised) from the inputs ``x = (s, a)``,
with the Gaussian product kernel of the model (:mod:`nopg.model.kernels`). The parameters are
``log h``; the objective is the leave-one-out mean squared error (:func:`heldout_prediction_loss`),
minimised by L-BFGS-B (SciPy) with the gradient from torch autograd, in float64, from a start
(by default the ``auto`` bandwidths). A dimension that does not help the prediction ends wide
(its *relevance* ``std / h`` small), one that does ends narrow.

Tractability: the queries are a seeded random subsample of at most ``max_samples`` transitions,
the kernel's support a larger one (``support_samples``) holding the queries; a query never sees
a support point with the same inputs (itself or an exact copy), so no prediction is a lookup.
Bounds: every fitted bandwidth lies in ``[1e-3, max_factor]`` times its column's standard
deviation; the upper bound keeps the objective finite and well-conditioned where a dimension is
irrelevant (its kernel then is flat across the data, ``exp(-1/2 (4 / max_factor)^2)`` or more
between points four standard deviations apart). A constant input column keeps its starting
bandwidth (it cannot matter to the regression). The next-state bandwidth is not fitted
(``None``: the state's).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import ArrayLike

from ..data.dataset import TransitionDataset
from ..validation import fail, is_int
from .knn import ACTION_EFFECT_MAX, knn_bandwidths
from .rules import data_columns, seed_generator
from .vectors import Bandwidths

__all__ = [
    "MIN_TRANSITIONS",
    "RelevanceFit",
    "fit_relevance",
    "heldout_prediction_loss",
    "one_step_prediction_error",
    "relevance_bandwidths",
    "relevance_fit",
]

logger = logging.getLogger("nopg.bandwidth.selection")    # the records keep the name of the module they left

MIN_TRANSITIONS = 10
"""The fewest transitions (and distinct inputs) from which relevance bandwidths are fitted."""
MIN_FACTOR = 1e-3
"""The lower bound of a fitted bandwidth, in standard deviations of its column."""
_CHUNK_ELEMENTS = 1 << 21    # queries x support entries per chunk of the objective (16 MiB)


@dataclass(frozen=True)
class RelevanceFit:
    """What :func:`relevance_fit` found.

    ``bandwidths`` the fitted ones, ``start`` those it started from; ``loss_start`` and ``loss``
    the held-out mean squared error of the standardised targets there (``loss_mean``: that of
    predicting every target by the support's mean, about 1); ``relevance_state`` and
    ``relevance_action`` each dimension's ``std / h`` (at the upper bound ``1 / max_factor``: no
    use to the prediction); ``iterations`` and ``evaluations`` of L-BFGS-B; ``n_queries`` and
    ``n_support`` the subsample sizes.
    """

    bandwidths: Bandwidths
    start: Bandwidths
    loss_start: float
    loss: float
    loss_mean: float
    relevance_state: tuple[float, ...]
    relevance_action: tuple[float, ...]
    iterations: int
    evaluations: int
    n_queries: int
    n_support: int


def heldout_prediction_loss(log_bandwidths: torch.Tensor, queries: torch.Tensor,
                            query_targets: torch.Tensor, support: torch.Tensor,
                            support_targets: torch.Tensor, excluded: torch.Tensor) -> torch.Tensor:
    """The summed squared error of the Nadaraya-Watson predictions of ``query_targets``.

    Parameters
    ----------
    log_bandwidths : tensor (d,)
        ``log h`` of the Gaussian product kernel.
    queries, support : tensors (m, d) and (n, d)
        Inputs, in the same (e.g. centred) coordinates.
    query_targets, support_targets : tensors (m, t) and (n, t)
    excluded : bool tensor (m, n)
        Support points a query may not use (itself, exact copies). Every row keeps one at least.

    Returns
    -------
    tensor ()
        ``sum_i ||y_i - sum_j w_ij y_j||^2``, differentiable in ``log_bandwidths``.
    """
    prediction = _kernel_weights(log_bandwidths, queries, support, excluded) @ support_targets
    return ((prediction - query_targets) ** 2).sum()


def _kernel_weights(log_bandwidths: torch.Tensor, queries: torch.Tensor, support: torch.Tensor,
                    excluded: torch.Tensor | None) -> torch.Tensor:
    """The regression's weights ``softmax_j(-1/2 ||(x_i - x_j) / h||^2)`` (m, n), ``excluded``
    pairs (if any) at zero; squared distances by one matrix product."""
    inv = torch.exp(-log_bandwidths)
    zq, zs = queries * inv, support * inv
    sq = (zq * zq).sum(1)[:, None] + (zs * zs).sum(1)[None, :] - 2.0 * (zq @ zs.T)
    logits = -0.5 * sq.clamp_min(0.0)
    if excluded is not None:
        logits = logits.masked_fill(excluded, float("-inf"))
    return torch.softmax(logits, dim=1)


def _positive_int(name: str, value: object, least: int) -> int:
    if not is_int(value) or value < least:
        fail(name, f"an int >= {least}", value)
    return int(value)


def _one_step_arrays(data: TransitionDataset) -> tuple[np.ndarray, np.ndarray]:
    """The regression's inputs ``(s, a)`` and targets ``(s' - s, r)`` of ``data``."""
    return (np.hstack([data.states, data.actions]),
            np.column_stack([data.next_states - data.states, data.rewards]))


class _Objective:
    """The held-out loss of fixed query and support subsamples as ``(value, gradient)`` of the
    free log-bandwidths, in query chunks (memory bounded by ``_CHUNK_ELEMENTS``)."""

    def __init__(self, inputs: np.ndarray, targets: np.ndarray, support: np.ndarray, n_queries: int,
                 log_fixed: np.ndarray, free: np.ndarray) -> None:
        centred = inputs[support] - inputs[support].mean(0)
        self.support = torch.from_numpy(centred)
        self.queries = self.support[:n_queries]            # the queries are the first supports
        self.support_targets = torch.from_numpy(targets[support])
        self.query_targets = self.support_targets[:n_queries]
        _, ids = np.unique(inputs[support], axis=0, return_inverse=True)
        self.support_ids = torch.from_numpy(ids.reshape(-1))
        self.query_ids = self.support_ids[:n_queries]
        self.log_fixed = torch.from_numpy(log_fixed)
        self.free = torch.from_numpy(free)
        self.count = n_queries * targets.shape[1]
        self.chunk = max(1, _CHUNK_ELEMENTS // support.shape[0])
        self.evaluations = 0

    def __call__(self, x: np.ndarray, grad: bool = True) -> tuple[float, np.ndarray]:
        self.evaluations += grad
        free = torch.tensor(x, dtype=torch.float64, requires_grad=grad)
        total, m = 0.0, self.queries.shape[0]
        for lo in range(0, m, self.chunk):
            hi = min(m, lo + self.chunk)
            excluded = self.query_ids[lo:hi, None] == self.support_ids[None, :]
            with torch.set_grad_enabled(grad):
                log_h = self.log_fixed.clone()
                log_h[self.free] = free
                loss = heldout_prediction_loss(log_h, self.queries[lo:hi], self.query_targets[lo:hi],
                                               self.support, self.support_targets, excluded) / self.count
                if grad:
                    loss.backward()
            total += float(loss.detach())
        gradient = free.grad.numpy().copy() if grad else np.zeros_like(x)
        return total, gradient


def fit_relevance(inputs: ArrayLike, targets: ArrayLike, start: ArrayLike, max_samples: int = 1000,
                  support_samples: int = 4000, max_factor: float = 10.0, max_iter: int = 100,
                  seed: np.random.Generator | int | None = None) -> tuple[np.ndarray, dict]:
    """Per-column bandwidths of ``inputs`` minimising the held-out error of predicting ``targets``.

    Parameters
    ----------
    inputs : array-like (n, d)
    targets : array-like (n,) or (n, t)
        Each column is standardised first; constant columns are dropped.
    start : array-like (d,)
        Positive starting bandwidths (clipped into the bounds).
    max_samples : int >= 2
        Queries: at most this many rows, drawn without replacement.
    support_samples : int >= 2
        The kernel's support: at most this many rows (and at least the queries), holding them.
    max_factor : float > 1e-3
        Upper bound of each bandwidth in standard deviations of its column (module docstring).
    max_iter : int >= 1
        Iterations of L-BFGS-B.
    seed : numpy Generator or int, optional
        Randomness of the subsamples (default seed 0).

    Returns
    -------
    (numpy.ndarray (d,), dict)
        The bandwidths and ``loss_start``, ``loss``, ``loss_mean``, ``iterations``,
        ``evaluations``, ``n_queries``, ``n_support``.
    """
    from scipy.optimize import minimize

    x = data_columns(inputs, "inputs")
    y = data_columns(targets, "targets")
    n, d = x.shape
    if y.shape[0] != n:
        raise ValueError(f"targets has {y.shape[0]} rows but inputs has {n}")
    h0 = np.asarray(start, dtype=np.float64).reshape(-1)
    if h0.shape != (d,) or not np.all(np.isfinite(h0) & (h0 > 0)):
        raise ValueError(f"start must hold {d} positive finite bandwidths. Got {start!r} instead.")
    m = _positive_int("max_samples", max_samples, 2)
    n_s = _positive_int("support_samples", support_samples, 2)
    max_iter = _positive_int("max_iter", max_iter, 1)
    if not (isinstance(max_factor, (int, float, np.integer, np.floating)) and not isinstance(max_factor, bool)
            and MIN_FACTOR < max_factor < np.inf):
        raise ValueError(f"The 'max_factor' parameter must be finite and larger than {MIN_FACTOR}. "
                         f"Got {max_factor!r} instead.")
    distinct = np.unique(x, axis=0).shape[0]
    if n < MIN_TRANSITIONS or distinct < MIN_TRANSITIONS:
        raise ValueError(f"relevance bandwidths need at least {MIN_TRANSITIONS} transitions with "
                         f"distinct inputs; the data have {n} ({distinct} distinct)")
    y_std = y.std(0, ddof=1)
    keep = y_std > 0
    if not keep.any():
        raise ValueError("every target column is constant; nothing to predict")
    y = (y[:, keep] - y[:, keep].mean(0)) / y_std[keep]
    generator = seed_generator(seed)
    n_s = min(n, max(n_s, m))
    support = generator.choice(n, size=n_s, replace=False)
    m = min(m, n_s)
    if np.unique(x[support], axis=0).shape[0] < 2:
        raise ValueError("the support subsample holds one distinct input only; raise 'support_samples'")
    x_std = x.std(0, ddof=1)
    free = x_std > 0
    lower, upper = MIN_FACTOR * x_std[free], float(max_factor) * x_std[free]
    log_start = np.log(h0)
    log_start[free] = np.clip(log_start[free], np.log(lower), np.log(upper))
    objective = _Objective(x, y, support, m, log_start.copy(), free)
    loss_start, _ = objective(log_start[free], grad=False)
    loss_mean = float(((objective.query_targets - objective.support_targets.mean(0)) ** 2).mean())
    bounds = list(zip(np.log(lower), np.log(upper)))
    result = minimize(objective, log_start[free], jac=True, method="L-BFGS-B", bounds=bounds,
                      options={"maxiter": max_iter})
    best, iterations = result.x, int(result.nit)
    loss, _ = objective(best, grad=False)
    if loss > loss_start:            # L-BFGS-B returns its last point; never keep one worse than the start
        best, loss = log_start[free], loss_start
    log_h = log_start.copy()
    log_h[free] = best
    info = {"loss_start": loss_start, "loss": loss, "loss_mean": loss_mean,
            "iterations": iterations, "evaluations": objective.evaluations,
            "n_queries": m, "n_support": int(n_s)}
    return np.exp(log_h), info


def relevance_fit(data: TransitionDataset, start: Bandwidths | None = None, max_samples: int = 1000,
                  support_samples: int = 4000, max_factor: float = 10.0, max_iter: int = 100,
                  seed: np.random.Generator | int | None = None,
                  max_action_effect: float | None = ACTION_EFFECT_MAX) -> RelevanceFit:
    """State and action bandwidths fitted by held-out one-step prediction (module docstring).

    Parameters
    ----------
    data : TransitionDataset
        At least :data:`MIN_TRANSITIONS` transitions; terminal ones are predicted too.
    start : Bandwidths, optional
        Where the fit starts; default the ``auto`` bandwidths (:func:`knn_bandwidths` with
        ``seed`` and ``max_action_effect``). Its ``next_state`` is not used.
    max_samples, support_samples, max_factor, max_iter, seed
        As in :func:`fit_relevance`.
    max_action_effect : float or None
        The ``auto`` start's action guard (unused when ``start`` is given).

    Returns
    -------
    RelevanceFit
    """
    if not isinstance(data, TransitionDataset):
        raise TypeError(f"data must be a TransitionDataset. Got {type(data).__name__} instead.")
    if data.n < MIN_TRANSITIONS:
        raise ValueError(f"relevance bandwidths need at least {MIN_TRANSITIONS} transitions; "
                         f"the data have {data.n}")
    generator = seed_generator(seed)
    if start is None:
        start = knn_bandwidths(data, seed=generator, max_action_effect=max_action_effect)
    if not isinstance(start, Bandwidths):
        raise TypeError(f"start must be a Bandwidths or None. Got {type(start).__name__} instead.")
    start = Bandwidths(start.state, start.action).broadcast(data.state_dim, data.action_dim)
    inputs, targets = _one_step_arrays(data)
    h, info = fit_relevance(inputs, targets, np.concatenate([start.state, start.action]), max_samples,
                            support_samples, max_factor, max_iter, generator)
    d_s = data.state_dim
    fitted = Bandwidths(h[:d_s], h[d_s:])
    spread = inputs.std(0, ddof=1) / h
    logger.info("relevance bandwidths: held-out error %.4g -> %.4g (mean predictor %.4g), %d "
                "iterations; relevance (std / h) %s", info["loss_start"], info["loss"],
                info["loss_mean"], info["iterations"], np.round(spread, 3).tolist())
    return RelevanceFit(fitted, start, info["loss_start"], info["loss"], info["loss_mean"],
                        tuple(map(float, spread[:d_s])), tuple(map(float, spread[d_s:])),
                        info["iterations"], info["evaluations"], info["n_queries"], info["n_support"])


def relevance_bandwidths(data: TransitionDataset, start: Bandwidths | None = None,
                         max_samples: int = 1000, support_samples: int = 4000, max_factor: float = 10.0,
                         max_iter: int = 100, seed: np.random.Generator | int | None = None,
                         max_action_effect: float | None = ACTION_EFFECT_MAX) -> Bandwidths:
    """The bandwidths of :func:`relevance_fit` (parameters as there), ``next_state`` None."""
    return relevance_fit(data, start, max_samples, support_samples, max_factor, max_iter, seed,
                         max_action_effect).bandwidths


def one_step_prediction_error(support: TransitionDataset, queries: TransitionDataset,
                              bandwidths: Bandwidths) -> dict[str, float]:
    """The mean squared error of the kernel regression on ``support`` predicting the one-step
    targets ``(s' - s, r)`` of ``queries`` (other transitions: nothing is left out), each
    target column standardised by the support's mean and standard deviation.

    Returns ``{"state": ..., "reward": ..., "all": ...}``: the mean over the state-change columns,
    the reward column and all of them (constant support columns are left out).
    """
    bw = Bandwidths(bandwidths.state, bandwidths.action).broadcast(support.state_dim, support.action_dim)
    log_h = torch.from_numpy(np.log(np.concatenate([bw.state, bw.action])))
    x_s, y_s = _one_step_arrays(support)
    x_q, y_q = _one_step_arrays(queries)
    std = y_s.std(0, ddof=1)
    keep = std > 0
    mean = y_s[:, keep].mean(0)
    y_s, y_q = (y_s[:, keep] - mean) / std[keep], (y_q[:, keep] - mean) / std[keep]
    centre = x_s.mean(0)
    s_t, ys_t = torch.from_numpy(x_s - centre), torch.from_numpy(y_s)
    q_t, yq_t = torch.from_numpy(x_q - centre), torch.from_numpy(y_q)
    chunk = max(1, _CHUNK_ELEMENTS // x_s.shape[0])
    sq_err = np.zeros(y_s.shape[1])
    with torch.no_grad():
        for lo in range(0, x_q.shape[0], chunk):
            w = _kernel_weights(log_h, q_t[lo:lo + chunk], s_t, None)
            sq_err += ((w @ ys_t - yq_t[lo:lo + chunk]) ** 2).sum(0).numpy()
    per_column = sq_err / x_q.shape[0]
    state_cols = keep[:-1].sum()
    reward = float(per_column[-1]) if keep[-1] else float("nan")
    return {"state": float(per_column[:state_cols].mean()) if state_cols else float("nan"),
            "reward": reward, "all": float(per_column.mean())}
