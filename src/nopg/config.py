"""NOPG's hyper-parameters in one frozen, validated dataclass.

The model's settings (``top_k`` to ``support_radius``, ``dtype``, ``device``) are the fields of
:class:`nopg.model_config.ModelConfig`, with its defaults and its checks;
:meth:`NOPGConfig.model_config` hands them to the model. The rest configure the optimisation.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from .model_config import (
    DTYPES,
    MODEL_DEFAULTS,
    NEIGHBOR_MODES,
    PRECONDITIONERS,
    SOLVERS,
    ModelConfig,
    TorchPlacement,
    check_model_settings,
    plain_model_settings,
    plain_numbers,
)
from .neighbors import BACKENDS
from .search import RESTARTS
from .validation import (
    check_bool,
    check_discount,
    check_positive_float,
    check_positive_int,
    fail,
    is_float,
    is_int,
)

__all__ = ["NOPGConfig", "OPTIMIZERS", "SOLVERS", "NEIGHBORS", "NEIGHBOR_BACKENDS",
           "PRECONDITIONERS", "DTYPES"]

OPTIMIZERS = ("adam", "adamw", "sgd", "rmsprop", "cma-es")
BEHAVIOUR_FILTERS = ("none", "advantage", "weighted")
"""Values of :attr:`NOPGConfig.behaviour_filter`."""
NEIGHBORS = NEIGHBOR_MODES
NEIGHBOR_BACKENDS = BACKENDS
_OWNER = "NOPGConfig"
MODEL_FIELDS = tuple(name for name in MODEL_DEFAULTS if name != "stochastic")
"""The fields :class:`NOPGConfig` shares with :class:`ModelConfig` (``stochastic`` is a property
of the policy, :class:`nopg.NOPG`'s argument)."""


@dataclass(frozen=True)
class NOPGConfig(TorchPlacement):
    """Hyper-parameters of NOPG (paper appendix defaults; the model's size settings are ``auto``).

    Attributes
    ----------
    gamma : float
        Discount factor in [0, 1).
    learning_rate : float
        Step size of the optimiser.
    optimizer : {"adam", "adamw", "sgd", "rmsprop", "cma-es"}
        Gradient-ascent method (pass a torch optimiser to :class:`NOPG` for anything else), or
        ``"cma-es"``: derivative-free search on ``J_hat`` (:mod:`nopg.search`), one CMA-ES
        generation of ``search_population`` evaluations per update, for policies with few
        parameters; ``learning_rate`` is then unused.
    search_sigma : float
        ``optimizer="cma-es"``: initial step size in the policy's parameter units (2.0 was
        chosen against 0.5 on the inverted pendulum's seeds 0–2, with a linear policy on
        standardised states: ``docs/bandwidths.md``).
    search_population : int or None
        ``optimizer="cma-es"``: candidates per update (``None``: ``4 + floor(3 ln d)`` for ``d``
        parameters).
    search_patience : int or None
        ``optimizer="cma-es"``: updates without a better ``J_hat`` after which the search
        restarts (``search_restart``); ``None``: never.
    search_restart : {"fresh", "ipop"}
        ``"fresh"``: the same population from a mean drawn around the start; ``"ipop"``: from
        its start with twice the population (IPOP-CMA-ES; the population grows at every
        restart, also after the search has converged, which ran to 256 candidates per update
        on the inverted pendulum: ``docs/bandwidths.md``) (:mod:`nopg.search`).
    search_horizon : int or None
        ``optimizer="cma-es"`` with ``successors="anchored"``: steps the model's episode must
        last. Each candidate's mean rollout in the model runs this long from every initial state
        (:meth:`nopg.anchored.AnchoredBellman.episode_lengths`); a candidate whose model episode
        ends sooner ranks below every one that lasts, the longer-lived first, and those that last
        rank by ``J_hat``. ``J_hat`` itself discounts an episode that ends after about
        ``1 / (1 - gamma)`` steps to nothing; set it to the episodes' length that matters (e.g.
        the evaluation's). ``None`` (default): ``J_hat`` alone.
    top_k : int, "auto" or None
        Entries kept per row of ``P`` (renormalised); ``None`` keeps the dense matrix (refused
        above 20 000 samples; the paper's model). ``10`` is the paper's setting for large data
        sets. ``"auto"`` (default) is ``None`` below ``sparse_min_n`` samples and ``10`` from
        there on (:meth:`resolved` gives the concrete settings for a data set size).
    sparse_min_n : int
        Number of samples from which ``top_k="auto"`` keeps 10 entries per row instead of the
        dense ``P``: the measured size at which the sparse path becomes the faster one
        (:mod:`nopg.defaults`).
    neighbors : {"auto", "dense", "candidates", "knn", "graph"}
        How the top-k entries are found: ``dense`` builds the (n, n) log-weights (the paper's
        method); ``candidates`` re-ranks cached (state, action) neighbours and re-centres the
        rows it cannot certify (exact, near-linear; the ``auto`` choice with ``top_k``); ``knn``
        queries (state, action) neighbours for every row and update (exact); ``graph`` follows
        each row's neighbours from update to update by a warm-started graph search
        (approximate, for pairs of more than 10 dimensions; its accuracy depends on the data
        and the fit's stage, see :mod:`nopg.graph_search`).
    n_candidates : int or None
        State-space candidates per row (``None``: ``max(4 top_k, 32)``); see ``nopg tune-k``.
    refine : bool
        Re-centre the rows the candidates cannot certify (exact top-k). ``False`` approximates.
    neighbor_backend : {"auto", "kdtree", "torch"}
        Neighbour search: SciPy KD-tree (on the CPU, for any data of up to 20 dimensions and for
        GPU data of up to 8) or tiled torch top-k (any device). ``auto`` chooses by the data's
        dimension and device (:class:`nopg.neighbors.NeighborIndex`).
    n_mc_policy : int
        ``N_pi``: Monte-Carlo actions per state for a stochastic policy (NOPG-S).
    n_mc_next : int, "auto" or None
        ``N_phi``: Monte-Carlo next states per transition, drawn afresh at every update;
        ``None`` uses the kernel mean (the paper's ``N_phi = 1``: faster, and ``J_hat`` is then
        deterministic). ``"auto"`` (default) is 3 below 10^5 samples and the kernel mean above.
    solver : {"auto", "dense", "bicgstab"}
        Linear solver for ``q`` and ``mu``; ``auto`` is the dense LU up to ``dense_max_n``
        samples and BiCGSTAB above.
    solver_tol : float or "auto"
        Iterative-solver tolerance. ``"auto"`` (default): each solve stops once its residual
        proves the relative error of ``q`` (against its spread, max-norm) and of ``mu`` (l1)
        to be at most ``solver_error`` (1e-3 for the kernel mean below 10^5 samples, else 1e-2),
        which bounds every gradient component's error by 3 times that times the sum of the
        magnitudes of its terms and ``|J_hat - J_hat*|`` by ``solver_error`` times ``osc(q)``
        (:func:`nopg.solvers.solve_bellman_auto`; the bounds are the solutions'
        ``info_q.error_bound`` and ``info_mu.error_bound``, logged at DEBUG level by
        ``nopg.bellman_solver``); the ILU preconditioner is rebuilt when the iterations it would save
        pay for the build. A float is the relative 2-norm residual of every solve, with the
        former rebuild rule (``1e-10``: the former default).
    solver_error : float or None
        The error target of ``solver_tol="auto"`` in (0, 1) instead of its default (``None``:
        1e-2 with drawn next states or from 10^5 samples on, 1e-3 for kernel-mean next states
        below that; :func:`nopg.bellman_solver.auto_error`). A looser target makes each update
        cheaper (fewer iterations) and every bound above proportionally wider.
    solver_max_iter
        Iteration cap of every solve.
    dense_max_n : int or None
        Largest ``n`` solved by the dense LU under ``solver="auto"``. ``None`` (default): the
        measured crossover for the kind of ``P`` (a higher one for a dense ``P`` than for a
        sparse one, :func:`nopg.defaults.resolve_dense_max_n`). The earlier defaults (dense ``P``,
        dense LU up to 2000 samples) are ``top_k=None, dense_max_n=2000``.
    preconditioner : {"auto", "ilu", "aggregation", "none"}
        BiCGSTAB preconditioner, reused across updates: ``auto`` is on the CPU an incomplete LU of
        ``I - P`` below 15 000 samples (10 000 with Monte-Carlo next states) and a two-level
        aggregation from there on, and none on a
        GPU (:func:`nopg.defaults.resolve_preconditioner`).
    solver_precision : {"mixed", "double"}
        ``"mixed"`` (default): with ``solver_tol="auto"`` on the CPU, the BiCGSTAB iterations and
        the preconditioner run in float32 while every residual that proves the error bound is
        computed in float64 (iterative refinement), so the bound holds as in ``"double"`` (all in
        float64).
    unsupported : {"extrapolate", "absorb", "penalty"}
        Where the data are thin, ``extrapolate`` renormalises the kernel weights (the paper's
        model); ``absorb`` sends the unsupported mass to a pessimistic absorbing state, so the
        policy is not drawn to where the model extrapolates (:class:`NonparametricBellman`);
        ``penalty`` keeps the paper's rows and subtracts from every query's reward its
        thinness times ``max(r) - (1 - gamma) absorbing_value``, the gap between the best
        reward and the pessimistic reward per step (a MOPO-like penalty, which unlike
        ``absorb`` leaves the model's successors where they are).
    absorbing_value : float or None
        Value of that absorbing state (``None``: ``min(r) / (1 - gamma)``, capped at 0 when the
        data have terminals); it also sets the ``penalty`` model's scale.
    support_radius : float
        Kernel distance (in bandwidths) at which one data pair supports a query by ``1 - 1/e``;
        sets the ``support_gap`` diagnostic and the ``absorb`` and ``penalty`` models.
    successors : {"kernel", "local-linear", "anchored"}
        ``kernel`` (default): a query moves to its neighbours' recorded next states (the paper's
        model). ``local-linear``: each neighbour's successor and reward move with the query's
        state and action offsets by a local-linear fit of the data, the value there interpolated
        from the data's next states (:mod:`nopg.local_linear`), so the model can value states
        the data only pass near; with ``unsupported="penalty"`` the successors off the data pay
        the penalty. Slower per update (``top_k x 8`` entries per row). ``anchored``:
        ``local-linear`` with the value also interpolated from anchors on the model's own rollout
        of the policy from the initial states (:mod:`nopg.anchored`), so the model follows a
        policy that stays where the data only passed; ``J_hat`` is then best ascended by
        ``optimizer="cma-es"``.
    anchor_horizon : int or "auto"
        Steps of the anchors' rollout (``successors="anchored"``); ``"auto"`` (default):
        ``ceil(4 / (1 - gamma))``, 400 for ``gamma = 0.99``.
    state_bounds : [low, high] or None
        Hard limits of the state (``None`` where a dimension has none), e.g. a gymnasium
        observation space's; the moved successors (``local-linear``, ``anchored``) are clipped to
        them (:class:`~nopg.model_config.ModelConfig`). The experiments fill them from their
        environment's observation space.
    terminal_bounds : [low, high] or None
        Where the episode ends (``None`` where a dimension has none), e.g. a cart's track limit:
        a moved successor (``local-linear``, ``anchored``) beyond them is terminal
        (:class:`~nopg.model_config.ModelConfig`). The experiments fill them from their task's
        known limits (``Task.terminal_bounds``).
    state_circles : "auto", None or list of [i, k]
        Pairs of state coordinates on a circle (an angle observed as ``(cos, sin)``), onto which
        the moved successors are put back after every step (:mod:`nopg.circles`); ``"auto"``
        (default) finds them in the data.
    start_draws : int or None
        If set, ``J_hat`` is the mean return from this many starts drawn around each initial
        state, ``z + start_draw_scale * h_s * xi`` with ``xi`` standard normal and ``h_s`` the
        state bandwidths (the initial states' kernel density), drawn once per :meth:`NOPG.setup`
        from ``seed``. A policy whose success hangs on one exact start (a swing-up caught only at
        the one speed the model predicts) then scores what it scores from the starts around it.
        ``None`` (default): the initial states as given.
    start_draw_scale : float
        Spread of the drawn starts in state bandwidths (``start_draws``).
    data_starts : int or None
        If set, the objective's starts also include this many of the data's states, spread over
        them by farthest-point sampling from the initial states (:mod:`nopg.starts`), and
        ``J_hat`` is the mean return over all the starts. The policy is then improved where the
        data go, not only along its own path from the initial states (a swing-up's catch at the
        top is learnt before the swing gets there). ``None`` (default): the initial states (and
        their ``start_draws``) alone.
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
    behaviour_weight : float or "auto"
        Weight of a behaviour-cloning term that keeps the policy's (mean) action near the data's
        actions at the data's states (a policy constraint, as in TD3+BC): each update ascends
        ``J_hat / |J_hat| - behaviour_weight * mean_i ||(pi(s_i) - a_i) / std(a)||^2``. ``0`` is
        the paper's objective. ``"auto"`` (default) is 2 times the data's action predictability
        (:func:`nopg.behaviour.action_predictability`), 0 on exploration data (random or grid
        actions), positive on data logged by a controller or a person.
    behaviour_pretrain : int
        When the behaviour term is on, ``fit`` first runs this many Adam steps (at
        ``learning_rate``) on the behaviour-cloning error alone, so the policy starts from the
        logged behaviour (``0``: no pretraining). Not run when a fit resumes.
    behaviour_n_mc_next : int or None
        Next states per transition while the behaviour term is on, in place of ``n_mc_next``
        (which applies when it is off). ``None`` (default): the kernel mean. On data logged by a
        policy the behaviour term keeps the policy at the data's states, and drawn next states
        lie off them (``docs/bandwidths.md``).
    behaviour_filter : {"weighted", "none", "advantage"}
        Which samples the behaviour term clones, and how much. ``"weighted"`` (default): every
        sample, weighted by ``exp(A_i / beta)`` (capped at 20) with the advantage
        ``A_i = Q(s_i, a_i) - V(s_i)`` of its logged action over the policy's (both kernel
        estimates from the update's ``q``) and ``beta = behaviour_temperature * std(q)``
        (advantage-weighted regression): where the model ranks the logged actions the better ones
        dominate; where it barely tells them apart the weights are nearly equal and the term
        clones all samples. ``"none"``: all samples, equal weights. ``"advantage"``: only the
        samples with ``A_i > 0`` (a binary filter, as in critic-regularised regression), equal
        weights (none kept: no term). The pretraining clones all samples.
    behaviour_temperature : float
        ``beta`` of ``behaviour_filter="weighted"`` as a fraction of the spread ``std(q)`` of the
        values over the data (> 0; a shift or a scale of the rewards leaves the weights as
        they are).
    sigma_decay_to : float or None
        If set, a Gaussian policy's ``sigma`` is multiplied by a factor decaying linearly from 1
        to this value over ``sigma_decay_updates`` updates (paper appendix, NOPG-S).
    sigma_decay_updates : int or None
        Length of that decay (required with ``sigma_decay_to``).
    dtype : {"float64", "float32"}
        Dtype of the policy and the kernel computations; solves are float64 (with float32
        iterations under ``solver_precision="mixed"``).
    device : str
        ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ... or ``"auto"`` (CUDA when available).
    seed : int
        Seed of the Monte-Carlo noise generator.
    reuse_memory : bool
        On Linux with glibc, let the process keep large freed blocks for reuse instead of
        returning them to the system and faulting them in again at every update
        (:mod:`nopg.allocator`; process-wide, applied at the first ``setup``). The process then
        keeps its peak memory. ``False`` leaves ``malloc`` as it is.
    """

    gamma: float = 0.99
    learning_rate: float = 1e-2
    optimizer: str = "adam"
    search_sigma: float = 2.0
    search_population: int | None = None
    search_patience: int | None = None
    search_restart: str = "fresh"
    search_horizon: int | None = None
    top_k: int | str | None = MODEL_DEFAULTS["top_k"]
    sparse_min_n: int = MODEL_DEFAULTS["sparse_min_n"]
    neighbors: str = MODEL_DEFAULTS["neighbors"]
    n_candidates: int | None = MODEL_DEFAULTS["n_candidates"]
    refine: bool = MODEL_DEFAULTS["refine"]
    neighbor_backend: str = MODEL_DEFAULTS["neighbor_backend"]
    n_mc_policy: int = MODEL_DEFAULTS["n_mc_policy"]
    n_mc_next: int | str | None = MODEL_DEFAULTS["n_mc_next"]
    solver: str = MODEL_DEFAULTS["solver"]
    solver_tol: float | str = MODEL_DEFAULTS["solver_tol"]
    solver_error: float | None = MODEL_DEFAULTS["solver_error"]
    solver_max_iter: int = MODEL_DEFAULTS["solver_max_iter"]
    dense_max_n: int | None = MODEL_DEFAULTS["dense_max_n"]
    preconditioner: str = MODEL_DEFAULTS["preconditioner"]
    solver_precision: str = MODEL_DEFAULTS["solver_precision"]
    unsupported: str = MODEL_DEFAULTS["unsupported"]
    absorbing_value: float | None = MODEL_DEFAULTS["absorbing_value"]
    support_radius: float = MODEL_DEFAULTS["support_radius"]
    successors: str = MODEL_DEFAULTS["successors"]
    anchor_horizon: int | str = MODEL_DEFAULTS["anchor_horizon"]
    state_bounds: list[list[float | None]] | None = MODEL_DEFAULTS["state_bounds"]
    terminal_bounds: list[list[float | None]] | None = MODEL_DEFAULTS["terminal_bounds"]
    state_circles: str | list[list[int]] | None = MODEL_DEFAULTS["state_circles"]
    start_draws: int | None = None
    start_draw_scale: float = 2.0
    data_starts: int | None = None
    support_warning: float = 0.25
    continuation: float | None = None
    continuation_updates: int | None = None
    continuation_stages: int = 4
    behaviour_weight: float | str = "auto"
    behaviour_pretrain: int = 500
    behaviour_n_mc_next: int | None = None
    behaviour_filter: str = "weighted"
    behaviour_temperature: float = 3e-3
    sigma_decay_to: float | None = None
    sigma_decay_updates: int | None = None
    dtype: str = MODEL_DEFAULTS["dtype"]
    device: str = MODEL_DEFAULTS["device"]
    seed: int = 0
    reuse_memory: bool = True

    def __post_init__(self) -> None:
        check_discount("gamma", self.gamma, _OWNER)
        check_positive_float("learning_rate", self.learning_rate, _OWNER)
        if self.optimizer not in OPTIMIZERS:
            fail("optimizer", f"one of {OPTIMIZERS}", self.optimizer, _OWNER)
        check_positive_float("search_sigma", self.search_sigma, _OWNER)
        if self.search_population is not None and (not is_int(self.search_population)
                                                   or self.search_population < 2):
            fail("search_population", "an int >= 2 or None", self.search_population, _OWNER)
        check_positive_int("search_patience", self.search_patience, _OWNER, allow_none=True)
        if self.search_restart not in RESTARTS:
            fail("search_restart", f"one of {RESTARTS}", self.search_restart, _OWNER)
        check_positive_int("search_horizon", self.search_horizon, _OWNER, allow_none=True)
        if self.search_horizon is not None and (self.optimizer != "cma-es"
                                                or self.successors != "anchored"):
            fail("search_horizon", "None unless optimizer='cma-es' and successors='anchored' "
                 "(it ranks the search's candidates by their model episode)",
                 self.search_horizon, _OWNER)
        check_positive_int("start_draws", self.start_draws, _OWNER, allow_none=True)
        check_positive_float("start_draw_scale", self.start_draw_scale, _OWNER)
        check_positive_int("data_starts", self.data_starts, _OWNER, allow_none=True)
        check_model_settings({name: getattr(self, name) for name in MODEL_FIELDS}, _OWNER)
        plain_model_settings(self)
        self._check_schedules()
        if not is_int(self.seed):
            fail("seed", "an int", self.seed, _OWNER)
        check_bool("reuse_memory", self.reuse_memory, _OWNER)
        plain_numbers(self)

    def _check_schedules(self) -> None:
        """The support warning, the bandwidth continuation and the sigma decay."""
        if not is_float(self.support_warning) or not 0 <= self.support_warning <= 1:
            fail("support_warning", "a float in [0, 1]", self.support_warning, _OWNER)
        if self.continuation is not None:
            check_positive_float("continuation", self.continuation, _OWNER)
        if self.behaviour_weight != "auto" and (not is_float(self.behaviour_weight)
                                                or not 0 <= self.behaviour_weight < math.inf):
            fail("behaviour_weight", "'auto' or a finite float >= 0", self.behaviour_weight, _OWNER)
        if not is_int(self.continuation_stages) or self.continuation_stages < 2:
            fail("continuation_stages", "an int >= 2", self.continuation_stages, _OWNER)
        if not is_int(self.behaviour_pretrain) or self.behaviour_pretrain < 0:
            fail("behaviour_pretrain", "an int >= 0", self.behaviour_pretrain, _OWNER)
        check_positive_int("behaviour_n_mc_next", self.behaviour_n_mc_next, _OWNER, allow_none=True)
        if self.behaviour_filter not in BEHAVIOUR_FILTERS:
            fail("behaviour_filter", f"one of {BEHAVIOUR_FILTERS}", self.behaviour_filter, _OWNER)
        if not is_float(self.behaviour_temperature) or not 0 < self.behaviour_temperature < math.inf:
            fail("behaviour_temperature", "a finite float > 0", self.behaviour_temperature, _OWNER)
        for name in ("sigma_decay_updates", "continuation_updates"):
            check_positive_int(name, getattr(self, name), _OWNER, allow_none=True)
        if self.sigma_decay_to is not None:
            if not is_float(self.sigma_decay_to) or not 0 < self.sigma_decay_to <= 1:
                fail("sigma_decay_to", "a float in (0, 1] or None", self.sigma_decay_to, _OWNER)
            if self.sigma_decay_updates is None:
                fail("sigma_decay_updates", "set when sigma_decay_to is set", None, _OWNER)

    def model_config(self, stochastic: bool = False) -> ModelConfig:
        """The model's settings (:class:`ModelConfig`) from this configuration's fields.

        ``stochastic`` (NOPG-S) comes from the policy, not from the configuration.
        """
        return ModelConfig(**{name: getattr(self, name) for name in MODEL_FIELDS},
                           stochastic=stochastic)

    def resolved(self, n: int, behaviour_term: bool = False) -> NOPGConfig:
        """This configuration with concrete model settings for a data set of ``n`` samples.

        ``top_k`` becomes an int or ``None``, ``solver`` ``"dense"`` or ``"bicgstab"``,
        ``n_mc_next`` an int or ``None`` (``behaviour_n_mc_next`` when ``behaviour_term``, i.e.
        the fit's behaviour weight is positive) and ``dense_max_n`` the limit ``solver="auto"``
        applies (rule: :mod:`nopg.defaults`, :meth:`ModelConfig.resolved`); explicit settings
        are kept. Fitting with the result gives the same numbers as fitting with this
        configuration.
        """
        m = self.model_config().resolved(n)
        return replace(self, top_k=m.top_k, solver=m.solver, dense_max_n=m.dense_max_n,
                       n_mc_next=self.behaviour_n_mc_next if behaviour_term else m.n_mc_next)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> NOPGConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown NOPGConfig field(s) {unknown}; known fields are {sorted(known)}")
        return cls(**values)
