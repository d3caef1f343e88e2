"""NOPG as an estimator: gradient ascent on ``J_hat`` with callbacks, logs and checkpoints."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import logging
import math
import platform
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from . import __version__
from .bandwidth import Bandwidths
from .bellman import BellmanSolution, NonparametricBellman, as_states
from .config import NOPGConfig
from .data import TransitionDataset
from .gradient import surrogate_gradient
from .policies import is_stochastic, policy_from_spec

logger = logging.getLogger(__name__)


class SupportWarning(UserWarning):
    """Much of the policy's visitation lies where the data are thin: ``J_hat`` is unreliable."""


CHECKPOINT_FORMAT_VERSION = 1
"""``format_version`` that :meth:`NOPG.save` writes and the only one :meth:`NOPG.load` reads."""

LOG_COLUMNS = ("update", "J_hat", "support_gap", "grad_norm", "solver_iters_q", "solver_iters_mu",
               "residual_q", "residual_mu", "refined_rows", "update_time_s", "sigma_scale",
               "eval_return")


class Callback(Protocol):
    """Called after every update with the algorithm and that update's metrics.

    It may add entries to ``metrics`` (e.g. ``eval_return``); returning ``False`` stops ``fit``.
    """

    def __call__(self, algo: NOPG, metrics: dict[str, Any]) -> bool | None: ...


class EvalCallback:
    """Evaluate the policy every ``every`` updates with ``eval_fn(policy) -> float``.

    The return is stored as ``metrics["eval_return"]`` and kept in :attr:`results`.
    """

    def __init__(self, eval_fn: Callable[[nn.Module], float], every: int) -> None:
        if every < 1:
            raise ValueError(f"The 'every' parameter must be >= 1. Got {every!r} instead.")
        self.eval_fn, self.every = eval_fn, int(every)
        self.results: list[tuple[int, float]] = []

    def __call__(self, algo: NOPG, metrics: dict[str, Any]) -> None:
        if metrics["update"] % self.every == 0:
            ret = float(self.eval_fn(algo.policy))
            metrics["eval_return"] = ret
            self.results.append((metrics["update"], ret))
            logger.info("update %d: eval return %.3f (J_hat %.4f)", metrics["update"], ret,
                        metrics["J_hat"])


class CheckpointCallback:
    """Save a checkpoint folder every ``every`` updates (overwriting the previous one)."""

    def __init__(self, path: str | Path, every: int) -> None:
        if every < 1:
            raise ValueError(f"The 'every' parameter must be >= 1. Got {every!r} instead.")
        self.path, self.every = Path(path), int(every)

    def __call__(self, algo: NOPG, metrics: dict[str, Any]) -> None:
        if metrics["update"] % self.every == 0:
            algo.save(self.path)


def _is_console_handler(handler: logging.Handler) -> bool:
    return (isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)
            and handler.stream in (sys.stdout, sys.stderr))


def _show_progress(progress: bool) -> bool:
    """Whether ``fit`` shows its bar: only on a terminal or in a notebook.

    When stderr is redirected (a file, a pipe, a batch job's log) the bar is off: tqdm would write
    a redraw per refresh (hundreds of KB per run) and the log lines every 100 updates already
    carry the progress.
    """
    if not progress:
        return False
    if any(cls.__module__.startswith("tqdm.notebook") for cls in tqdm.__mro__):
        return True
    try:
        return bool(sys.stderr.isatty())
    except (AttributeError, ValueError, OSError):   # no stderr, or a closed one
        return False


@contextlib.contextmanager
def _progress_bar(total: int, show: bool) -> Iterator[Any]:
    """A tqdm bar; while it is shown, console log records go through ``tqdm.write``.

    ``logging_redirect_tqdm`` swaps the console handlers (stream handlers on stdout/stderr) of
    the root logger and of the ``nopg`` logger for one that clears the bar, writes the record on
    its own line and redraws the bar, so log lines never land inside a half-drawn bar. Other
    handlers (e.g. a run's log file) are untouched.
    """
    with contextlib.ExitStack() as stack:
        if show:
            levels = {}
            for lg in (logging.getLogger(), logging.getLogger("nopg")):
                console = [h.level for h in lg.handlers if _is_console_handler(h)]
                if console:
                    levels[lg] = min(console)
            if levels:
                stack.enter_context(logging_redirect_tqdm(loggers=list(levels), tqdm_class=tqdm))
                for lg, level in levels.items():
                    lg.handlers[-1].setLevel(level)     # the tqdm handler keeps the level
        bar = tqdm(total=total, disable=not show, desc="NOPG", dynamic_ncols=True)
        stack.callback(bar.close)
        yield bar


