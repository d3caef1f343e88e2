"""State dimensions that carry no information: find them, drop them, and act on full states.

Some data sets hold a state dimension that never varies, e.g. a MuJoCo constraint-force
observation that is always 0. Such a dimension breaks kernel bandwidth selection: every rule
(Silverman, Scott, k-NN, cross-validation) scales with the dimension's spread, which is 0, so
a bandwidth of 0 would divide every scaled distance by zero (:func:`nopg.select_bandwidths`
refuses the data for that reason). It also carries no information: a dimension on which all
states agree cannot tell any two of them apart.

Dropping it leaves the normalised kernel weights unchanged. The state kernel is a product of
per-dimension Gaussians, ``k(z, s_i) = prod_j exp(-(z_j - s_ij)^2 / (2 h_j^2))``. When dimension
``c`` has the same value ``s_ic = v`` at every data point ``i``, its factor
``exp(-(z_c - v)^2 / (2 h_c^2))`` is the same for every ``i`` at a given query ``z`` (``1`` when
the query shares the value, as the data's own states and next states do), so it cancels in the
normalised weights ``k(z, s_i) / sum_k k(z, s_k)``: those, and the model built on them, are the
ones of the data without the dimension, whatever bandwidth ``h_c`` it would have had. (Only
unnormalised kernel mass, such as a support measure at a query off the constant value, would
differ. For a dimension constant only up to the tolerance of :func:`informative_state_dims`,
the factors are equal up to that rounding-level spread.)

The functions here are the pieces to fit on the informative dimensions only and to use the
policy on full states:

- :func:`informative_state_dims` -- the mask of the dimensions that vary;
- :func:`drop_state_dims` -- the data set on the kept dimensions;
- :func:`reduce_states` -- initial (or any) states on the kept dimensions;
- :class:`StateSelect` -- a policy fitted on the kept dimensions, acting on full states.

.. code-block:: python

    keep = informative_state_dims(data)
    reduced = drop_state_dims(data, keep)
    policy = DeterministicMLPPolicy(reduced.state_dim, reduced.action_dim)
    algo = NOPG(policy, NOPGConfig(gamma=0.99))
    algo.fit(reduced, select_bandwidths(reduced), reduce_states(starts, keep))
    acting = StateSelect(algo.policy, keep)      # acts on states of data.state_dim columns
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from numpy.typing import ArrayLike
from torch import nn

from .dataset import TransitionDataset

__all__ = ["DEFAULT_RTOL", "StateSelect", "drop_state_dims", "informative_state_dims",
           "reduce_states"]

DEFAULT_RTOL = 1e-9
"""Relative spread at or below which a dimension counts as constant: a numerical-precision
tolerance (float64 rounding, ~1e-16 relative, accumulated over a simulator's arithmetic), far
below any physical variation of a state."""


def informative_state_dims(data: TransitionDataset, rtol: float = DEFAULT_RTOL) -> np.ndarray:
    """Mask of the state dimensions whose values vary over the data's states and next states.

    Parameters
    ----------
    data : TransitionDataset
        The data set; its ``states`` and ``next_states`` are both looked at.
    rtol : float
        Numerical-precision tolerance (default :data:`DEFAULT_RTOL`, 1e-9): dimension ``j`` is
        constant when its spread ``max - min`` over the states and next states is at most
        ``rtol * max(1, max |value|)``, i.e. relative to the dimension's magnitude and absolute
        (``rtol``) for values below 1 in magnitude. It only absorbs rounding noise: a dimension
        that varies by more than that, however little, is informative.

    Returns
    -------
    numpy.ndarray of bool, shape (d_s,)
        True where the dimension is informative (kept), False where it is constant.

    Raises
    ------
    ValueError
        If ``rtol`` is not a finite number >= 0.
    """
    if isinstance(rtol, bool) or not isinstance(rtol, (int, float, np.integer, np.floating)) \
            or not np.isfinite(rtol) or rtol < 0:
        raise ValueError(f"rtol must be a finite number >= 0. Got {rtol!r} instead.")
    values = np.concatenate([data.states, data.next_states], axis=0)
    spread = values.max(axis=0) - values.min(axis=0)
    scale = np.maximum(1.0, np.abs(values).max(axis=0))
    return spread > float(rtol) * scale


def _checked_mask(keep: ArrayLike, state_dim: int) -> np.ndarray:
    """``keep`` as a boolean mask of shape (state_dim,) with at least one True."""
    mask = np.asarray(keep)
    if mask.dtype != np.bool_ or mask.shape != (state_dim,):
        raise ValueError(f"keep must be a boolean mask of shape ({state_dim},) (one entry per "
                         f"state dimension); got dtype {mask.dtype} and shape {mask.shape}")
    if not mask.any():
        raise ValueError("keep selects no state dimension; at least one is needed (if every "
                         "dimension of the data is constant, it cannot tell any two states apart)")
    return mask.copy()


def drop_state_dims(data: TransitionDataset, keep: ArrayLike) -> TransitionDataset:
    """The data set with only the kept state dimensions.

    Parameters
    ----------
    data : TransitionDataset
    keep : array of bool, shape (d_s,)
        The dimensions to keep (e.g. :func:`informative_state_dims`).

    Returns
    -------
    TransitionDataset
        ``states`` and ``next_states`` restricted to the kept columns (in their order); actions,
        rewards, terminals, truncations, episode ids and episodes are the same (ids are added
        only where dropping a varying dimension would otherwise merge episodes: see Notes).

    Raises
    ------
    ValueError
        If ``keep`` is not a boolean mask of shape (d_s,) or keeps no dimension.

    Notes
    -----
    Without episode ids the episodes are found where ``next_states[i - 1] != states[i]``
    (:meth:`TransitionDataset.episode_starts`). Dropping a constant dimension never changes
    that comparison; dropping a varying one could merge two episodes, so such data keep their
    episodes as explicit ``episode_ids``.
    """
    mask = _checked_mask(keep, data.state_dim)
    episode_ids = data.episode_ids
    if episode_ids is None:
        reduced_starts = _starts_without_ids(data, data.states[:, mask], data.next_states[:, mask])
        if not np.array_equal(reduced_starts, data.episode_starts()):
            episode_ids = np.empty(data.n, dtype=np.int64)
            for j, idx in enumerate(data.episodes()):
                episode_ids[idx] = j
    return TransitionDataset(
        states=data.states[:, mask], actions=data.actions, rewards=data.rewards,
        next_states=data.next_states[:, mask], terminals=data.terminals,
        truncations=data.truncations, episode_ids=episode_ids)


def _starts_without_ids(data: TransitionDataset, states: np.ndarray,
                        next_states: np.ndarray) -> np.ndarray:
    """:meth:`TransitionDataset.episode_starts` of ``data`` (no ids) with other state columns."""
    ended = data.terminals[:-1].copy()
    if data.truncations is not None:
        ended |= data.truncations[:-1]
    ended |= np.any(next_states[:-1] != states[1:], axis=1)
    return np.concatenate([[0], np.flatnonzero(ended) + 1]).astype(np.int64)


def reduce_states(states: ArrayLike, keep: ArrayLike) -> np.ndarray:
    """States (e.g. initial states) on the kept dimensions.

    Parameters
    ----------
    states : array-like, shape (m, d_s) or (d_s,)
        Full states, ``d_s = len(keep)``.
    keep : array of bool, shape (d_s,)
        The kept dimensions (e.g. :func:`informative_state_dims`).

    Returns
    -------
    numpy.ndarray of float64, shape (m, d_kept) or (d_kept,)
        A new array (writable, C-contiguous), of the same number of axes as ``states``.

    Raises
    ------
    ValueError
        If ``states`` do not have ``d_s`` columns (the message names the expected shape) or
        ``keep`` is not a boolean mask with at least one True.
    """
    keep_arr = np.asarray(keep)
    if keep_arr.ndim != 1:
        raise ValueError(f"keep must be a boolean mask of shape (d_s,); got shape {keep_arr.shape}")
    mask = _checked_mask(keep_arr, keep_arr.shape[0])
    arr = np.asarray(states, dtype=np.float64)
    if arr.ndim not in (1, 2) or arr.shape[-1] != mask.shape[0]:
        raise ValueError(f"states must have shape (m, {mask.shape[0]}) or ({mask.shape[0]},) "
                         f"(one column per full state dimension); got shape {arr.shape}")
    return np.ascontiguousarray(arr[..., mask])


class StateSelect(nn.Module):
    """A policy on the kept state dimensions, made to act on full states.

    ``forward(states)`` is ``policy(states[..., keep])``; so are ``mean_std`` and ``sample``
    when the wrapped policy has them (a Gaussian policy stays one:
    :func:`nopg.policies.networks.is_stochastic` holds exactly when it holds for the wrapped policy).
    The action bounds (``action_max``, ``sigma_max``), ``action_dim`` and the ``sigma_scale``
    buffer that NOPG-S decays are the wrapped policy's, shared, not copied.

    Parameters
    ----------
    policy : torch.nn.Module
        Maps states of the kept dimensions ``(batch, d_kept)`` to actions.
    keep : array-like
        A boolean mask of shape (state_dim,) (e.g. :func:`informative_state_dims`), or the
        kept column indices (distinct, in ``[0, state_dim)``; then ``state_dim`` is required).
    state_dim : int, optional
        Dimension of the full states; default: the length of a boolean ``keep``.

    Attributes
    ----------
    policy : torch.nn.Module
        The wrapped policy (a submodule: its parameters are this module's, and its state-dict
        entries are prefixed ``policy.``).
    keep : torch.Tensor of int64, shape (d_kept,)
        The kept column indices, in the order the wrapped policy sees them. A registered
        (persistent) buffer, so ``state_dict`` and checkpoints carry it; it moves with the
        module's device and keeps its integer dtype under ``.to(dtype)``.
    state_dim : int
        Dimension of the full states that :meth:`forward` takes.

    Raises
    ------
    ValueError
        If ``keep`` selects no dimension, repeats one, or lies outside ``[0, state_dim)``.
    """

    keep: torch.Tensor

    def __init__(self, policy: nn.Module, keep: ArrayLike, state_dim: int | None = None) -> None:
        super().__init__()
        if not isinstance(policy, nn.Module):
            raise ValueError(f"policy must be a torch.nn.Module. Got {type(policy).__name__} instead.")
        index, full = _keep_indices(keep, state_dim)
        self.policy = policy
        self.state_dim = full
        self.register_buffer("keep", torch.tensor(index, dtype=torch.int64))

    # ---------------------------------------------------------------- acting
    def select(self, states: torch.Tensor) -> torch.Tensor:
        """The kept columns ``states[..., keep]`` of full states ``(..., state_dim)``; states
        of the kept width are taken as already reduced (the model's own states, inside a fit
        on the kept dimensions) and passed on unchanged."""
        width = states.shape[-1]
        if width == len(self.keep) and width != self.state_dim and not torch.jit.is_tracing():
            return states
        # (not while tracing for an export: the check would be a constant of the trace)
        if not torch.jit.is_tracing() and width != self.state_dim:
            raise ValueError(f"states must have shape (batch, {self.state_dim}) (full states) or "
                             f"(batch, {len(self.keep)}) (the kept dimensions); got shape "
                             f"{tuple(states.shape)}")
        return torch.index_select(states, -1, self.keep.to(states.device))

    def full_states(self, states: np.ndarray) -> np.ndarray:
        """Full states ``(m, state_dim)`` holding ``states`` (m, d_kept) in the kept columns and
        0 in the others (which the policy ignores), e.g. to export it with the data's
        states."""
        reduced = np.asarray(states, dtype=np.float64)
        full = np.zeros((len(reduced), self.state_dim))
        full[:, self.keep.cpu().numpy()] = reduced
        return full

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        """The wrapped policy's output at the kept columns of ``states`` (batch, state_dim)."""
        return self.policy(self.select(states))

    def mean_std(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The wrapped Gaussian policy's mean and standard deviation, each (batch, action_dim).

        Raises
        ------
        ValueError
            If the wrapped policy is not Gaussian (has no usable ``mean_std``).
        """
        if not self.has_sigma:
            raise ValueError(f"the wrapped {type(self.policy).__name__} is not a Gaussian policy "
                             "(it has no mean_std)")
        return self.policy.mean_std(self.select(states))

    def sample(self, states: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """The wrapped policy's reparameterised sample at the kept columns of ``states``."""
        inner = getattr(self.policy, "sample", None)
        if not callable(inner):
            raise ValueError(f"the wrapped {type(self.policy).__name__} has no sample method")
        return inner(self.select(states), generator=generator)

    @property
    def has_sigma(self) -> bool:
        """Whether the wrapped policy is Gaussian (what :func:`nopg.policies.networks.is_stochastic`
        reads together with ``mean_std``)."""
        return callable(getattr(self.policy, "mean_std", None)) \
            and bool(getattr(self.policy, "has_sigma", True))

    # ------------------------------------------------- the wrapped policy's attributes
    @property
    def action_dim(self) -> int:
        """The wrapped policy's action dimension (from its ``action_dim`` or spec)."""
        value = getattr(self.policy, "action_dim", None)
        if value is None:
            value = self._inner_spec().get("kwargs", {}).get("action_dim")
        if value is None:
            raise AttributeError(f"the wrapped {type(self.policy).__name__} has no action_dim")
        return int(value)

    @property
    def action_max(self) -> torch.Tensor:
        """The wrapped policy's action bound buffer (shared)."""
        return self._inner_tensor("action_max")

    @property
    def sigma_max(self) -> torch.Tensor:
        """The wrapped Gaussian policy's largest standard deviation buffer (shared)."""
        return self._inner_tensor("sigma_max")

    @property
    def sigma_scale(self) -> torch.Tensor:
        """The wrapped Gaussian policy's ``sigma_scale`` buffer (shared: NOPG-S decays it in place)."""
        return self._inner_tensor("sigma_scale")

    def _inner_tensor(self, name: str) -> torch.Tensor:
        value = getattr(self.policy, name, None)
        if not isinstance(value, torch.Tensor):
            raise AttributeError(f"the wrapped {type(self.policy).__name__} has no {name}")
        return value

    def _inner_spec(self) -> dict[str, Any]:
        spec = getattr(self.policy, "spec", None)
        return spec() if callable(spec) else {}

    # ---------------------------------------------------------------- description
    def spec(self) -> dict[str, Any]:
        """JSON-serialisable constructor arguments (:func:`nopg.policies.networks.policy_from_spec`
        rebuilds it when the wrapped policy has a spec; ``policy`` is ``None`` otherwise).

        ``kwargs["state_dim"]`` is the full state dimension (what an exported policy takes).
        """
        inner = self._inner_spec() or None
        return {"type": type(self).__name__,
                "kwargs": {"policy": inner, "keep": [int(i) for i in self.keep.tolist()],
                           "state_dim": int(self.state_dim)}}

    @classmethod
    def from_spec(cls, kwargs: dict[str, Any], policy: nn.Module) -> StateSelect:
        """The wrapper of ``policy`` (the rebuilt inner policy) described by :meth:`spec`'s
        ``kwargs``."""
        return cls(policy, kwargs["keep"], int(kwargs["state_dim"]))

    def extra_repr(self) -> str:
        return f"state_dim={self.state_dim}, keep={self.keep.tolist()}"


def _keep_indices(keep: ArrayLike, state_dim: int | None) -> tuple[np.ndarray, int]:
    """Kept column indices (int64, shape (d_kept,)) and the full state dimension."""
    if isinstance(keep, torch.Tensor):
        keep = keep.detach().cpu().numpy()
    arr = np.asarray(keep)
    if arr.dtype == np.bool_:
        if arr.ndim != 1:
            raise ValueError(f"a boolean keep must have shape (state_dim,); got shape {arr.shape}")
        if state_dim is not None and int(state_dim) != arr.shape[0]:
            raise ValueError(f"a boolean keep has {arr.shape[0]} entries but state_dim is {state_dim}")
        full = arr.shape[0]
        index = np.flatnonzero(arr)
    else:
        if state_dim is None:
            raise ValueError("state_dim is required when keep holds column indices "
                             "(a boolean mask gives it by its length)")
        if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
            raise ValueError(f"keep must be a boolean mask or a 1-D array of integer column "
                             f"indices; got dtype {arr.dtype} and shape {arr.shape}")
        full = int(state_dim)
        index = arr.astype(np.int64)
        if index.size and (index.min() < 0 or index.max() >= full):
            raise ValueError(f"keep's indices must lie in [0, {full}); got {index.tolist()}")
        if np.unique(index).size != index.size:
            raise ValueError(f"keep's indices must be distinct; got {index.tolist()}")
    if full < 1:
        raise ValueError(f"state_dim must be >= 1. Got {full} instead.")
    if index.size == 0:
        raise ValueError("keep selects no state dimension")
    return index.astype(np.int64), full
