"""The Gaussian kernel of the nonparametric Bellman model: log-weights and support.

With Gaussian kernels of diagonal bandwidths ``h_s``, ``h_a`` the responsibility of data pair
``j`` for a query ``(s, a)`` is a softmax of log-weights (paper Section 3),

    l_j(s, a) = -1/2 ||(s - s_j) / h_s||^2 - 1/2 ||(a - a_j) / h_a||^2,
    eps_j(s, a) = softmax_j l_j(s, a),

computed in log space so that queries far from every data point never divide 0 by 0. All
functions here take coordinates already divided by their bandwidths.

:func:`log_weights` evaluates ``l_j`` as written. When every data pair is scored (the dense
model) the same formula is expanded, ``l_j = f_j(s) + (a / h_a) . (a_j / h_a) - 1/2 ||a / h_a||^2``
with the policy-free part ``f_j(s) = -1/2 ||(s - s_j) / h_s||^2 - 1/2 ||a_j / h_a||^2``
(:func:`policy_free_log_weights`, computed once per query state) and a matrix product for the
rest (:func:`expanded_log_weights`).

Support. The softmax hides how far the data are: far from every sample it still sums to one.
The unnormalised kernel mass ``c(s, a) = sum_j exp(l_j(s, a))`` does not, and gives the
*thinness* ``1 - w = exp(-c / c0)``, ``c0 = exp(-support_radius^2 / 2)`` (:func:`thinness`).
"""

from __future__ import annotations

import torch


def squared_norm(x: torch.Tensor) -> torch.Tensor:
    """``||x||^2`` over the last axis, differentiable.

    The same as ``(x * x).sum(-1)``, written as a matrix product because PyTorch's CPU reduction
    over a short last axis (the 1-6 state or action dimensions here) is 5-40 times slower than
    ``(x * x) @ 1`` at the sizes of a NOPG update (a singleton axis is only squeezed).
    """
    sq = x * x
    if sq.shape[-1] == 1:
        return sq[..., 0]
    return sq @ sq.new_ones(sq.shape[-1])


def gather_rows(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``values[index]`` for an integer tensor ``index`` of any shape, differentiable.

    The same as advanced indexing, written as ``index_select`` over the flattened index, which
    measured about 3 times faster on the CPU (4 x 10^6 entries gathered from 10^5 values).
    """
    flat = values.index_select(0, index.reshape(-1))
    return flat.reshape(*index.shape, *values.shape[1:])


def softmax_log_mass(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``softmax`` and ``logsumexp`` of ``logits`` over the last axis, differentiable.

    One pass for both: ``e = exp(l - max l)``, the weights ``e / sum e`` and the log mass
    ``max l + log sum e``, with the sum a matrix product and the (detached) maximum only a
    shift, which leaves both values and their gradients exact. PyTorch's own ``softmax`` and
    ``logsumexp`` over the short last axis of a row (``top_k`` entries) measured twice as slow
    on the CPU, forward and backward together, at 10^5 rows of 10.
    """
    top = logits.detach().amax(-1, keepdim=True)
    e = torch.exp(logits - top)
    total = e @ e.new_ones(e.shape[-1])
    return e / total[..., None], top[..., 0] + torch.log(total)


def gathered_squared_distances(queries: torch.Tensor, columns: torch.Tensor, index: torch.Tensor
                               ) -> torch.Tensor:
    """``||queries[i] - points[index[i, c]]||^2`` (m, c), with the points given by their
    columns ``columns = points.T`` (d, n), contiguous.

    Summed one coordinate at a time over gathers of single columns: no (m, c, d) array is made,
    and no reduction over a short last axis (:func:`squared_norm`), which at 10^6 queries
    times 40 points took several times longer.
    """
    out = None
    for j in range(columns.shape[0]):
        diff = queries[:, j, None] - gather_rows(columns[j], index)
        out = diff * diff if out is None else out.addcmul_(diff, diff)
    if out is None:
        return torch.zeros(index.shape, dtype=queries.dtype, device=queries.device)
    return out


def log_weights(query_states: torch.Tensor, query_actions: torch.Tensor, states: torch.Tensor,
                actions: torch.Tensor) -> torch.Tensor:
    """``l_j(s, a) = -1/2 ||s - s_j||^2 - 1/2 ||a - a_j||^2`` in scaled coordinates.

    Parameters
    ----------
    query_states, query_actions : tensors of shape (..., d_s) and (..., d_a)
        Scaled query states and actions.
    states, actions : tensors of shape (..., d_s) and (..., d_a)
        Scaled data states and actions, broadcast against the queries.

    Returns
    -------
    tensor of the broadcast shape without the last axis
    """
    ds = query_states - states
    da = query_actions - actions
    return -0.5 * (squared_norm(ds) + squared_norm(da))


def policy_free_log_weights(query_states: torch.Tensor, states: torch.Tensor,
                            action_sq: torch.Tensor) -> torch.Tensor:
    """The part of ``l_j`` that does not depend on the query action, shape (m, n).

    ``f_j(s) = -1/2 ||s - s_j||^2 - 1/2 ||a_j||^2`` for scaled query states (m, d_s), data
    states (n, d_s) and the data's squared action norms ``||a_j||^2`` (n,).
    """
    diff = query_states[:, None, :] - states[None, :, :]
    return -0.5 * (squared_norm(diff) + action_sq)


def expanded_log_weights(fixed: torch.Tensor, query_actions: torch.Tensor, actions: torch.Tensor
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """``l_j`` for every data pair from its policy-free part: ``(logits, shift)``.

    Parameters
    ----------
    fixed : tensor of shape (m, n)
        :func:`policy_free_log_weights` of the query states.
    query_actions : tensor of shape (m, G, d_a)
        ``G`` scaled actions per query state.
    actions : tensor of shape (n, d_a)
        Scaled data actions.

    Returns
    -------
    logits : tensor of shape (m, G, n)
        ``f_j(s) + a . a_j``: the log-weights up to a term shared by every ``j``, which cancels in
        the softmax and in the top-k selection.
    shift : tensor of shape (m, G)
        That term, ``-1/2 ||a||^2``: ``logits + shift[..., None]`` is ``l_j``.
    """
    logits = fixed[:, None, :] + query_actions @ actions.T
    shift = -0.5 * squared_norm(query_actions)
    return logits, shift


def thinness(log_mass: torch.Tensor, support_radius: float) -> torch.Tensor:
    """``1 - w = exp(-c / c0)`` from the log kernel mass ``log c = logsumexp_j l_j``.

    ``c0 = exp(-support_radius^2 / 2)``: one data pair at the query gives ``1 - w < 1e-3`` (for
    radius 2), one at ``support_radius`` bandwidths gives ``1/e``.
    """
    return torch.exp(-torch.exp(log_mass + 0.5 * support_radius ** 2))
