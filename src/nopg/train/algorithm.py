"""NOPG as an estimator: gradient ascent on ``J_hat`` (paper Algorithm 1).

:meth:`NOPG.updates` is the fit loop, a generator of per-update metrics; :meth:`NOPG.fit` drains
it, calling the callbacks (which may add metrics or stop the fit) and the metrics loggers of
:mod:`nopg.train.loggers`. Checkpoints (:meth:`NOPG.save`, :meth:`NOPG.load`) are written and read by
:mod:`nopg.train.checkpoint`. ``NOPG`` inherits its queries at the current policy (``J_hat``, ``value``,
...) from :mod:`nopg.train.fit_estimates` and its checkpoints from :mod:`nopg.train.fit_persistence`; its
callbacks are in :mod:`nopg.train.callbacks`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..bandwidth.selection import Bandwidths
from ..data.dataset import TransitionDataset
from ..model.bellman import BellmanSolution, NonparametricBellman, as_states
from ..model.factory import bellman_model, rollout_model
from ..policies.candidates import CandidatePolicies
from ..policies.networks import is_stochastic
from ..validation import warn_user
from .allocator import reuse_freed_memory
from .behaviour import (
    WEIGHT_LOG_MAX,
    BehaviourTargets,
    behaviour_targets,
    resolve_behaviour_weight,
)
from .callbacks import Callback, CheckpointCallback, EvalCallback
from .config import NOPGConfig
from .config_sections import CMAES
from .fit_estimates import FitEstimates
from .fit_persistence import CHECKPOINT_FORMAT_VERSION, FitPersistence
from .gradient import surrogate_gradient
from .loggers import (
    LOG_COLUMNS,
    CSVLogger,
    LogLineLogger,
    MetricsLogger,
    ProgressBarLogger,
    show_progress,
)
from .search import EvolutionSearch, fitness_key
from .starts import farthest_data_states

logger = logging.getLogger(__name__)
START_DRAW_STREAM = 0x57A27
"""The random stream (with ``config.seed``) of the drawn starts (``NOPGConfig.starts.draws``)."""


class SupportWarning(UserWarning):
    """Much of the policy's visitation lies where the data are thin: ``J_hat`` is unreliable."""


__all__ = ["CHECKPOINT_FORMAT_VERSION", "LOG_COLUMNS", "NOPG", "Callback", "CheckpointCallback",
           "EvalCallback", "SupportWarning"]


def _make_optimizer(config: NOPGConfig, params: Iterable[torch.Tensor]
                    ) -> torch.optim.Optimizer | EvolutionSearch:
    opt = config.optimizer
    if isinstance(opt, CMAES):
        return EvolutionSearch(list(params), opt.sigma, config.seed, opt.population,
                               opt.patience, opt.restart)
    cls = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD,
           "rmsprop": torch.optim.RMSprop}[opt.name]
    return cls(params, lr=opt.learning_rate)


