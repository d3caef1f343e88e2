"""What a fitted :class:`~nopg.train.algorithm.NOPG` answers about its current policy: the Bellman
solution and ``J_hat`` (solved once per policy update and cached), ``V``, ``Q``, the visitation,
the policy's actions, the support gaps and the model's episode lengths.

:class:`FitEstimates` holds these methods; ``NOPG`` inherits them (the fit loop and the state they
read are in :mod:`nopg.train.algorithm`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..model.bellman import BellmanSolution, NonparametricBellman
from ..model.factory import rollout_model
from .config import NOPGConfig

__all__ = ["FitEstimates"]


class FitEstimates:
    """The estimates of :class:`~nopg.train.algorithm.NOPG` at its current policy (a base class of
    ``NOPG``, which sets the attributes below)."""

    config: NOPGConfig
    policy: nn.Module
    update_: int
    model_: NonparametricBellman | None
    initial_states_: np.ndarray | None
    starts_: np.ndarray | None
    _warm: tuple[torch.Tensor, torch.Tensor] | None
    _solution: BellmanSolution | None

    @property
    def support_gap_(self) -> float:
        """Share of the current policy's discounted visitation where the data are thin."""
        return self.solution().support_gap

    @property
    def initial_gap_(self) -> float:
        """Mean thinness of the data at the current policy's initial queries."""
        return self.solution().initial_gap

    # ------------------------------------------------------------------ estimates
    def solution(self) -> BellmanSolution:
        """The Bellman solution at the current policy (cached until the next update)."""
        model = self._fitted_model()
        if self._solution is None:
            self._apply_sigma_scale()
            gen = torch.Generator().manual_seed(self.config.seed)
            with torch.no_grad():
                self._solution = model.solution(self.policy, self.starts_, gen, self._warm)
        return self._solution

    def load_policy_state(self, state: dict[str, torch.Tensor]) -> None:
        """Set the policy's parameters and buffers to ``state`` (a ``state_dict``, e.g. a
        :class:`~nopg.select.snapshots.Snapshot`'s); the model, the optimiser's state and the update
        count stay, and the solution is solved anew for this policy."""
        self.policy.load_state_dict(state)
        self._solution = None

    def J_hat(self) -> float:
        """``J_hat`` of the current policy: the model's discounted return from the initial
        states (:meth:`solution`, solved once per policy update and cached)."""
        return self.solution().J


    def model_episode_lengths(self, steps: int, initial_states: np.ndarray | None = None
                              ) -> np.ndarray:
        """Steps the model's mean rollout of the current policy lasts from each initial state
        (the fit's by default), up to ``steps``: where the model says the episode ends (past
        ``terminal_bounds`` or at the data's terminals). Not discounted, so it sees the ends that
        ``J_hat``'s discount hides: a policy that fails after ``1 / (1 - gamma)`` steps.

        Only for ``successors="anchored"`` (:meth:`nopg.model.anchored.AnchoredBellman.episode_lengths`;
        stochastic policies draw their actions with the fit's seed).

        Returns
        -------
        ndarray of shape (m,), int
        """
        model = rollout_model(self._fitted_model())
        if model is None:
            raise ValueError("model_episode_lengths needs the anchored model's own rollout "
                             "(ModelConfig(successors='anchored')); this model's successors are "
                             f"{self.config.model.successors!r}")
        starts = self.initial_states_ if initial_states is None else initial_states
        self._apply_sigma_scale()
        return model.episode_lengths(self.policy, starts, steps,
                                     torch.Generator().manual_seed(self.config.seed))

    def _fitted_model(self) -> NonparametricBellman:
        if self.model_ is None:
            raise RuntimeError("call fit() or setup() first")
        return self.model_

    def value(self, states: np.ndarray) -> np.ndarray:
        """``V(s)`` of the current policy at states of shape (m, d_s)."""
        return self._fitted_model().value(self.policy, states, self.solution().q)

    def q_value(self, states: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """``Q(s, a)`` of the current policy at pairs of shapes (m, d_s), (m, d_a)."""
        return self._fitted_model().q_value(states, actions, self.solution().q)

    def visitation(self, states: np.ndarray) -> np.ndarray:
        """Discounted state-visitation estimate ``eps_pi(s) . mu`` at states (m, d_s)."""
        return self._fitted_model().visitation(self.policy, states, self.solution().mu)

    def predict(self, states: np.ndarray) -> np.ndarray:
        """Actions of the policy (the mean for a Gaussian policy) at states (m, d_s)."""
        p = next(self.policy.parameters())
        with torch.no_grad():
            s = torch.tensor(np.asarray(states, dtype=np.float64), dtype=p.dtype, device=p.device)
            return self.policy(s.reshape(-1, s.shape[-1])).cpu().numpy()

    def _sigma_scale(self) -> float:
        decay = self.config.sigma_decay
        if decay is None:
            return 1.0
        frac = min(self.update_ / max(decay.updates - 1, 1), 1.0)
        return 1.0 + (decay.to - 1.0) * frac

    def _apply_sigma_scale(self) -> float:
        scale = self._sigma_scale()
        buf = getattr(self.policy, "sigma_scale", None)
        if isinstance(buf, torch.Tensor):
            buf.fill_(scale)
        return scale
