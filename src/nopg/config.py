"""NOPG's hyper-parameters in one frozen, validated dataclass."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import numpy as np
import torch

from .bellman import UNSUPPORTED
from .defaults import SPARSE_MIN_N, check_dense_max_n, check_top_k, resolve_settings
from .solvers import check_solver_tol

OPTIMIZERS = ("adam", "adamw", "sgd", "rmsprop")
SOLVERS = ("auto", "dense", "bicgstab")
NEIGHBORS = ("auto", "dense", "candidates", "knn")
NEIGHBOR_BACKENDS = ("auto", "kdtree", "torch")
PRECONDITIONERS = ("auto", "ilu", "none")
DTYPES = {"float64": torch.float64, "float32": torch.float32}


def _fail(name: str, requirement: str, value: Any) -> None:
    raise ValueError(f"The '{name}' parameter of NOPGConfig must be {requirement}. "
                     f"Got {value!r} instead.")


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_float(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and \
        not isinstance(value, (bool, np.bool_))


def _plain_numbers(config: Any) -> None:
    """Replace NumPy scalars in the fields of a frozen dataclass by plain Python numbers, so
    that its ``asdict`` is JSON-serialisable."""
    for f in fields(config):
        value = getattr(config, f.name)
        if isinstance(value, np.bool_):
            object.__setattr__(config, f.name, bool(value))
        elif isinstance(value, np.integer):
            object.__setattr__(config, f.name, int(value))
        elif isinstance(value, np.floating):
            object.__setattr__(config, f.name, float(value))


@dataclass(frozen=True)
class NOPGConfig:
    """Hyper-parameters of NOPG (paper appendix defaults; the model's size settings are ``auto``).

    Attributes
    ----------
    gamma : float
        Discount factor in [0, 1).
    learning_rate : float
        Step size of the optimiser.
    optimizer : {"adam", "adamw", "sgd", "rmsprop"}
        Gradient-ascent method (pass a torch optimiser to :class:`NOPG` for anything else).
    top_k : int, "auto" or None
        Entries kept per row of ``P`` (renormalised); ``None`` keeps the dense matrix (refused
        above 20 000 samples; the paper's model). ``10`` is the paper's setting for large data
        sets. ``"auto"`` (default) is ``None`` below ``sparse_min_n`` samples and ``10`` from
        there on (:meth:`resolved` gives the concrete settings for a data set size).
    sparse_min_n : int
        Number of samples from which ``top_k="auto"`` keeps 10 entries per row instead of the
        dense ``P``: the measured size at which the sparse path becomes the faster one
        (:mod:`nopg.defaults`).
    neighbors : {"auto", "dense", "candidates", "knn"}
        How the top-k entries are found: ``dense`` builds the (n, n) log-weights (the paper's
        method); ``candidates`` re-ranks cached (state, action) neighbours and re-centres the
        rows it cannot certify (exact, near-linear; the ``auto`` choice with ``top_k``); ``knn``
        queries (state, action) neighbours for every row and update (exact).
    n_candidates : int or None
        State-space candidates per row (``None``: ``max(4 top_k, 32)``); see ``nopg tune-k``.
    refine : bool
        Re-centre the rows the candidates cannot certify (exact top-k). ``False`` approximates.
    neighbor_backend : {"auto", "kdtree", "torch"}
        Neighbour search: SciPy KD-tree (CPU) or tiled torch top-k (any device).
    n_mc_policy : int
        ``N_pi``: Monte-Carlo actions per state for a stochastic policy (NOPG-S).
    n_mc_next : int or None
        ``N_phi``: Monte-Carlo next states per transition; ``None`` uses the kernel mean.
    solver : {"auto", "dense", "bicgstab"}
        Linear solver for ``q`` and ``mu``; ``auto`` is the dense LU up to ``dense_max_n``
        samples and BiCGSTAB above.
    solver_tol : float or "auto"
        Iterative-solver tolerance. ``"auto"`` (default): each solve stops once its residual
        proves the relative error of ``q`` (against its spread, max-norm) and of ``mu`` (l1)
        to be at most 1e-3, which bounds every gradient component's error by 3e-3 times the
        sum of the magnitudes of its terms and ``|J_hat - J_hat*|`` by 1e-3 ``osc(q)``
        (:func:`nopg.solvers.solve_bellman_auto`; the bounds are the solutions'
        ``info_q.error_bound`` and ``info_mu.error_bound``, logged at DEBUG level by
        ``nopg.bellman_solver``); the ILU preconditioner is rebuilt when the iterations it would save
        pay for the build. A float is the relative 2-norm residual of every solve, with the
        former rebuild rule (``1e-10``: the former default).
    solver_max_iter
        Iteration cap of every solve.
    dense_max_n : int or None
        Largest ``n`` solved by the dense LU under ``solver="auto"``. ``None`` (default): the
        measured crossover for the kind of ``P`` (a higher one for a dense ``P`` than for a
        sparse one, :func:`nopg.defaults.resolve_dense_max_n`). The earlier defaults (dense ``P``,
        dense LU up to 2000 samples) are ``top_k=None, dense_max_n=2000``.
    preconditioner : {"auto", "ilu", "none"}
        BiCGSTAB preconditioner: ``auto`` is an incomplete LU of ``I - P`` on the CPU (reused
        across updates) and none on a GPU.
    unsupported : {"extrapolate", "absorb"}
        Where the data are thin, ``extrapolate`` renormalises the kernel weights (the paper's
        model); ``absorb`` sends the unsupported mass to a pessimistic absorbing state, so the
        policy is not drawn to where the model extrapolates (:class:`NonparametricBellman`).
    absorbing_value : float or None
        Value of that absorbing state (``None``: ``min(r) / (1 - gamma)``, capped at 0 when the
        data have terminals).
    support_radius : float
        Kernel distance (in bandwidths) at which one data pair supports a query by ``1 - 1/e``;
        sets the ``support_gap`` diagnostic and the ``absorb`` model.
    support_warning : float
        ``fit`` warns when the final ``support_gap`` (share of the policy's discounted
        visitation where the data are thin) exceeds this.
    continuation : float or None
        If set, ``fit`` starts with every bandwidth multiplied by this factor and shrinks the
        factor geometrically to 1 in ``continuation_stages`` steps over ``continuation_updates``
        updates (default: half of them): wide kernels smooth the objective early, the given
        bandwidths refine the policy at the end.
    continuation_updates : int or None
    continuation_stages : int
        Number of bandwidth levels (>= 2), the last being the given bandwidths.
    sigma_decay_to : float or None
        If set, a Gaussian policy's ``sigma`` is multiplied by a factor decaying linearly from 1
        to this value over ``sigma_decay_updates`` updates (paper appendix, NOPG-S).
    sigma_decay_updates : int or None
        Length of that decay (required with ``sigma_decay_to``).
    dtype : {"float64", "float32"}
        Dtype of the policy and the kernel computations; solves are always float64.
    device : str
        ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ... or ``"auto"`` (CUDA when available).
    seed : int
        Seed of the Monte-Carlo noise generator.
    """

    gamma: float = 0.99
    learning_rate: float = 1e-2
    optimizer: str = "adam"
    top_k: int | str | None = "auto"
    sparse_min_n: int = SPARSE_MIN_N
    neighbors: str = "auto"
    n_candidates: int | None = None
    refine: bool = True
    neighbor_backend: str = "auto"
    n_mc_policy: int = 15
    n_mc_next: int | None = None
    solver: str = "auto"
    solver_tol: float | str = "auto"
    solver_max_iter: int = 1000
    dense_max_n: int | None = None
    preconditioner: str = "auto"
    unsupported: str = "extrapolate"
    absorbing_value: float | None = None
    support_radius: float = 2.0
    support_warning: float = 0.25
    continuation: float | None = None
    continuation_updates: int | None = None
    continuation_stages: int = 4
    sigma_decay_to: float | None = None
    sigma_decay_updates: int | None = None
    dtype: str = "float64"
    device: str = "cpu"
    seed: int = 0

    def __post_init__(self) -> None:
        if not _is_float(self.gamma) or not 0.0 <= self.gamma < 1.0:
            _fail("gamma", "a float in [0, 1)", self.gamma)
        if not _is_float(self.learning_rate) or not self.learning_rate > 0:
            _fail("learning_rate", "a positive float", self.learning_rate)
        if self.optimizer not in OPTIMIZERS:
            _fail("optimizer", f"one of {OPTIMIZERS}", self.optimizer)
        if self.neighbors not in NEIGHBORS:
            _fail("neighbors", f"one of {NEIGHBORS}", self.neighbors)
        if self.neighbor_backend not in NEIGHBOR_BACKENDS:
            _fail("neighbor_backend", f"one of {NEIGHBOR_BACKENDS}", self.neighbor_backend)
        if self.preconditioner not in PRECONDITIONERS:
            _fail("preconditioner", f"one of {PRECONDITIONERS}", self.preconditioner)
        if self.unsupported not in UNSUPPORTED:
            _fail("unsupported", f"one of {UNSUPPORTED}", self.unsupported)
        if self.absorbing_value is not None and (
                not _is_float(self.absorbing_value) or not np.isfinite(self.absorbing_value)):
            _fail("absorbing_value", "a finite float or None", self.absorbing_value)
        if not _is_float(self.support_radius) or not 0 < self.support_radius < np.inf:
            _fail("support_radius", "a positive float", self.support_radius)
        if not _is_float(self.support_warning) or not 0 <= self.support_warning <= 1:
            _fail("support_warning", "a float in [0, 1]", self.support_warning)
        if self.continuation is not None and (
                not _is_float(self.continuation) or not 0 < self.continuation < np.inf):
            _fail("continuation", "a positive float or None", self.continuation)
        if not _is_int(self.continuation_stages) or self.continuation_stages < 2:
            _fail("continuation_stages", "an int >= 2", self.continuation_stages)
        if not isinstance(self.refine, (bool, np.bool_)):
            _fail("refine", "a bool", self.refine)
        if self.top_k is None and self.neighbors in ("candidates", "knn"):
            _fail("neighbors", "'auto' or 'dense' when top_k is None", self.neighbors)
        if not check_top_k(self.top_k):
            _fail("top_k", "a positive int, 'auto' or None", self.top_k)
        if not check_dense_max_n(self.dense_max_n):
            _fail("dense_max_n", "a positive int or None", self.dense_max_n)
        for name in ("n_candidates", "n_mc_next", "sigma_decay_updates", "continuation_updates"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or value < 1):
                _fail(name, "a positive int or None", value)
        for name in ("n_mc_policy", "solver_max_iter", "sparse_min_n"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                _fail(name, "a positive int", value)
        if self.solver not in SOLVERS:
            _fail("solver", f"one of {SOLVERS}", self.solver)
        if not check_solver_tol(self.solver_tol):
            _fail("solver_tol", "a positive float or 'auto'", self.solver_tol)
        if self.sigma_decay_to is not None:
            if not _is_float(self.sigma_decay_to) or not 0 < self.sigma_decay_to <= 1:
                _fail("sigma_decay_to", "a float in (0, 1] or None", self.sigma_decay_to)
            if self.sigma_decay_updates is None:
                _fail("sigma_decay_updates", "set when sigma_decay_to is set", None)
        if self.dtype not in DTYPES:
            _fail("dtype", f"one of {tuple(DTYPES)}", self.dtype)
        if not isinstance(self.device, str) or not (
                self.device in ("cpu", "cuda", "auto") or self.device.startswith("cuda:")):
            _fail("device", "'cpu', 'cuda', 'cuda:<index>' or 'auto'", self.device)
        if not _is_int(self.seed):
            _fail("seed", "an int", self.seed)
        _plain_numbers(self)

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def torch_device(self) -> torch.device:
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"device {self.device!r} was requested but CUDA is not available")
        return torch.device(self.device)

    def resolved(self, n: int) -> NOPGConfig:
        """This configuration with concrete model settings for a data set of ``n`` samples.

        ``top_k`` becomes an int or ``None``, ``solver`` ``"dense"`` or ``"bicgstab"`` and
        ``dense_max_n`` the limit ``solver="auto"`` applies (rule: :mod:`nopg.defaults`);
        explicit settings are kept. Fitting with the result gives the same numbers as fitting
        with this configuration.
        """
        if not _is_int(n) or n < 1:
            raise ValueError(f"n must be a positive int. Got {n!r} instead.")
        s = resolve_settings(int(n), self.top_k, self.solver, self.dense_max_n, self.sparse_min_n,
                             self.neighbors)
        return replace(self, top_k=s.top_k, solver=s.solver, dense_max_n=s.dense_max_n)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> NOPGConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown NOPGConfig field(s) {unknown}; known fields are {sorted(known)}")
        return cls(**values)