def _make_optimizer(config: NOPGConfig, params: Iterable[torch.Tensor]) -> torch.optim.Optimizer:
    cls = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD,
           "rmsprop": torch.optim.RMSprop}[config.optimizer]
    return cls(params, lr=config.learning_rate)


class NOPG:
    """Nonparametric Off-Policy Policy Gradient (paper Algorithm 1).

    Parameters
    ----------
    policy : torch.nn.Module
        Deterministic policy (states -> actions) or Gaussian policy with ``mean_std``. It is moved
        to ``config.dtype`` and ``config.device``.
    config : NOPGConfig, optional
    stochastic : bool, optional
        NOPG-S when true; by default true exactly when the policy has ``mean_std``.
    optimizer : torch.optim.Optimizer, optional
        Any optimiser over ``policy.parameters()``; replaces ``config.optimizer``.

    Examples
    --------
    >>> algo = NOPG(DeterministicMLPPolicy(3, 1, action_max=2.0), NOPGConfig(gamma=0.99))
    >>> algo.fit(data, bandwidths, initial_states=s0, n_updates=1500)
    >>> algo.J_, algo.value(states)
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
        self._warm: tuple[torch.Tensor, torch.Tensor] | None = None
        self._solver_state: dict[str, torch.Tensor] = {}   # restored from a checkpoint
        self._solution: BellmanSolution | None = None

    # ------------------------------------------------------------------ set-up
    def setup(self, dataset: TransitionDataset, bandwidths: Bandwidths,
              initial_states: np.ndarray | torch.Tensor) -> NOPG:
        """Build the Bellman model for ``dataset``; called by :meth:`fit` when needed."""
        c = self.config.resolved(dataset.n)   # concrete top_k, solver, dense_max_n for this n
        if self.model_ is None:
            logger.info("n = %d: top_k=%s, solver=%s (config: top_k=%r, solver=%r)", dataset.n,
                        c.top_k, c.solver, self.config.top_k, self.config.solver)
        previous = self.model_.solver_state() if self.model_ is not None else self._solver_state
        self.model_ = NonparametricBellman(dataset, bandwidths, c.gamma,
                                           c.model_config(stochastic=self.stochastic))
        if previous:
            self.model_.load_solver_state(previous)
        self.initial_states_ = as_states(initial_states, dataset.state_dim, "initial_states")
        self._solution = None
        return self

    def _sigma_scale(self) -> float:
        c = self.config
        if c.sigma_decay_to is None or c.sigma_decay_updates is None:
            return 1.0
        frac = min(self.update_ / max(c.sigma_decay_updates - 1, 1), 1.0)
        return 1.0 + (c.sigma_decay_to - 1.0) * frac

    def _apply_sigma_scale(self) -> float:
        scale = self._sigma_scale()
        buf = getattr(self.policy, "sigma_scale", None)
        if isinstance(buf, torch.Tensor):
            buf.fill_(scale)
        return scale

    # ------------------------------------------------------------------ optimisation
    def step(self) -> dict[str, Any]:
        """One policy update: build ``eps0`` and ``P``, solve, ascend the full gradient."""
        if self.model_ is None or self.initial_states_ is None:
            raise RuntimeError("call fit() or setup() before step()")
        start = time.perf_counter()
        sigma_scale = self._apply_sigma_scale()
        sol = self.model_.evaluate(self.policy, self.initial_states_, self.generator, self._warm)
        params = [p for p in self.policy.parameters() if p.requires_grad]
        grads = surrogate_gradient(sol.surrogate(), params)
        for p, g in zip(params, grads):
            p.grad = -g  # the optimisers minimise; NOPG ascends J_hat
        grad_norm = math.sqrt(sum(float((g * g).sum()) for g in grads))
        self.optimizer.step()
        self._warm = (sol.q, sol.mu)
        self._solution = None  # the policy changed
        self.update_ += 1
        metrics = {
            "update": self.update_, "J_hat": sol.J, "support_gap": sol.support_gap,
            "grad_norm": grad_norm,
            "solver_iters_q": sol.info_q.iterations, "solver_iters_mu": sol.info_mu.iterations,
            "residual_q": sol.info_q.residual, "residual_mu": sol.info_mu.residual,
            "refined_rows": sol.refined_rows, "update_time_s": time.perf_counter() - start,
            "sigma_scale": sigma_scale,
        }
        if not math.isfinite(sol.J):
            raise FloatingPointError(f"J_hat became {sol.J} at update {self.update_}")
        logger.debug("update %(update)d J_hat %(J_hat).6f support gap %(support_gap).3f grad %(grad_norm).3e "
                     "residual %(residual_q).1e/%(residual_mu).1e time %(update_time_s).4fs", metrics)
        return metrics

    def fit(self, dataset: TransitionDataset, bandwidths: Bandwidths,
            initial_states: np.ndarray | torch.Tensor, n_updates: int, *,
            callbacks: Iterable[Callback] = (), log_path: str | Path | None = None,
            progress: bool = True) -> NOPG:
        """Run ``n_updates`` policy updates (continuing the update count after a resume).

        Parameters
        ----------
        dataset : TransitionDataset
        bandwidths : Bandwidths
        initial_states : array of shape (m, d_s)
            States whose mean value is ``J_hat``.
        n_updates : int
        callbacks : iterable of Callback
        log_path : path, optional
            CSV file receiving one row per update (appended to when it exists).
        progress : bool
            Show a tqdm progress bar with ``J_hat`` when stderr is a terminal (or in a notebook);
            console log records are routed through ``tqdm.write`` meanwhile. With stderr
            redirected to a file or pipe no bar is drawn (no redraws in the file): the log
            records (``update N: J_hat ...`` every 100 updates) report the progress.

        Returns
        -------
        self
        """
        if isinstance(n_updates, bool) or not isinstance(n_updates, int) or n_updates < 0:
            raise ValueError(f"The 'n_updates' parameter must be a non-negative int. "
                             f"Got {n_updates!r} instead.")
        schedule = self._continuation(n_updates)
        self.setup(dataset, bandwidths.scaled(schedule[0][1], schedule[0][1])
                   if schedule else bandwidths, initial_states)
        later_stages = dict(schedule[1:])
        callbacks = list(callbacks)
        writer = None
        handle = None
        if log_path is not None:
            log_path = Path(log_path)
            log_path.parent.mkdir(parents=True, exist_ok=True)
            new = not log_path.exists() or log_path.stat().st_size == 0
            handle = open(log_path, "a", newline="")
            writer = csv.DictWriter(handle, fieldnames=LOG_COLUMNS, extrasaction="ignore")
            if new:
                writer.writeheader()
        try:
            with _progress_bar(n_updates, _show_progress(progress)) as bar:
                for i in range(n_updates):
                    if i in later_stages:
                        factor = later_stages[i]
                        logger.info("update %d: bandwidths x %.3g (continuation)", self.update_,
                                    factor)
                        self.setup(dataset, bandwidths.scaled(factor, factor), initial_states)
                    metrics = self.step()
                    stop = False
                    for cb in callbacks:
                        stop |= cb(self, metrics) is False
                    self.history_.append(metrics)
                    if writer is not None:
                        writer.writerow({k: metrics.get(k, "") for k in LOG_COLUMNS})
                        handle.flush()
                    if self.update_ % 100 == 0 or self.update_ == 1:
                        logger.info("update %d: J_hat %.5f (support gap %.3f), residual %.1e, "
                                    "%.4f s/update", self.update_, metrics["J_hat"],
                                    metrics["support_gap"], metrics["residual_q"],
                                    metrics["update_time_s"])
                    bar.update(1)
                    bar.set_postfix(J_hat=f"{metrics['J_hat']:.4f}",
                                    gap=f"{metrics['support_gap']:.2f}")
                    if stop:
                        logger.info("a callback stopped fit at update %d", self.update_)
                        break
        finally:
            if handle is not None:
                handle.close()
        if self.history_:
            self._warn_support(self.solution().support_gap)
        return self

    def _continuation(self, n_updates: int) -> list[tuple[int, float]]:
        """``(update index, bandwidth factor)`` stages of the continuation (empty when off)."""
        c = self.config
        if c.continuation is None or n_updates == 0:
            return []
        length = min(n_updates, c.continuation_updates or n_updates // 2)
        stages = c.continuation_stages
        factors = np.geomspace(c.continuation, 1.0, stages)
        starts = [int(round(k * length / (stages - 1))) for k in range(stages - 1)] + [length]
        return list(zip(starts, (float(f) for f in factors)))

    def _warn_support(self, gap: float) -> None:
        if gap > self.config.support_warning:
            msg = (f"{100 * gap:.0f}% of the policy's discounted visitation lies where the data "
                   f"are thin (support gap {gap:.3f} > {self.config.support_warning}): J_hat = "
                   f"{self.solution().J:.4g} rests on the kernel model's extrapolation and is "
                   "likely over-optimistic. Consider NOPGConfig(unsupported='absorb'), more data "
                   "near the policy's states, or wider bandwidths.")
            logger.warning(msg)
            warnings.warn(msg, SupportWarning, stacklevel=3)

    @property
    def support_gap_(self) -> float:
        """Share of the current policy's discounted visitation where the data are thin."""
        return self.solution().support_gap

    # ------------------------------------------------------------------ estimates
    def solution(self) -> BellmanSolution:
        """The Bellman solution at the current policy (cached until the next update)."""
        model = self._fitted_model()
        if self._solution is None:
            self._apply_sigma_scale()
            gen = torch.Generator().manual_seed(self.config.seed)
            with torch.no_grad():
                self._solution = model.evaluate(self.policy, self.initial_states_, gen,
                                                      self._warm)
        return self._solution

    @property
    def J_(self) -> float:
        """``J_hat`` of the current policy."""
        return self.solution().J

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

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path, *, include_data: bool = True) -> Path:
        """Write a checkpoint folder: config, policy, optimiser, RNG and warm-start state.

        No pickle: JSON files, tensor-only torch files (loaded with ``weights_only=True``) and,
        with ``include_data``, the data set as ``.npz``.
        """
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        spec = self.policy.spec() if callable(getattr(self.policy, "spec", None)) else None
        meta = {
            "format_version": CHECKPOINT_FORMAT_VERSION, "nopg_version": __version__,
            "torch_version": torch.__version__, "python_version": platform.python_version(),
            "update": self.update_,
            "stochastic": self.stochastic, "policy_spec": spec,
            "bandwidths": self.model_.bandwidths.to_dict() if self.model_ else None,
            "initial_states": None if self.initial_states_ is None else self.initial_states_.tolist(),
        }
        (path / "config.json").write_text(json.dumps(self.config.to_dict(), indent=2))
        (path / "meta.json").write_text(json.dumps(meta, indent=2))
        torch.save(self.policy.state_dict(), path / "policy.pt")
        torch.save(self.optimizer.state_dict(), path / "optimizer.pt")
        torch.save(self.training_state(), path / "state.pt")
        with open(path / "history.csv", "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=LOG_COLUMNS, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(self.history_)
        if include_data and self.model_ is not None:
            self.model_.dataset.save(path / "dataset.npz")
        return path

    def training_state(self) -> dict[str, torch.Tensor]:
        """The tensors besides the policy and optimiser that an exact resume needs: the noise
        generator's state, the warm starts ``warm_q``/``warm_mu`` and the solver's state
        (``solver_*``, :meth:`NonparametricBellman.solver_state`)."""
        state = {"generator": self.generator.get_state()}
        if self._warm is not None:
            state["warm_q"], state["warm_mu"] = self._warm
        if self.model_ is not None:
            state.update({f"solver_{k}": v for k, v in self.model_.solver_state().items()})
        return state

    def load_training_state(self, state: dict[str, torch.Tensor]) -> None:
        """Restore :meth:`training_state` (the solver's part when the next model is built)."""
        self.generator.set_state(state["generator"])
        if "warm_q" in state:
            self._warm = (state["warm_q"].to(self.device), state["warm_mu"].to(self.device))
        self._solver_state = {k[7:]: v for k, v in state.items() if k.startswith("solver_")}

    @staticmethod
    def read_checkpoint_meta(path: str | Path) -> dict[str, Any]:
        """The ``meta.json`` of a checkpoint folder (update, bandwidths, initial states, ...).

        Raises
        ------
        ValueError
            If the folder is not a checkpoint or its ``format_version`` is not one this version
            of nopg reads (:data:`CHECKPOINT_FORMAT_VERSION`).
        """
        path = Path(path)
        for name in ("config.json", "meta.json", "policy.pt", "optimizer.pt", "state.pt"):
            if not (path / name).exists():
                raise ValueError(f"{path} is not a NOPG checkpoint: {name} is missing")
        meta = json.loads((path / "meta.json").read_text())
        version = meta.get("format_version")
        if version != CHECKPOINT_FORMAT_VERSION or isinstance(version, bool):
            reads = f"this nopg {__version__} reads format_version {CHECKPOINT_FORMAT_VERSION}"
            if isinstance(version, int) and not isinstance(version, bool) \
                    and version > CHECKPOINT_FORMAT_VERSION:
                raise ValueError(f"{path}: checkpoint format_version {version!r} is newer than "
                                 f"{reads} (it was written by nopg {meta.get('nopg_version')}); "
                                 "upgrade nopg to load it")
            raise ValueError(f"{path}: unknown checkpoint format_version {version!r}; {reads}")
        return meta

    @classmethod
    def load(cls, path: str | Path, policy: nn.Module | None = None, *,
             dataset: TransitionDataset | None = None, device: str | None = None) -> NOPG:
        """Restore a checkpoint written by :meth:`save`; ``fit`` then resumes exactly.

        Parameters
        ----------
        path : folder written by :meth:`save`
        policy : torch.nn.Module, optional
            Required for custom policies; built-in policies are rebuilt from their spec.
        dataset : TransitionDataset, optional
            Defaults to the data set stored in the checkpoint (if any); with it the loaded object
            can answer ``value``/``J_`` queries straight away.
        device : str, optional
            Load onto this device (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"auto"``) instead of the
            one in the checkpoint's config, e.g. ``device="cpu"`` to open a GPU checkpoint on a
            machine without CUDA; the tensors are mapped there and ``config.device`` is set to it.

        Raises
        ------
        ValueError
            If the folder is not a checkpoint, its ``format_version`` is unknown or newer than
            :data:`CHECKPOINT_FORMAT_VERSION`, or its device is not available.
        """
        path = Path(path)
        meta = cls.read_checkpoint_meta(path)
        config = NOPGConfig.from_dict(json.loads((path / "config.json").read_text()))
        saved_device = config.device
        if device is not None:
            config = dataclasses.replace(config, device=device)
        try:
            _ = config.torch_device
        except ValueError as err:
            raise ValueError(f"{err} (the checkpoint {path} was saved for device "
                             f"{saved_device!r}); pass device='cpu' to load it on the CPU") from None
        if policy is None:
            if meta.get("policy_spec") is None:
                raise ValueError("this checkpoint holds a custom policy: pass `policy=` to load it")
            policy = policy_from_spec(meta["policy_spec"])
        algo = cls(policy.to(config.torch_dtype), config, stochastic=meta["stochastic"])
        algo.policy.load_state_dict(torch.load(path / "policy.pt", map_location=algo.device,
                                               weights_only=True))
        algo.optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location=algo.device,
                                                  weights_only=True))
        algo.load_training_state(torch.load(path / "state.pt", map_location="cpu",
                                            weights_only=True))
        algo.update_ = int(meta["update"])
        with open(path / "history.csv", newline="") as fh:
            algo.history_ = [{k: _parse(v) for k, v in row.items()} for row in csv.DictReader(fh)]
        if dataset is None and (path / "dataset.npz").exists():
            dataset = TransitionDataset.load(path / "dataset.npz")
        if dataset is not None and meta.get("bandwidths") and meta.get("initial_states"):
            algo.setup(dataset, Bandwidths.from_dict(meta["bandwidths"]),
                       np.asarray(meta["initial_states"], dtype=np.float64))
        return algo


def _parse(value: str) -> Any:
    if value == "":
        return None
    try:
        number = float(value)
    except ValueError:
        return value
    return int(number) if number.is_integer() and "." not in value and "e" not in value else number
