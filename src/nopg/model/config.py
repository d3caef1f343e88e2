"""The settings of the nonparametric Bellman model in one frozen, validated dataclass.

:class:`ModelConfig` holds everything that shapes :class:`nopg.NonparametricBellman` besides the
data, the bandwidths and ``gamma``: the sparsification and its neighbour search, the
Monte-Carlo counts, the linear solver, the support model, dtype and device. Its checks
(:func:`check_model_settings`) are the only ones: :class:`nopg.NOPGConfig`, whose fields of the
same names take their defaults from here, runs them on its own fields, and
:meth:`nopg.NOPGConfig.model_config` builds the model's configuration.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import torch

from ..linalg.solvers import SOLVER_PRECISIONS, check_solver_error, check_solver_tol
from ..validation import (
    check_bool,
    check_choice,
    check_finite_float,
    check_positive_float,
    check_positive_int,
    fail,
    is_float,
    is_int,
)
from .circles import check_state_circles, plain_circles
from .defaults import (
    SPARSE_MIN_N,
    SPARSE_NEIGHBORS,
    check_auto_count,
    check_dense_max_n,
    resolve_n_mc_next,
    resolve_settings,
)
from .neighbors import BACKENDS

NEIGHBOR_MODES = ("auto", "dense", "candidates", "knn", "graph", "pool")
SOLVERS = ("auto", "dense", "bicgstab")
PRECONDITIONERS = ("auto", "ilu", "aggregation", "none")
UNSUPPORTED = ("extrapolate", "absorb", "penalty")
SUCCESSORS = ("kernel", "local-linear", "anchored")
DTYPES = {"float64": torch.float64, "float32": torch.float32}


class TorchPlacement:
    """``torch_dtype`` and ``torch_device`` of a configuration's ``dtype`` and ``device`` fields."""

    dtype: str
    device: str

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def torch_device(self) -> torch.device:
        return torch_device(self.device)


