"""The default method as one object: :class:`AutoNOPG` turns a data set into a policy.

``AutoNOPG(config, seed=...).fit(data, initial_states)`` does everything the method does, in
this order, and records each decision in :attr:`AutoNOPG.report_` (a :class:`FitReport`):

1. selects the kernel bandwidths (``config.bandwidth_method``, :mod:`nopg.select.bandwidth_report`);
2. names the fits to make (``config.recipes``; ``auto`` decides by the data,
   :func:`nopg.select.recipes.resolve_recipes` and :func:`nopg.select.recipes.escalation`);
3. fits each (:class:`nopg.NOPG`, a gradient fit or a CMA-ES search), keeping a copy of the
   policy every ``snapshot_every`` updates from ``snapshot_from`` of the fit on;
4. scores the final policy and the copies under the *judge*, one anchored model of the data
   (:mod:`nopg.select.policy_selection`), and keeps one per fit (:mod:`nopg.select.snapshots`), then one
   among the fits (:func:`nopg.select.policy_selection.best_score`); with ``auto``, a second fit
   (``anchored``) is made only where the judge forecasts that the first fit's policy gains
   nothing along its episodes (:func:`nopg.select.recipes.gains_nothing`).

What follows the first fit's updates (one plain fit) may spend ``config.budget`` times their CPU
seconds (:func:`nopg.select.fit_run.start_budget`); past it no fit or snapshot score starts, a
running fit stops, and the judge chooses among what it has. ``nopg fit``, ``nopg reproduce``, the
sweep and the Python API all run this object; the runner adds data, evaluation and plots.

What a task knows beyond its data is given to :meth:`AutoNOPG.fit`: the policy's action bound,
the bounds of the state space and the limits where episodes end (the moved successors'
``state_bounds`` and ``terminal_bounds``), and the evaluation's episode length (``horizon``,
the length the judge forecasts returns over). State dimensions constant over the data carry no
information and are ignored (:mod:`nopg.data.dimensions`), with one log line. An ``evaluate``
function, where the caller has one, is recorded beside each fit in the report and never used
to choose.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from numpy.typing import ArrayLike
from torch import nn

from ..bandwidth.selection import Bandwidths
from ..data.dataset import TransitionDataset
from ..data.dimensions import StateSelect, drop_state_dims, informative_state_dims, reduce_states
from ..model.anchored import AnchoredBellman
from ..model.bellman import as_states
from ..train.algorithm import NOPG, EvalCallback
from .bandwidth_report import BandwidthReport, bandwidth_report
from .fit_report import Candidate, FitReport, format_return
from .fit_run import Deadline, FitContext, budget_words, policy_snapshots, run_fit, start_budget
from .method_config import MethodConfig
from .policy_selection import best_score, judge_model, score_policy
from .recipes import (
    apply_recipe,
    discount_horizon,
    ends_in_failure,
    escalation,
    gains_nothing,
    resolve_recipes,
    reward_rates,
    selection_starts,
)
from .snapshots import PolicySnapshots, SnapshotChoice, choose_snapshot
from .task_knowledge import (
    action_bound,
    check_bounds,
    episode_horizon,
    make_policy,
    model_episode_report,
    with_bounds,
)

__all__ = ["AutoNOPG"]

logger = logging.getLogger("nopg.select.auto")

class AutoNOPG:
    """The default NOPG method: bandwidths, fits, the judge's selection and a fit report.

    Parameters
    ----------
    config : MethodConfig, optional
        The method's settings (default: those of ``nopg fit``).
    seed : int
        Seeds the bandwidth selection's subsample, the policy initialisation and NOPG's draws.

    Attributes
    ----------
    algo_ : NOPG
        The kept fit (its model, ``J_hat``, value function).
    policy_ : torch.nn.Module
        The kept policy.
    bandwidths_ : Bandwidths
        The selected bandwidths; ``bandwidth_report_`` the selection's report.
    kept_state_dims_ : ndarray of bool
        The state dimensions the fits use: all but those constant over the data
        (:func:`nopg.data.dimensions.informative_state_dims`), which carry no information and are
        ignored with one log line; ``algo_`` then works on the kept ones, ``policy_`` and
        :meth:`predict` take full states.
    report_ : FitReport
        Every decision taken (:class:`FitReport`).

    Examples
    --------
    >>> method = AutoNOPG(seed=0).fit(data, initial_states=data.episode_start_states())
    >>> method.policy_, method.J_hat_, method.report_.kept.name
    """

    def __init__(self, config: MethodConfig | None = None, *, seed: int = 0) -> None:
        self.config = MethodConfig() if config is None else config
        if not isinstance(self.config, MethodConfig):
            raise ValueError(f"The 'config' parameter must be a MethodConfig. "
                             f"Got {type(self.config).__name__} instead.")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise ValueError(f"The 'seed' parameter must be an int. Got {seed!r} instead.")
        self.seed = int(seed)

    # ------------------------------------------------------------------ results
    @property
    def algo_(self) -> NOPG:
        return self.report_.kept.algo

    @property
    def policy_(self) -> nn.Module:
        """The kept policy, acting on the data's full states (where some state dimensions
        were ignored, a :class:`nopg.data.dimensions.StateSelect` around the policy of the kept
        ones, which also takes the model's reduced states)."""
        return self.algo_.policy

    @property
    def J_hat_(self) -> float:
        """The kept policy's ``J_hat`` under its own fit's model."""
        return self.algo_.J_hat()

    @property
    def bandwidths_(self) -> Bandwidths:
        return self.bandwidth_report_.bandwidths

    def predict(self, states: np.ndarray) -> np.ndarray:
        """The kept policy's (mean) actions for ``states`` (m, d_s) of the data's full states."""
        return self.algo_.predict(reduce_states(states, self.kept_state_dims_))

    def save(self, path: str | Path, *, include_data: bool = True) -> Path:
        """Save the kept fit as a checkpoint folder (:meth:`nopg.NOPG.save`)."""
        return self.algo_.save(path, include_data=include_data)

    # ------------------------------------------------------------------ fitting
    def fit(self, data: TransitionDataset, initial_states: ArrayLike | None = None, *,
            action_max: float | ArrayLike | None = None, state_bounds: ArrayLike | None = None,
            terminal_bounds: ArrayLike | None = None, horizon: int | None = None,
            evaluate: Callable[[nn.Module], list[float]] | None = None,
            monitor: Callable[[nn.Module], float] | None = None, monitor_every: int = 100,
            evaluate_candidates: bool = False, log_dir: str | Path | None = None,
            tensorboard_dir: str | Path | None = None, progress: bool = True) -> AutoNOPG:
        """Fit the method to ``data`` (module docstring).

        Parameters
        ----------
        data : TransitionDataset
        initial_states : array (m, d_s), optional
            The states ``J`` averages over (default: the states that start the data's episodes).
        action_max : float or array (d_a,), optional
            The policy's action bound (default: the largest ``|a|`` per dimension in the data).
        state_bounds, terminal_bounds : array (2, d_s), optional
            ``[low, high]`` of the state space and of where episodes go on (``None`` or
            ``nan`` entries: unbounded), for the models whose successors move.
        horizon : int, optional
            The evaluation's episode length: the judge forecasts returns over it (default: the
            length at which the data's episodes are cut, :func:`episode_horizon`, else
            ``ceil(10 / (1 - gamma))``).
        evaluate : callable, optional
            ``evaluate(policy) -> returns``, recorded for each fit in the report, never used to
            choose.
        monitor, monitor_every
            ``monitor(policy) -> return`` every ``monitor_every`` updates, logged as
            ``eval_return``.
        evaluate_candidates : bool
            Also ``evaluate`` every policy the judge scores (each snapshot), for the report's
            measure of the judge (``report_.scored()``, ``report_.regret()``); never used to
            choose.
        log_dir : path, optional
            Folder of the per-update CSV logs (``log.csv``, or ``log_<fit>.csv`` per fit).
        tensorboard_dir : path, optional
            TensorBoard event files (one sub-folder per fit where there are several).
        progress : bool
            Progress bars.

        Returns
        -------
        self
        """
        start = time.perf_counter()
        ctx = self._context(data, initial_states, action_max, state_bounds, terminal_bounds,
                            horizon, evaluate, monitor, monitor_every, evaluate_candidates,
                            log_dir, tensorboard_dir, progress)
        report = self._plan(ctx)
        report.dropped_state_dims = np.flatnonzero(~self.kept_state_dims_).tolist()
        report.bandwidth_time_s = self.bandwidth_report_.seconds
        fit_start = time.perf_counter()
        if len(report.recipes) > 1:
            self._fit_recipes(ctx, report)
        else:
            self._fit_restarts(ctx, report)
        report.fit_time_s = time.perf_counter() - fit_start
        report.budget_spent_s = ctx.spent() if report.plain_fit_s is not None else None
        report.total_time_s = time.perf_counter() - start
        self.report_ = report
        return self

    def _context(self, data: TransitionDataset, initial_states: ArrayLike | None,
                 action_max: float | ArrayLike | None, state_bounds: ArrayLike | None,
                 terminal_bounds: ArrayLike | None, horizon: int | None, evaluate: Any,
                 monitor: Any, monitor_every: int, evaluate_candidates: bool,
                 log_dir: str | Path | None, tensorboard_dir: str | Path | None,
                 progress: bool) -> FitContext:
        """Check the task's knowledge, select the bandwidths and gather what the fits share."""
        if not isinstance(data, TransitionDataset):
            raise ValueError(f"The 'data' parameter must be a TransitionDataset. "
                             f"Got {type(data).__name__} instead.")
        d_s = data.state_dim
        starts = data.episode_start_states() if initial_states is None else \
            as_states(initial_states, d_s, "initial_states")
        state_bounds = check_bounds("state_bounds", state_bounds, d_s)
        terminal_bounds = check_bounds("terminal_bounds", terminal_bounds, d_s)
        bound = action_bound(action_max, data)
        if horizon is not None and (isinstance(horizon, bool) or not isinstance(
                horizon, (int, np.integer)) or horizon < 1):
            raise ValueError(f"The 'horizon' parameter must be a positive int (the evaluation's "
                             f"episode length). Got {horizon!r} instead.")
        if isinstance(monitor_every, bool) or not isinstance(monitor_every, int) \
                or monitor_every < 1:
            raise ValueError(f"The 'monitor_every' parameter must be a positive int. "
                             f"Got {monitor_every!r} instead.")
        keep = self.kept_state_dims_ = informative_state_dims(data)
        if not keep.all():
            logger.info("state dimensions %s are constant over the data and carry no "
                        "information: the method ignores them", np.flatnonzero(~keep).tolist())
            data, starts = drop_state_dims(data, keep), reduce_states(starts, keep)
            state_bounds, terminal_bounds = (
                None if b is None else [[v for v, k in zip(side, keep) if k] for side in b]
                for b in (state_bounds, terminal_bounds))
        self.bandwidth_report_ = self.select_bandwidths(data)
        return FitContext(
            data=data, bandwidths=self.bandwidths_, starts=starts,
            few_starts=selection_starts(starts), action_max=bound,
            state_bounds=state_bounds, terminal_bounds=terminal_bounds,
            horizon=int(horizon) if horizon is not None else self._default_horizon(data),
            evaluate=evaluate, monitor=monitor, monitor_every=monitor_every,
            evaluate_candidates=bool(evaluate_candidates) and evaluate is not None,
            log_dir=None if log_dir is None else Path(log_dir),
            tensorboard_dir=None if tensorboard_dir is None else Path(tensorboard_dir),
            progress=progress)

    def _default_horizon(self, data: TransitionDataset) -> int:
        """The judge's horizon where the caller gives none: :func:`episode_horizon`, else
        ``ceil(10 / (1 - gamma))``; logged."""
        shown = episode_horizon(data)
        if shown is not None:
            logger.info("seed %d: the judge forecasts returns over %d steps, the length at which "
                        "the data's episodes are cut (give horizon for another)", self.seed, shown)
            return shown
        steps = discount_horizon(self.config.nopg.gamma)
        logger.info("seed %d: the judge forecasts returns over %d steps, 10 / (1 - gamma): the "
                    "data show no time limit (give horizon for the evaluation's length)",
                    self.seed, steps)
        return steps

    def select_bandwidths(self, data: TransitionDataset) -> BandwidthReport:
        """The bandwidth selection's report for ``data`` (``config.bandwidth_method``, its factors
        and action guard); its warnings (e.g. cross-validation on grid data)
        go to the log."""
        c = self.config
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            report = bandwidth_report(data, method=c.bandwidth_method,
                                      state_factor=np.asarray(c.state_factor, float),
                                      action_factor=np.asarray(c.action_factor, float),
                                      seed=self.seed, max_action_effect=c.max_action_effect)
        for w in caught:
            logger.warning("%s: %s", w.category.__name__, w.message)
        logger.info("seed %d: %r; bandwidths state=%s action=%s", self.seed, data,
                    np.round(report.bandwidths.state, 4).tolist(),
                    np.round(report.bandwidths.action, 4).tolist())
        return report

    def _plan(self, ctx: FitContext) -> FitReport:
        """The fits to make (``auto`` resolved by the data), recorded."""
        c, data, n_starts = self.config, ctx.data, len(ctx.starts)
        recipes = resolve_recipes(c.recipes, data, c.nopg.gamma, c.restarts)
        escalate = escalation(c.recipes, data, c.restarts)
        report = FitReport(recipes_asked=tuple(c.recipes), recipes=recipes, horizon=ctx.horizon)
        if len(ctx.few_starts) < n_starts:
            report.decide(f"seed {self.seed}: the judge and the recipes whose successors move use "
                          f"{len(ctx.few_starts)} of the {n_starts} initial states, spread by "
                          "farthest-point sampling")
        if recipes != tuple(c.recipes):                       # "auto", chosen by the data
            failing = ends_in_failure(data, c.nopg.gamma)
            report.decide(f"seed {self.seed}: recipes {', '.join(c.recipes)} = "
                          f"{', '.join(recipes)}"
                          + ("" if escalate is None else
                             f", then {escalate} where its policy gains nothing along its episodes")
                          + f" ({len(data)} transitions, episodes that "
                          f"{'end' if failing else 'do not end'} in failures, {n_starts} initial "
                          f"states, {c.restarts} restart(s))")
            report.recipes = recipes + ((escalate,) if escalate else ())
        elif "stabilise" in recipes and not ends_in_failure(data, c.nopg.gamma):
            logger.warning("seed %d: recipe stabilise on data whose episodes do not end in "
                           "failures: it ranks policies by how long their episodes last, which "
                           "prefers never reaching a goal, and the judge's forecast can count a "
                           "goal's reward more than once; 'auto' fits given alone here", self.seed)
        ctx.escalate = escalate is not None
        return report

    def _recipe_config(self, ctx: FitContext, name: str) -> MethodConfig:
        """Recipe ``name``'s settings with the task's bounds (:func:`with_bounds`)."""
        return with_bounds(apply_recipe(self.config, name), ctx.state_bounds, ctx.terminal_bounds)

    def judge(self, ctx: FitContext) -> AnchoredBellman:
        """The judge of the fits (one anchored model of the data, the task's bounds), built once."""
        if ctx.judge is None:
            judge_cfg = with_bounds(self.config.replace(**{"nopg.model.successors": "anchored"}),
                                    ctx.state_bounds, ctx.terminal_bounds)
            ctx.judge = judge_model(ctx.data, ctx.bandwidths, judge_cfg.nopg,
                                    self.config.stochastic)
        return ctx.judge

    def _fit_once(self, ctx: FitContext, config: MethodConfig, name: str, restart: int,
                  n_updates: int, log_name: str, board: str | None,
                  stop: Deadline | None = None
                  ) -> tuple[NOPG, EvalCallback | None, PolicySnapshots | None]:
        """A fit from the policy initialisation of ``(seed, restart)``, with its monitor,
        snapshots, TensorBoard writer and, with ``stop``, a deadline."""
        with torch.random.fork_rng(devices=[]):    # the caller's random state is left as it was
            torch.manual_seed(self.seed + 100_003 * restart)  # policy initialisation only
            policy = make_policy(config, ctx.data.state_dim, ctx.data.action_dim, ctx.action_max,
                                 ctx.data)
        if not self.kept_state_dims_.all():       # acts on full states, and on the model's
            policy = StateSelect(policy, self.kept_state_dims_)
        starts = ctx.starts if config.nopg.model.successors == "kernel" else ctx.few_starts
        algo = NOPG(policy, dataclasses.replace(config.nopg, seed=self.seed),
                    stochastic=config.stochastic)
        monitor = None if ctx.monitor is None else EvalCallback(ctx.monitor, ctx.monitor_every)
        snapshots = policy_snapshots(config)
        board_dir = None if ctx.tensorboard_dir is None or board is None else \
            ctx.tensorboard_dir / board
        run_fit(algo, ctx.data, ctx.bandwidths, starts, n_updates, monitor, snapshots,
                board_dir, ctx.log_path(log_name), ctx.progress, stop)
        return algo, monitor, snapshots

    def _keep_snapshot(self, ctx: FitContext, algo: NOPG, snapshots: PolicySnapshots | None,
                       label: str, report: FitReport) -> SnapshotChoice | None:
        """Load the judge's choice among ``algo``'s final policy and ``snapshots`` (those it
        scores before the budget's deadline) into ``algo``, logged; ``None`` (no judge built)
        without an earlier snapshot."""
        if snapshots is None or all(s.update == algo.update_ for s in snapshots.snapshots):
            return None
        evaluate, record = ctx.evaluate, ctx.evaluate_candidates and ctx.evaluate is not None
        choice = choose_snapshot(
            self.judge(ctx), algo, snapshots.snapshots, ctx.few_starts, ctx.horizon, self.seed,
            evaluate=ctx.record(lambda pol: float(np.mean(evaluate(pol)))) if record else None,
            over_budget=ctx.over_budget, particles=self.config.judge_particles,
            rule=self.config.judge_rule)
        kept, final = choice.kept_score, choice.scores[0]
        logger.info("seed %d%s: the judge keeps the policy of update %d of %d (forecast %.2f; "
                    "the final policy's %.2f; %d snapshots from update %d)", self.seed, label,
                    choice.update, choice.updates[0], kept.episode_return_mean,
                    final.episode_return_mean, len(choice.updates) - 1, snapshots.start)
        if choice.unscored:
            words = budget_words(report, self.config.budget)
            report.decide(f"seed {self.seed}{label}: {words} is spent: "
                          f"{choice.unscored} of the {choice.unscored + len(choice.updates) - 1} "
                          "snapshots were not scored, the judge chose among the final policy "
                          "and the latest ones")
        return choice

    def _fit_recipe(self, ctx: FitContext, name: str, report: FitReport) -> Candidate:
        """Recipe ``name``'s fit (restart 0's initialisation, the judge's snapshot choice),
        scored by the judge; the first starts the budget, a later one stops at its deadline."""
        rconfig = self._recipe_config(ctx, name)
        fit_start, cpu_start = time.perf_counter(), time.process_time()
        first = report.plain_fit_s is None
        stop = None if first or ctx.budget_s is None else Deadline(ctx.over_budget)
        algo, _, snapshots = self._fit_once(ctx, rconfig, name, 0, rconfig.n_updates,
                                            f"log_{name}.csv", name, stop)
        if first:
            start_budget(ctx, report, self.config.budget, time.process_time() - cpu_start)
        choice = self._keep_snapshot(ctx, algo, snapshots, f" recipe {name}", report)
        seconds = time.perf_counter() - fit_start
        returns = None if ctx.evaluate is None else \
            [float(r) for r in ctx.record(ctx.evaluate)(algo.policy)]
        score = choice.kept_score if choice is not None else \
            score_policy(self.judge(ctx), algo.policy, ctx.few_starts, ctx.horizon, self.seed,
                         self.config.judge_particles, self.config.judge_rule == "mean")
        cand = Candidate(name, algo, rconfig, seconds, algo.J_hat(), algo.support_gap_, score,
                         choice, returns, ctx.log_path(f"log_{name}.csv"),
                         None if stop is None else stop.stopped_at)
        logger.info("seed %d recipe %s: return %s, J_hat %.4f (its own model); the judge: "
                    "return %.2f over %d steps (episodes %.1f steps, shortest %d), J_hat %.4f "
                    "(support gap %.3f); %.1f s", self.seed, name, format_return(cand.return_mean),
                    algo.J_hat(), score.episode_return_mean, ctx.horizon,
                    score.episode_steps_mean, score.episode_steps_min, score.J_hat,
                    score.support_gap, seconds)
        return cand

    def _escalates(self, first: Candidate, name: str, report: FitReport) -> bool:
        """Whether ``auto`` escalates to recipe ``name`` after the ``first`` fit
        (:func:`nopg.select.recipes.gains_nothing`), recorded."""
        score = first.score
        assert score is not None
        gamma = self.config.nopg.gamma
        fitted = gains_nothing(score, gamma)
        per_step, discounted = reward_rates(score, gamma)
        report.decide(f"seed {self.seed}: the judge forecasts {per_step:.4f} a step over "
                      f"{score.steps} steps for recipe {first.name}'s policy against "
                      f"{discounted:.4f} a step discounted: "
                      + (f"no gain along its episodes, recipe {name} is fitted too" if fitted else
                         f"it gains along its episodes, recipe {name} is not fitted"))
        report.escalation = {"recipe": name, "after": first.name, "fitted": fitted,
                             "reward_per_step": per_step, "discounted_reward_per_step": discounted}
        return fitted

    def _fit_recipes(self, ctx: FitContext, report: FitReport) -> None:
        """Fit each recipe (with ``auto``'s escalation, the later ones only where it fires) and
        keep the judge's best."""
        fits: list[Candidate] = []
        for name in report.recipes:
            if ctx.escalate and fits and not self._escalates(fits[0], name, report):
                break
            if fits and ctx.over_budget():
                report.decide(f"seed {self.seed}: recipe {name} is not fitted: "
                              f"{budget_words(report, self.config.budget)} is spent")
                continue
            fits.append(self._fit_recipe(ctx, name, report))
            if fits[-1].stopped_at is not None:
                words = budget_words(report, self.config.budget)
                report.decide(f"seed {self.seed}: {words} stopped recipe "
                              f"{name} at update {fits[-1].stopped_at} of "
                              f"{fits[-1].config.n_updates}")
        kept = fits[best_score([f.score for f in fits if f.score], rule=self.config.judge_rule)]
        kept.kept = True
        if len(fits) > 1:
            report.decide(f"seed {self.seed}: the judge keeps recipe {kept.name}")
        report.candidates = sorted(fits, key=lambda f: not f.kept)

    def _fit_restarts(self, ctx: FitContext, report: FitReport) -> None:
        """One recipe's fit with ``config.restarts`` restarts (the highest ``J_hat`` kept and
        continued to ``n_updates``), then the judge's choice among its snapshots."""
        config = self._recipe_config(ctx, report.recipes[0])
        restarts = config.restarts
        first = config.n_updates if restarts == 1 else \
            min(config.restart_updates or config.n_updates, config.n_updates)
        runs, plain_s = [], 0.0
        for r in range(restarts):
            fit_start, cpu_start = time.perf_counter(), time.process_time()
            log_name = "log.csv" if restarts == 1 else f"log_restart{r}.csv"
            algo, monitor, snapshots = self._fit_once(
                ctx, config, f"restart{r}", r, first, log_name,
                "" if restarts == 1 else f"restart{r}")
            plain_s += time.process_time() - cpu_start
            returns = None if ctx.evaluate is None else \
                [float(x) for x in ctx.evaluate(algo.policy)]
            runs.append((Candidate(f"restart{r}" if restarts > 1 else report.recipes[0], algo,
                                   config, time.perf_counter() - fit_start, algo.J_hat(),
                                   algo.support_gap_, returns=returns,
                                   log_path=ctx.log_path(log_name)), monitor, snapshots))
            logger.info("seed %d restart %d after %d updates: J_hat %.4f (support gap %.3f), "
                        "return %s", self.seed, r, first, algo.J_hat(), algo.support_gap_,
                        format_return(runs[-1][0].return_mean))
        kept, monitor, snapshots = max(runs, key=lambda run: run[0].J_hat)
        fit_start, cpu_start = time.perf_counter(), time.process_time()
        continued = restarts > 1 and first < config.n_updates
        if restarts > 1:
            report.decide(f"seed {self.seed}: restart {kept.name[7:]} has the highest J_hat "
                          "and is kept")
            if continued:
                board = None if ctx.tensorboard_dir is None else ctx.tensorboard_dir / kept.name
                run_fit(kept.algo, ctx.data, ctx.bandwidths, kept.algo.initial_states_,
                        config.n_updates - first, monitor, snapshots, board, kept.log_path,
                        ctx.progress)
        start_budget(ctx, report, self.config.budget, plain_s + time.process_time() - cpu_start)
        if report.budget_s == 0.0 and snapshots is not None and snapshots.snapshots:
            report.decide(f"seed {self.seed}: a budget of 0: the final policy is kept, the judge "
                          "scores no snapshot")
        else:
            kept.snapshot = self._keep_snapshot(ctx, kept.algo, snapshots, "", report)
        kept.score = None if kept.snapshot is None else kept.snapshot.kept_score
        kept.fit_time_s += time.perf_counter() - fit_start
        if ctx.evaluate is not None and (continued or (kept.snapshot is not None
                                                       and not kept.snapshot.kept_final)):
            kept.returns = [float(x) for x in ctx.record(ctx.evaluate)(kept.algo.policy)]
        kept.kept = True
        report.candidates = sorted([run[0] for run in runs], key=lambda c: not c.kept)

    def model_episodes(self, steps: int) -> dict[str, Any]:
        """:func:`model_episode_report` of the kept fit."""
        return model_episode_report(self.algo_, steps, self.seed)
