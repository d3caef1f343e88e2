"""A policy evaluated on many states in cache-sized chunks, its backward pass recomputed per chunk.

An NOPG update evaluates the policy at every query state of ``P`` (the data's next states, times
the Monte-Carlo draws) and back-propagates through it once. For an MLP on ``M`` states autograd
keeps the ``M x hidden`` activations between the two passes, and every step of both passes
streams them through memory: at ``M = 10^6`` and 50 hidden units each is a 400 MB float64 block,
so the policy's share of an update is bound by memory bandwidth, not arithmetic.

:func:`policy_outputs` runs the forward pass in chunks of :data:`CHUNK` states without keeping
any graph, and in the backward pass recomputes each chunk's forward pass with its graph and takes
that chunk's vector-Jacobian product at once (activation checkpointing at the granularity of a
chunk). Every chunk's working set then stays in the CPU's cache: twice the forward arithmetic
for a fraction of the memory traffic. The parameters' gradients are the same sums over the
states, accumulated chunk by chunk (equal up to floating-point summation order).

It applies only where it is safe and pays: on the CPU, with autograd recording, at least
:data:`MIN_STATES` states, states that need no gradient themselves, and a policy without
modules whose output depends on the batch or on random draws (batch normalisation and dropout
in training mode), since the recomputed chunks must reproduce the forward pass exactly.
Otherwise it is the plain call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

__all__ = ["CHUNK", "MIN_STATES", "chunkable", "policy_outputs"]

CHUNK = 8192
"""States per chunk: 8192 x 50 float64 activations are 3.3 MB."""

MIN_STATES = 32768
"""Fewer query states than this are evaluated in one call (the activations fit the cache)."""

_RANDOM = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout,
           nn.FeatureAlphaDropout)


def _batch_dependent(module: nn.Module) -> bool:
    """Whether ``module`` in training mode depends on its batch or on random draws."""
    return isinstance(module, _RANDOM) or "BatchNorm" in type(module).__name__


Outputs = tuple[torch.Tensor, ...]


def chunkable(module: nn.Module, states: torch.Tensor, min_states: int | None = None) -> bool:
    """Whether :func:`policy_outputs` evaluates ``module`` at ``states`` in chunks
    (``min_states``: default :data:`MIN_STATES`)."""
    fewest = MIN_STATES if min_states is None else min_states
    if states.shape[0] < fewest or states.device.type != "cpu" or states.requires_grad:
        return False
    if not torch.is_grad_enabled():
        return False
    return not any(m.training and _batch_dependent(m) for m in module.modules())


def policy_outputs(fn: Callable[[torch.Tensor], Any], module: nn.Module, states: torch.Tensor,
                   chunk: int | None = None, min_states: int | None = None) -> Any:
    """``fn(states)``, attached to ``module``'s parameters, evaluated chunk by chunk where
    :func:`chunkable` allows.

    Parameters
    ----------
    fn : callable
        A function of ``module``'s parameters and the states alone, returning a tensor or a
        tuple of tensors whose first dimension is the states' (``policy`` or
        ``policy.mean_std``).
    module : nn.Module
        The module whose parameters ``fn`` uses; gradients reach those that require them.
    states : torch.Tensor
        (M, d_s) query states.
    chunk, min_states : int, optional
        States per chunk and the fewest states that are chunked (default :data:`CHUNK` and
        :data:`MIN_STATES`).

    Returns
    -------
    tensor or tuple of tensors
        As ``fn`` returns them.
    """
    chunk = CHUNK if chunk is None else chunk
    if chunk < 1:
        raise ValueError(f"chunk must be a positive integer. Got {chunk!r}.")
    params = tuple(p for p in module.parameters() if p.requires_grad)
    if not params or not chunkable(module, states, min_states):
        return fn(states)
    single: list[bool] = []
    outputs = _ChunkedCall.apply(fn, chunk, single, states, *params)
    return outputs[0] if single[0] else outputs


def _as_tuple(value: Any) -> Outputs:
    return (value,) if isinstance(value, torch.Tensor) else tuple(value)


class _ChunkedCall(torch.autograd.Function):
    """``fn`` at ``states`` chunk by chunk; the backward pass recomputes each chunk's graph."""

    @staticmethod
    def forward(ctx: Any, fn: Callable, chunk: int, single: list[bool], states: torch.Tensor,
                *params: torch.Tensor) -> Outputs:
        raw = [fn(states[i:i + chunk]) for i in range(0, states.shape[0], chunk)]
        single.append(isinstance(raw[0], torch.Tensor))
        parts = [_as_tuple(r) for r in raw]
        ctx.fn, ctx.chunk = fn, chunk
        ctx.save_for_backward(states, *params)
        return tuple(torch.cat(column) for column in zip(*parts))

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        states, *params = ctx.saved_tensors
        total: list[torch.Tensor | None] = [None] * len(params)
        with torch.enable_grad():
            for i in range(0, states.shape[0], ctx.chunk):
                outs = _as_tuple(ctx.fn(states[i:i + ctx.chunk]))
                pairs = [(o, g[i:i + ctx.chunk]) for o, g in zip(outs, grads)
                         if g is not None and o.requires_grad]
                if not pairs:
                    continue
                part = torch.autograd.grad([o for o, _ in pairs], params,
                                           [g for _, g in pairs], allow_unused=True)
                total = [t if p is None else (p if t is None else t + p)
                         for t, p in zip(total, part)]
        return (None, None, None, None, *total)