@dataclass(frozen=True)
class ModelConfig(TorchPlacement):
    """Settings of :class:`nopg.NonparametricBellman` (the ``auto`` size rules: :mod:`nopg.model.defaults`).

    Attributes
    ----------
    top_k : int, "auto" or None
        Entries kept per row of ``P`` (renormalised); ``None`` keeps the dense matrix (refused
        above 20 000 samples; the paper's model). ``"auto"``: ``None`` below ``sparse_min_n``
        samples and ``10`` from there on, at every ``n`` when the successors move
        (``successors`` other than ``"kernel"``).
    sparse_min_n : int
        Number of samples from which ``top_k="auto"`` keeps 10 entries per row.
    neighbors : {"auto", "dense", "candidates", "knn", "graph", "pool"}
        How the top-k entries are found (:mod:`nopg.model.responsibilities`); ``auto`` is ``dense``
        without ``top_k``, ``pool`` with it for pairs of 11 or more dimensions on the CPU, and
        ``candidates`` otherwise, switching (from 50 000 samples on) to
        ``knn`` for a few updates whenever the policy moved so far that most rows had to be
        re-centred (:func:`nopg.model.defaults.resolve_neighbors`). ``graph`` (never chosen by
        ``auto``) finds the rows of ``P`` and ``eps0`` by a warm-started graph search
        (:mod:`nopg.model.graph_search`): approximate, for high-dimensional pairs. ``pool``
        answers them from fixed pools of nearest data states, certified
        for any action, with an exact query where a pool cannot certify a pair
        (:mod:`nopg.model.state_pools`): exact, for high-dimensional pairs.
    n_candidates : int or None
        Candidate neighbours kept per query (``None``: ``max(4 top_k, 32)``); with
        ``neighbors="pool"`` the first pool size, which rows grow from where needed
        (``None``: 64, :data:`nopg.model.state_pools.DEFAULT_POOL`).
    refine : bool
        Re-centre the rows the candidates cannot certify (exact top-k). ``False`` approximates.
    neighbor_backend : {"auto", "kdtree", "torch"}
        Neighbour search: SciPy KD-tree (on the CPU, for any data of up to 20 dimensions and for
        GPU data of up to 8) or tiled torch top-k (any device). ``auto`` chooses by the data's
        dimension and device (:class:`nopg.model.neighbors.NeighborIndex`).
    n_mc_policy : int
        ``N_pi``: Monte-Carlo actions per state for a stochastic policy.
    n_mc_next : int, "auto" or None
        ``N_phi``: Monte-Carlo next states per transition, drawn afresh around each data next
        state (normal, the next-state bandwidths) at every update; ``None`` uses the kernel mean
        (the paper's ``N_phi = 1``). ``"auto"`` is 3 below 10^5 samples and the kernel mean from
        there on (:func:`nopg.model.defaults.resolve_n_mc_next`).
    stochastic : bool
        Integrate over the policy's Gaussian (NOPG-S) instead of using its mean (NOPG-D).
    solver : {"auto", "dense", "bicgstab"}
        Linear solver for ``q`` and ``mu``; ``auto`` is the dense LU up to ``dense_max_n``
        samples and BiCGSTAB above.
    solver_tol : float or "auto"
        BiCGSTAB relative tolerance (2-norm residual), or ``"auto"``: as accurate as the gradient
        needs, with a proven error bound (:func:`nopg.linalg.solvers.solve_bellman_auto`).
    solver_error : float or None
        The error target of ``solver_tol="auto"``, in (0, 1): the proven bound on the relative
        errors of ``q`` and ``mu``. ``None`` (default): 1e-2 with drawn next states or from 10^5
        samples on, 1e-3 for kernel-mean next states below that
        (:func:`nopg.model.bellman_solver.auto_error`).
    solver_max_iter : int
        Iteration cap of every solve.
    dense_max_n : int or None
        Largest ``n`` solved by the dense LU under ``solver="auto"``; ``None``: the measured
        crossover for the kind of ``P`` (:func:`nopg.model.defaults.resolve_dense_max_n`).
    preconditioner : {"auto", "ilu", "aggregation", "none"}
        BiCGSTAB preconditioner, reused across updates (:mod:`nopg.model.bellman_solver`): ``auto`` is
        on the CPU an incomplete LU of ``I - P`` below 15 000 samples (10 000 with Monte-Carlo
        next states) and a two-level aggregation from there on, and none on a GPU
        (:func:`nopg.model.defaults.resolve_preconditioner`).
    solver_precision : {"mixed", "double"}
        ``"mixed"``: with ``solver_tol="auto"`` on the CPU, the BiCGSTAB iterations and the
        preconditioner run in float32 and every residual that proves the error bound in float64
        (iterative refinement, :class:`nopg.linalg.solvers.LowPrecision`); ``"double"``: all in float64.
    unsupported : {"extrapolate", "absorb", "penalty"}
        Where the data are thin, ``extrapolate`` renormalises the kernel weights (the paper's
        model); ``absorb`` sends the unsupported mass to a pessimistic absorbing state;
        ``penalty`` keeps the paper's rows and charges every query its thinness times
        ``max(r) - (1 - gamma) absorbing_value`` (a MOPO-like reward penalty).
    absorbing_value : float or None
        Value of that absorbing state (``None``: ``min(r) / (1 - gamma)``, capped at 0 when the
        data have terminals); it also sets the ``penalty`` model's scale.
    support_radius : float
        Distance, in bandwidths, at which one data pair leaves the thinness at ``1/e``.
    successors : {"kernel", "local-linear", "anchored"}
        ``kernel``: a query moves to its neighbours' recorded next states (the paper's model);
        ``local-linear``: each neighbour's successor and reward move with the query's state and
        action offsets by a local-linear fit of the data, and the value there is interpolated
        from the data's next states (:mod:`nopg.model.local_linear`; needs ``top_k``; with
        ``unsupported="penalty"`` the successors off the data pay the penalty).
        ``anchored``: ``local-linear`` with the value also interpolated from anchors on the
        model's own rollout of the policy from the initial states (:mod:`nopg.model.anchored`).
    anchor_horizon : int or "auto"
        Steps of that rollout (``successors="anchored"``); ``"auto"``: ``ceil(4 / (1 - gamma))``.
    state_bounds : [low, high] or None
        Hard limits of the state the system cannot leave (``d_s`` floats each, ``None`` where a
        dimension has none), such as a gymnasium observation space's bounds. The moved
        successors (``local-linear``, ``anchored``) are clipped to them as well as to the data's
        widened box (:mod:`nopg.model.local_linear`); the kernel model does not use them.
    terminal_bounds : [low, high] or None
        Where the episode ends (``d_s`` floats each, ``None`` where a dimension has none), such
        as a cart's track limit: a moved successor (``local-linear``, ``anchored``) outside
        them is terminal, no value flows on from it, and an anchor outside them ends its
        rollout's episode. The clipping box reaches out to them so that the successors can
        cross them (:mod:`nopg.model.local_linear`). The kernel model does not use them.
    state_circles : "auto", None or list of [i, k]
        Pairs of state coordinates that lie on a circle (an angle observed as ``(cos, sin)``).
        The moved successors (``local-linear``, ``anchored``) and the anchored rollout are put
        back on each circle after every step (:mod:`nopg.model.circles`); ``"auto"`` (default) finds
        the pairs in the data, ``None`` turns this off. The kernel model does not use it.
    dtype : {"float64", "float32"}
        Dtype of the kernel computations (a ``torch.dtype`` is accepted); solves are float64
        (``solver_precision``).
    device : str
        ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ... or ``"auto"`` (CUDA when available); a
        ``torch.device`` is accepted.
    """

    top_k: int | str | None = "auto"
    sparse_min_n: int = SPARSE_MIN_N
    neighbors: str = "auto"
    n_candidates: int | None = None
    refine: bool = True
    neighbor_backend: str = "auto"
    n_mc_policy: int = 15
    n_mc_next: int | str | None = "auto"
    stochastic: bool = False
    solver: str = "auto"
    solver_tol: float | str = "auto"
    solver_error: float | None = None
    solver_max_iter: int = 1000
    dense_max_n: int | None = None
    preconditioner: str = "auto"
    solver_precision: str = "mixed"
    unsupported: str = "extrapolate"
    absorbing_value: float | None = None
    support_radius: float = 2.0
    successors: str = "kernel"
    anchor_horizon: int | str = "auto"
    state_bounds: list[list[float | None]] | None = None
    terminal_bounds: list[list[float | None]] | None = None
    state_circles: str | list[list[int]] | None = "auto"
    dtype: str = "float64"
    device: str = "cpu"

    def __post_init__(self) -> None:
        if isinstance(self.dtype, torch.dtype):
            object.__setattr__(self, "dtype", str(self.dtype).removeprefix("torch."))
        if isinstance(self.device, torch.device):
            object.__setattr__(self, "device", str(self.device))
        check_model_settings({f.name: getattr(self, f.name) for f in fields(self)})
        plain_model_settings(self)
        plain_numbers(self)

    def to_dict(self) -> dict[str, Any]:
        """Every field by name (plain values: the form of JSON)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def resolved(self, n: int) -> ModelConfig:
        """This configuration with ``top_k``, ``solver``, ``dense_max_n`` and ``n_mc_next`` made
        concrete for a data set of ``n`` samples (the rules of :mod:`nopg.model.defaults`; explicit
        settings kept). With ``successors="anchored"`` a ``solver="auto"`` is kept: the systems
        are ``n`` plus the anchors, decided at each solve."""
        if not is_int(n) or n < 1:
            raise ValueError(f"n must be a positive int. Got {n!r} instead.")
        # Moved successors are built from each row's top-k neighbours, so ``auto`` keeps top-k
        # rows at every n when the successors move (on small data sets too).
        sparse_min_n = 1 if self.successors != "kernel" else self.sparse_min_n
        s = resolve_settings(int(n), self.top_k, self.solver, self.dense_max_n, sparse_min_n,
                             self.neighbors)
        # The anchored model's systems grow by its anchors, so its solver="auto" stays and is
        # decided at each solve by the system's size (BellmanSolver.dense).
        solver = self.solver if self.successors == "anchored" else s.solver
        return replace(self, top_k=s.top_k, solver=solver, dense_max_n=s.dense_max_n,
                       n_mc_next=resolve_n_mc_next(self.n_mc_next, int(n)))


MODEL_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(ModelConfig)}
"""The defaults of :class:`ModelConfig` by field name (also those of :class:`nopg.NOPGConfig`)."""

KEYWORD_DEFAULTS: dict[str, Any] = {"top_k": None, "n_mc_policy": 10, "n_mc_next": None,
                                    "solver_tol": 1e-10, "dense_max_n": 2000}
"""The defaults of :class:`nopg.NonparametricBellman`'s keyword settings (used without a
``config``, as by :func:`nopg.policy_gradient`) where they differ from :class:`ModelConfig`'s.