class NOPG(FitEstimates, FitPersistence):
    """Nonparametric Off-Policy Policy Gradient (paper Algorithm 1).

    Parameters
    ----------
    policy : torch.nn.Module
        Deterministic policy (states -> actions) or Gaussian policy with ``mean_std``. It is moved
        to ``config.model.dtype`` and ``config.model.device``.
    config : NOPGConfig, optional
    stochastic : bool, optional
        NOPG-S when true; by default true exactly when the policy has ``mean_std``.
    optimizer : torch.optim.Optimizer, optional
        Any optimiser over ``policy.parameters()``; replaces ``config.optimizer``.

    Examples
    --------
    >>> algo = NOPG(DeterministicMLPPolicy(3, 1, action_max=2.0), NOPGConfig(gamma=0.99))
    >>> algo.fit(data, bandwidths, initial_states=s0, n_updates=1500)
    >>> algo.J_hat(), algo.value(states)
    """

    def __init__(self, policy: nn.Module, config: NOPGConfig | None = None, *,
                 stochastic: bool | None = None,
                 optimizer: torch.optim.Optimizer | None = None) -> None:
        if not isinstance(policy, nn.Module):
            raise ValueError(f"policy must be a torch.nn.Module. Got {type(policy).__name__} instead.")
        self.config = config if config is not None else NOPGConfig()
        self.device = self.config.torch_device
        self.policy = policy.to(device=self.device, dtype=self.config.torch_dtype)
        if not list(self.policy.parameters()):
            raise ValueError("the policy has no parameters to optimise")
        self.stochastic = is_stochastic(policy) if stochastic is None else bool(stochastic)
        self.optimizer = optimizer or _make_optimizer(self.config, self.policy.parameters())
        self.generator = torch.Generator().manual_seed(self.config.seed)  # CPU: device-independent
        self.update_ = 0
        self.history_: list[dict[str, Any]] = []
        self.model_: NonparametricBellman | None = None
        self.initial_states_: np.ndarray | None = None
        self.starts_: np.ndarray | None = None
        self._warm: tuple[torch.Tensor, torch.Tensor] | None = None
        self._solver_state: dict[str, torch.Tensor] = {}   # restored from a checkpoint
        self._solution: BellmanSolution | None = None
        self._behaviour: BehaviourTargets | None = None
        self._behaviour_data: TransitionDataset | None = None
        # CMA-ES: the best policy's solution and behaviour error so far
        self._incumbent: tuple[BellmanSolution, float] | None = None
        self._search_scale: float | None = None
        self.behaviour_weight_ = 0.0
        self.action_predictability_: float | None = None

    # ------------------------------------------------------------------ set-up
    def setup(self, data: TransitionDataset, bandwidths: Bandwidths,
              initial_states: np.ndarray | torch.Tensor) -> NOPG:
        """Build the Bellman model for ``data``; called by :meth:`fit` when needed."""
        if self.config.reuse_memory:
            reuse_freed_memory()
        if self._behaviour_data is not data:   # continuation stages keep the data
            self.behaviour_weight_, self.action_predictability_ = resolve_behaviour_weight(
                self.config.behaviour.weight, data)
            self._behaviour_data = data
            if self.behaviour_weight_ > 0:
                logger.info("behaviour term: weight %.3g (action predictability %s); the policy "
                            "is kept near the data's actions. If the data's behaviour pursued "
                            "another goal, set behaviour.weight=0",
                            self.behaviour_weight_, "not used" if self.action_predictability_
                            is None else f"{self.action_predictability_:.3f}")
            self._behaviour = behaviour_targets(data, self.behaviour_weight_, self.device,
                                                self.config.torch_dtype)
        # concrete top_k, solver, dense_max_n, n_mc_next (behaviour.n_mc_next with the term on)
        c = self.config.resolved(data.n, behaviour_term=self.behaviour_weight_ > 0)
        m, given = c.model, self.config.model
        if self.model_ is None:
            logger.info("n = %d: top_k=%s, solver=%s, n_mc_next=%s (config: top_k=%r, solver=%r, "
                        "n_mc_next=%r%s)", data.n, m.top_k, m.solver, m.n_mc_next, given.top_k,
                        given.solver, given.n_mc_next,
                        f", behaviour.n_mc_next={self.config.behaviour.n_mc_next!r} while the "
                        "behaviour term is on" if self.behaviour_weight_ > 0 else "")
        previous = self.model_.solver_state() if self.model_ is not None else self._solver_state
        self.model_ = bellman_model(data, bandwidths, c.gamma,
                                    c.model_config(stochastic=self.stochastic))
        if previous:
            self.model_.load_solver_state(previous)
        self.initial_states_ = as_states(initial_states, data.state_dim, "initial_states")
        self.starts_ = self._drawn_starts(self.initial_states_, bandwidths)
        if self.config.starts.data is not None:
            picked = farthest_data_states(data.states, self.initial_states_,
                                          self.config.starts.data)
            self.starts_ = np.concatenate([self.starts_, np.asarray(data.states, np.float64)[picked]])
        self._solution = None
        if isinstance(self.optimizer, EvolutionSearch):   # the objective changed: score it anew
            self.optimizer.rescore()
            self._incumbent = None
        return self

    def _drawn_starts(self, initial_states: np.ndarray, bandwidths: Bandwidths) -> np.ndarray:
        """The starts ``J_hat`` averages over: the initial states, or with ``starts.draws`` that
        many draws around each, ``z + starts.draw_scale * h_s * xi`` (:class:`NOPGConfig`; the
        ``starts.data`` are appended by :meth:`setup`)."""
        k = self.config.starts.draws
        if k is None:
            return initial_states
        z = np.asarray(initial_states, dtype=np.float64)
        rng = np.random.default_rng([self.config.seed, START_DRAW_STREAM])
        xi = rng.standard_normal((len(z), k, z.shape[1]))
        h = self.config.starts.draw_scale * np.asarray(bandwidths.state, dtype=np.float64)
        return (z[:, None, :] + h * xi).reshape(-1, z.shape[1])

    def _behaviour_weights(self, q: torch.Tensor) -> tuple[torch.Tensor, float]:
        """Per-sample weights of the behaviour term from the advantages
        ``A_i = eps(s_i, a_i) . q - eps_pi(s_i) . q`` of the logged actions over the policy's, and
        the share of samples with ``A_i > 0``.

        ``behaviour.filter="advantage"``: the 0/1 mask ``A_i > 0``. ``"weighted"``:
        ``exp(min(A_i / beta, ln 20))`` with ``beta = behaviour.temperature * std_j(q_j)``
        (advantage-weighted regression with the spread of the values as the unit, so the weights
        do not change when the rewards are shifted or scaled)."""
        assert self.model_ is not None
        adv = self.model_.logged_q_value(q) - self.model_.data_value(self.policy, q)
        kept = float(np.mean(adv > 0))
        if self.config.behaviour.filter == "advantage":
            weights = (adv > 0).astype(np.float64)
        else:
            beta = self.config.behaviour.temperature * float(q.std(correction=0))
            weights = np.exp(np.minimum(adv / max(beta, 1e-300), WEIGHT_LOG_MAX))
        return torch.from_numpy(weights).to(self.device), kept

    # ------------------------------------------------------------------ optimisation
    def step(self) -> dict[str, Any]:
        """One policy update: build ``eps0`` and ``P``, solve, ascend the full gradient."""
        if self.model_ is None or self.initial_states_ is None:
            raise RuntimeError("call fit() or setup() before step()")
        if isinstance(self.optimizer, EvolutionSearch):
            return self._search_step()
        start = time.perf_counter()
        sigma_scale = self._apply_sigma_scale()
        sol = self.model_.solution(self.policy, self.starts_, self.generator, self._warm)
        params = [p for p in self.policy.parameters() if p.requires_grad]
        objective, behaviour, kept, ess = sol.surrogate(), float("nan"), float("nan"), float("nan")
        if self._behaviour is not None:
            bc, kept, ess = self._behaviour_term(sol)
            behaviour = float(bc.detach())
            objective = objective / max(abs(sol.J), 1e-12) - self.behaviour_weight_ * bc
        grads = surrogate_gradient(objective, params)
        for p, g in zip(params, grads):
            p.grad = -g  # the optimisers minimise; NOPG ascends J_hat
        grad_norm = math.sqrt(sum(float((g * g).sum()) for g in grads))
        self.optimizer.step()
        self._warm = (sol.q, sol.mu)
        self._solution = None  # the policy changed
        self.update_ += 1
        return self._metrics(sol, start, sigma_scale, grad_norm, behaviour, kept, ess)

    def _behaviour_term(self, sol: BellmanSolution) -> tuple[torch.Tensor, float, float]:
        """The behaviour-cloning error (in the policy's graph), the share of samples kept and
        the weights' effective sample size (``nan`` without a filter)."""
        assert self._behaviour is not None
        weights, kept, ess = None, float("nan"), float("nan")
        if self.config.behaviour.filter != "none":
            weights, kept = self._behaviour_weights(sol.q)
            ess = float(weights.sum() ** 2 / (weights * weights).sum().clamp_min(1e-300)
                        / weights.numel())
        return self._behaviour.loss(self.policy, weights=weights), kept, ess

    def _search_step(self) -> dict[str, Any]:
        """One CMA-ES generation (:class:`~nopg.train.config_sections.CMAES`): every candidate is
        scored by ``J_hat`` with the same draws (the ``config.seed`` generator, as
        :meth:`solution`), less the behaviour term when it is on; the incumbent stays loaded."""
        assert self.model_ is not None and isinstance(self.optimizer, EvolutionSearch)
        start = time.perf_counter()
        sigma_scale = self._apply_sigma_scale()
        search = self.optimizer
        best: list[tuple[tuple[float, float], BellmanSolution, float]] = []   # this step's best

        def fitness(anchors: torch.Tensor | None = None, alive: float | None = None
                    ) -> float | tuple[float, float]:
            gen = torch.Generator().manual_seed(self.config.seed)
            warm = None if self._incumbent is None else (self._incumbent[0].q,
                                                         self._incumbent[0].mu)
            with torch.no_grad():
                sol = self.model_.solution(self.policy, self.starts_, gen, warm) \
                    if anchors is None else \
                    self.model_.solution(self.policy, self.starts_, gen, warm, anchors)
                value, behaviour = sol.J, float("nan")
                if self._behaviour is not None:
                    behaviour = float(self._behaviour_term(sol)[0])
                    if self._search_scale is None:
                        self._search_scale = max(abs(sol.J), 1e-12)
                    value = sol.J / self._search_scale - self.behaviour_weight_ * behaviour
            key = fitness_key((self._search_alive() if alive is None else alive, value))
            if not best or key > best[0][0]:                # as the search ranks it
                best[:] = [(key, sol, behaviour)]
            return key

        def fitness_many(candidates: list[np.ndarray]) -> list[float | tuple[float, float]]:
            """Every candidate's rollout and episode lengths in one batch
            (:meth:`AnchoredBellman.candidate_rollouts`), then each one's solve."""
            model = rollout_model(self.model_)
            assert model is not None
            horizon = self.config.optimizer.horizon
            params = []
            for x in candidates:
                search.load(x)
                params.append({k: v.detach().clone() for k, v in self.policy.named_parameters()})
            anchors, lengths = model.candidate_rollouts(
                CandidatePolicies(self.policy, params, len(self.starts_)), self.starts_, horizon)
            keys = []
            for x, path, steps in zip(candidates, anchors, lengths):
                search.load(x)
                keys.append(fitness(path, float(np.mean(np.minimum(steps, horizon))) / horizon))
            return keys

        batched = (rollout_model(self.model_) is not None and not self.stochastic
                   and self.config.optimizer.horizon is not None)
        report = search.step(fitness, fitness_many if batched else None)
        key, sol, behaviour = best[0]
        if key >= (search.best_alive, search.best_fitness):   # the incumbent is this step's
            self._incumbent = (sol, behaviour)
        assert self._incumbent is not None
        sol, behaviour = self._incumbent
        self._warm = (sol.q, sol.mu)
        self._solution = None
        self.update_ += 1
        metrics = self._metrics(sol, start, sigma_scale, float("nan"), behaviour, float("nan"),
                                float("nan"))
        metrics.update(report)
        stop = search.stopped()
        if stop:
            logger.info("update %d: CMA-ES met %s", self.update_, ", ".join(stop))
        return metrics

    def _search_alive(self) -> float:
        """``optimizer.horizon``: the share of the loaded policy's model episodes (from the initial
        states) that last ``optimizer.horizon`` steps, each counted by the share it lasts; 1 without
        the setting."""
        if self.config.optimizer.horizon is None:
            return 1.0
        model = rollout_model(self.model_)
        assert model is not None
        horizon = self.config.optimizer.horizon
        # the solution just scored rolled this policy out from these starts: its anchors are
        # the first steps
        lengths = model.episode_lengths(self.policy, self.starts_, horizon,
                                              torch.Generator().manual_seed(self.config.seed),
                                              from_anchors=True)
        return float(np.mean(np.minimum(lengths, horizon))) / horizon

    def _metrics(self, sol: BellmanSolution, start: float, sigma_scale: float, grad_norm: float,
                 behaviour: float, kept: float, ess: float) -> dict[str, Any]:
        """One update's metrics (:data:`~nopg.train.loggers.LOG_COLUMNS`) from its solution."""
        metrics = {
            "update": self.update_, "J_hat": sol.J, "support_gap": sol.support_gap,
            "initial_gap": sol.initial_gap, "grad_norm": grad_norm,
            "solver_iters_q": sol.info_q.iterations, "solver_iters_mu": sol.info_mu.iterations,
            "residual_q": sol.info_q.residual, "residual_mu": sol.info_mu.residual,
            "refined_rows": sol.refined_rows, "update_time_s": time.perf_counter() - start,
            "sigma_scale": sigma_scale, "behaviour_loss": behaviour, "behaviour_kept": kept,
            "behaviour_ess": ess, "evaluations": float("nan"), "search_sigma": float("nan"),
            "search_restarts": float("nan"), "search_alive": float("nan"),
        }
        if not math.isfinite(sol.J):
            raise FloatingPointError(f"J_hat became {sol.J} at update {self.update_}")
        logger.debug("update %(update)d J_hat %(J_hat).6f support gap %(support_gap).3f grad %(grad_norm).3e "
                     "residual %(residual_q).1e/%(residual_mu).1e time %(update_time_s).4fs", metrics)
        return metrics

    def updates(self, data: TransitionDataset, bandwidths: Bandwidths,
                initial_states: np.ndarray | torch.Tensor,
                n_updates: int) -> Iterator[dict[str, Any]]:
        """The fit loop: run up to ``n_updates`` policy updates, yielding each one's metrics.

        The model is built (:meth:`setup`) when this is called; the updates run as the iterator
        is consumed, so the caller decides what happens between them (callbacks, loggers) and
        may stop at any time. Each metrics dictionary is appended to :attr:`history_` before it
        is yielded; entries the caller adds to it (e.g. ``eval_return``) are kept there. With
        ``config.continuation`` the bandwidths shrink in stages along the way.

        Parameters
        ----------
        data : TransitionDataset
        bandwidths : Bandwidths
        initial_states : array of shape (m, d_s)
            States whose mean value is ``J_hat``.
        n_updates : int

        Returns
        -------
        iterator of dict
            One metrics dictionary per update (:data:`~nopg.train.loggers.LOG_COLUMNS` but
            ``eval_return``).
        """
        if isinstance(n_updates, bool) or not isinstance(n_updates, int) or n_updates < 0:
            raise ValueError(f"The 'n_updates' parameter must be a non-negative int. "
                             f"Got {n_updates!r} instead.")
        schedule = self._continuation(n_updates)
        self.setup(data, bandwidths.scaled(schedule[0][1], schedule[0][1])
                   if schedule else bandwidths, initial_states)
        if self._behaviour is not None and self.update_ == 0 and self.config.behaviour.pretrain:
            loss = self._behaviour.pretrain(self.policy, self.config.behaviour.pretrain,
                                            self.config.pretrain_learning_rate, self.config.seed)
            logger.info("behaviour pretraining: %d steps, behaviour loss %.4g",
                        self.config.behaviour.pretrain, loss)
        return self._update_loop(data, bandwidths, initial_states, n_updates,
                                 dict(schedule[1:]))

    def _update_loop(self, data: TransitionDataset, bandwidths: Bandwidths,
                     initial_states: np.ndarray | torch.Tensor, n_updates: int,
                     later_stages: dict[int, float]) -> Iterator[dict[str, Any]]:
        for i in range(n_updates):
            if i in later_stages:
                factor = later_stages[i]
                logger.info("update %d: bandwidths x %.3g (continuation)", self.update_, factor)
                self.setup(data, bandwidths.scaled(factor, factor), initial_states)
            metrics = self.step()
            self.history_.append(metrics)
            yield metrics

    def fit(self, data: TransitionDataset, bandwidths: Bandwidths,
            initial_states: np.ndarray | torch.Tensor, n_updates: int, *,
            callbacks: Iterable[Callback] = (), log_path: str | Path | None = None,
            progress: bool = True, loggers: Iterable[MetricsLogger] = ()) -> NOPG:
        """Run ``n_updates`` policy updates (continuing the update count after a resume).

        Drains :meth:`updates`: after each update the callbacks run in order, then every
        logger's ``on_update`` receives the metrics (with what the callbacks added).

        Parameters
        ----------
        data, bandwidths, initial_states, n_updates
            As for :meth:`updates`.
        callbacks : iterable of Callback
            Called as ``callback(algo, metrics)``; returning ``False`` stops the fit.
        log_path : path, optional
            CSV file receiving one row per update (appended to when it exists;
            :class:`~nopg.train.loggers.CSVLogger`).
        progress : bool
            Show a tqdm progress bar with ``J_hat`` when stderr is a terminal (or in a notebook);
            console log records are routed through ``tqdm.write`` meanwhile. With stderr
            redirected to a file or pipe no bar is drawn (no redraws in the file): the log
            records (``update N: J_hat ...`` every 100 updates) report the progress.
        loggers : iterable of MetricsLogger
            Further metrics back ends (e.g. :class:`~nopg.train.tensorboard.TensorBoardCallback`),
            after the built-in ones. The caller owns them: ``fit`` does not close them.

        Returns
        -------
        self
        """
        run = self.updates(data, bandwidths, initial_states, n_updates)
        callbacks, loggers = list(callbacks), list(loggers)
        own: list[MetricsLogger] = []     # the loggers fit builds, and closes
        try:
            own += [] if log_path is None else [CSVLogger(log_path)]
            own += [LogLineLogger(every=100, log=logger),
                    ProgressBarLogger(n_updates, show_progress(progress))]
            for metrics in run:
                stop = False
                for cb in callbacks:
                    stop |= cb(self, metrics) is False
                for sink in [*own, *loggers]:
                    sink.on_update(metrics)
                if stop:
                    logger.info("a callback stopped fit at update %d", self.update_)
                    break
        finally:
            for sink in reversed(own):
                sink.close()
        if self.history_:
            self._warn_support(self.solution())
        return self

    def _continuation(self, n_updates: int) -> list[tuple[int, float]]:
        """``(update index, bandwidth factor)`` stages of the continuation (empty when off)."""
        c = self.config.continuation
        if c is None or n_updates == 0:
            return []
        length = min(n_updates, c.updates or n_updates // 2)
        stages = c.stages
        factors = np.geomspace(c.factor, 1.0, stages)
        starts = [int(round(k * length / (stages - 1))) for k in range(stages - 1)] + [length]
        return list(zip(starts, (float(f) for f in factors)))

    def _warn_support(self, sol: BellmanSolution) -> None:
        limit, gap, start = self.config.support_warning, sol.support_gap, sol.initial_gap
        msgs = []
        if gap > limit:
            msgs.append(f"{100 * gap:.0f}% of the policy's discounted visitation lies where the "
                        f"data are thin (support gap {gap:.3f} > {limit}): J_hat = {sol.J:.4g} "
                        "rests on the model's extrapolation and is likely over-optimistic. "
                        "Consider " + ("ModelConfig(unsupported='absorb'), "
                                      if self.config.model.successors == "kernel" else
                                      "ModelConfig(unsupported='penalty'), ") +
                        "more data near the policy's states, or wider bandwidths.")
        if start > limit:
            msgs.append(f"the initial states lie where the data are thin (initial gap {start:.3f} "
                        f"> {limit}): every model trajectory starts by jumping to the nearest data, "
                        f"however far, so J_hat = {sol.J:.4g} may not describe the policy from "
                        "these states. Add data that start there, or choose initial states "
                        "inside the data.")
        for msg in msgs:
            logger.warning(msg)
            warn_user(msg, SupportWarning)
