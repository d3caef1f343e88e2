"""The nonparametric Bellman model's queries at any states once it is solved: ``V(s)``,
``Q(s, a)``, the visitation ``eps_pi(s) . mu`` and, at the data's own pairs and states, the logged
``Q`` and ``V`` (their rows kept). :class:`BellmanQueries` holds them;
:class:`~nopg.model.bellman.NonparametricBellman` inherits them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from .solution import as_states

if TYPE_CHECKING:
    from ..data.dataset import TransitionDataset
    from .responsibilities import KernelRows

__all__ = ["BellmanQueries"]


class BellmanQueries:
    """``V``, ``Q`` and the visitation of :class:`~nopg.model.bellman.NonparametricBellman` at query
    states (a base class of the model, which builds the rows these read)."""

    data: TransitionDataset
    device: torch.device
    states: torch.Tensor
    h_a: torch.Tensor
    kernel_rows: KernelRows
    _logged_rows: Any
    _data_queries: Any

    @torch.no_grad()
    def _query(self, policy: nn.Module | None, states: np.ndarray | torch.Tensor,
               vector: torch.Tensor | None, actions: np.ndarray | torch.Tensor | None = None,
               chunk: int = 4096, seed: int = 0, absorbing: bool = False) -> np.ndarray:
        """``rows . vector`` at the queries (``vector=None``: the rows' thinness), in chunks."""
        s_all = as_states(states, self.data.state_dim, "states")
        a_all = None
        if actions is not None:
            a_all = as_states(actions, self.data.action_dim, "actions")
            if a_all.shape[0] != s_all.shape[0]:
                raise ValueError(f"actions has {a_all.shape[0]} rows but states has {s_all.shape[0]}")
        generator = torch.Generator().manual_seed(seed)
        vec = None if vector is None else vector.to(device=self.device, dtype=torch.float64)
        out = []
        for start in range(0, s_all.shape[0], chunk):
            s = self._tensor(s_all[start:start + chunk])
            prepared = self._prepare(s)
            if a_all is None:
                rows, thin, _ = self._policy_rows(policy, s, prepared, 1, generator)
            else:
                a = self._tensor(a_all[start:start + chunk]) / self.h_a
                rows, thin = self.kernel_rows.rows(prepared, a[:, None, :], 1)
            if vec is None:
                out.append(thin.to(torch.float64))
                continue
            values = rows.to(torch.float64).matvec(vec)
            if absorbing:
                values = self._with_absorbed(values, thin)
            out.append(values)
        return torch.cat(out).cpu().numpy()

    def value(self, policy: nn.Module, states: np.ndarray | torch.Tensor, q: torch.Tensor,
              seed: int = 0) -> np.ndarray:
        """``V(s) = eps_pi(s) . q`` at query states of shape (m, d_s) (plus the thinness times
        :attr:`unsupported_value` in the support-aware and penalty models)."""
        return self._query(policy, states, q, seed=seed, absorbing=True)

    def q_value(self, states: np.ndarray | torch.Tensor, actions: np.ndarray | torch.Tensor,
                q: torch.Tensor) -> np.ndarray:
        """``Q(s, a) = eps(s, a) . q`` at query pairs (with the absorbed mass, as :meth:`value`)."""
        return self._query(None, states, q, actions=actions, absorbing=True)

    @torch.no_grad()
    def logged_q_value(self, q: torch.Tensor) -> np.ndarray:
        """:meth:`q_value` at the data's own pairs ``(s_i, a_i)``; their rows do not depend on the
        policy, so they are built once and kept."""
        if self._logged_rows is None:
            prepared = self._prepare(self.states)
            actions = self._tensor(self.data.actions) / self.h_a
            rows, thin = self.kernel_rows.rows(prepared, actions[:, None, :], 1)
            self._logged_rows = (rows.to(torch.float64), thin.to(torch.float64))
        rows, thin = self._logged_rows
        return self._with_absorbed(rows.matvec(q.to(device=self.device, dtype=torch.float64)),
                                   thin).cpu().numpy()

    @torch.no_grad()
    def data_value(self, policy: nn.Module, q: torch.Tensor, seed: int = 0) -> np.ndarray:
        """:meth:`value` at the data's own states, their policy-free part prepared once and kept
        (as for the rows of ``P``)."""
        if self._data_queries is None:
            self._data_queries = self._prepare(self.states, cache=True)
        rows, thin, _ = self._policy_rows(policy, self.states, self._data_queries, 1,
                                          torch.Generator().manual_seed(seed))
        values = rows.to(torch.float64).matvec(q.to(device=self.device, dtype=torch.float64))
        return self._with_absorbed(values, thin).cpu().numpy()

    def _with_absorbed(self, values: torch.Tensor, thin: torch.Tensor) -> torch.Tensor:
        """``values`` plus the thinness times :attr:`unsupported_value` (the absorbed mass's value
        in the support-aware model, the penalty in the penalty model)."""
        value = self.unsupported_value
        if value is None:
            return values
        return values + value * thin.to(values.dtype)

    def visitation(self, policy: nn.Module, states: np.ndarray | torch.Tensor, mu: torch.Tensor,
                   seed: int = 0) -> np.ndarray:
        """Unnormalised discounted state-visitation estimate ``eps_pi(s) . mu``."""
        return self._query(policy, states, mu, seed=seed)