The difference is deliberate. :class:`ModelConfig`'s defaults are those of a fit
(:class:`nopg.NOPGConfig`): the ``auto`` size rules and solves as accurate as the gradient
needs, ``N_pi = 15`` (the paper's NOPG-S setting). A model built from keywords is the estimator
itself, the reference the analyses and the tests compare against: the paper's dense ``P``
(``top_k=None``), solves to a 1e-10 residual (``J_hat`` and its gradient exact to round-off),
the dense LU up to 2000 samples, kernel-mean next states and ``N_pi = 10``, the model's
setting before the configurations existed. Taking the fit's defaults here would change every
estimate made this way (the gradient analysis, the trust-region experiment,
``neighbor_report``'s reference).
"""


def keyword_config(config: ModelConfig | None = None, **settings: Any) -> ModelConfig:
    """The configuration of ``NonparametricBellman(data, bandwidths, gamma, config, **settings)``:
    ``config`` with ``settings`` replaced, or :data:`KEYWORD_DEFAULTS` with them (and
    :class:`ModelConfig`'s defaults for the rest); ``n_mc_policy=None`` means its default."""
    if config is not None and not isinstance(config, ModelConfig):
        raise ValueError(f"config must be a nopg.ModelConfig. Got {type(config).__name__} instead.")
    if "n_mc_policy" in settings and settings["n_mc_policy"] is None:
        settings = {**settings, "n_mc_policy": KEYWORD_DEFAULTS["n_mc_policy"]}
    if config is None:
        return ModelConfig(**{**KEYWORD_DEFAULTS, **settings})
    return replace(config, **settings) if settings else config


def check_model_settings(values: Mapping[str, Any], owner: str | None = None) -> None:
    """Validate the model settings in ``values`` (any subset of :class:`ModelConfig`'s fields).

    ``owner`` names the configuration in the messages (:mod:`nopg.validation`).
    """
    v = {**MODEL_DEFAULTS, **values}
    _check_sparsity(v, owner)
    for name in ("n_mc_policy", "solver_max_iter", "sparse_min_n"):
        check_positive_int(name, v[name], owner)
    if not check_auto_count(v["n_mc_next"]):
        fail("n_mc_next", "a positive int, 'auto' or None", v["n_mc_next"], owner)
    check_bool("stochastic", v["stochastic"], owner)
    check_choice("solver", v["solver"], SOLVERS, owner)
    if not check_solver_tol(v["solver_tol"]):
        fail("solver_tol", "a positive float or 'auto'", v["solver_tol"], owner)
    if not check_solver_error(v["solver_error"]):
        fail("solver_error", "a float in (0, 1) or None", v["solver_error"], owner)
    if not check_dense_max_n(v["dense_max_n"]):
        fail("dense_max_n", "a positive int or None", v["dense_max_n"], owner)
    check_choice("preconditioner", v["preconditioner"], PRECONDITIONERS, owner)
    check_choice("solver_precision", v["solver_precision"], SOLVER_PRECISIONS, owner)
    check_choice("unsupported", v["unsupported"], UNSUPPORTED, owner)
    check_finite_float("absorbing_value", v["absorbing_value"], owner, allow_none=True)
    check_positive_float("support_radius", v["support_radius"], owner)
    check_choice("successors", v["successors"], SUCCESSORS, owner)
    if v["successors"] != "kernel" and v["unsupported"] == "absorb":
        fail("unsupported", f"'extrapolate' or 'penalty' with successors={v['successors']!r}",
             v["unsupported"], owner)
    if v["anchor_horizon"] != "auto" and (not is_int(v["anchor_horizon"])
                                          or v["anchor_horizon"] < 1):
        fail("anchor_horizon", "a positive int or 'auto'", v["anchor_horizon"], owner)
    check_state_bounds(v["state_bounds"], owner)
    check_state_bounds(v["terminal_bounds"], owner, "terminal_bounds")
    check_state_circles(v["state_circles"], owner)
    check_choice("dtype", v["dtype"], tuple(DTYPES), owner)
    device = v["device"]
    if not isinstance(device, str) or not (device in ("cpu", "cuda", "auto")
                                           or device.startswith("cuda:")):
        fail("device", "'cpu', 'cuda', 'cuda:<index>' or 'auto'", device, owner)


def plain_model_settings(config: Any) -> None:
    """Store a frozen configuration's ``state_bounds``, ``terminal_bounds`` and
    ``state_circles`` in the form that survives JSON (:class:`ModelConfig` and
    :class:`nopg.NOPGConfig` alike)."""
    object.__setattr__(config, "state_bounds", plain_bounds(config.state_bounds))
    object.__setattr__(config, "terminal_bounds", plain_bounds(config.terminal_bounds))
    object.__setattr__(config, "state_circles", plain_circles(config.state_circles))


def plain_bounds(bounds: Any) -> list[list[float | None]] | None:
    """``state_bounds`` (or ``terminal_bounds``) as two lists of floats (``None`` for an
    infinite or missing bound), the form that survives JSON."""
    if bounds is None:
        return None
    return [[None if b is None or math.isinf(float(b)) else float(b) for b in side]
            for side in bounds]


def check_state_bounds(bounds: Any, owner: str | None = None, name: str = "state_bounds"
                       ) -> None:
    """``state_bounds`` (or the setting ``name`` of the same form): ``None`` or ``[low, high]``,
    two sequences of one length of numbers (``None`` or an infinity where there is no bound) with
    ``low < high``."""
    if bounds is None:
        return
    what = "None or [low, high]: two equal-length lists of numbers or None, low < high"
    try:
        low, high = (list(side) for side in bounds)
    except (TypeError, ValueError):
        fail(name, what, bounds, owner)
    if len(low) != len(high) or not low:
        fail(name, what, bounds, owner)
    for lo, hi in zip(low, high):
        for b in (lo, hi):
            if b is not None and (not is_float(b) or math.isnan(float(b))):
                fail(name, what, bounds, owner)
        if lo is not None and hi is not None and not float(lo) < float(hi):
            fail(name, what, bounds, owner)


def _check_sparsity(v: Mapping[str, Any], owner: str | None) -> None:
    """``top_k`` and the neighbour search."""
    if not check_auto_count(v["top_k"]):
        fail("top_k", "a positive int, 'auto' or None", v["top_k"], owner)
    check_choice("neighbors", v["neighbors"], NEIGHBOR_MODES, owner)
    if v["top_k"] is None and v["neighbors"] in SPARSE_NEIGHBORS:
        fail("neighbors", f"'auto' or 'dense' when top_k is None (neighbors={v['neighbors']!r} "
             "needs top_k, the entries kept per row)", v["neighbors"], owner)
    check_positive_int("n_candidates", v["n_candidates"], owner, allow_none=True)
    check_bool("refine", v["refine"], owner)
    check_choice("neighbor_backend", v["neighbor_backend"], BACKENDS, owner)


def torch_device(device: str) -> torch.device:
    """The torch device of a configured ``device`` (``"auto"``: CUDA when available)."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} was requested but CUDA is not available")
    return torch.device(device)


def plain_numbers(config: Any) -> None:
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
