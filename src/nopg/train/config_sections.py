"""The sections of :class:`nopg.NOPGConfig`: the optimiser, the objective's starts, the behaviour
term and the two schedules.

Each section is a frozen, validated dataclass that holds only settings that mean something
together. The optimiser is one of two types (:class:`GradientAscent` or :class:`CMAES`), so a
learning rate cannot be given to the derivative-free search nor a population to Adam; the
schedules (:class:`Continuation`, :class:`SigmaDecay`) are ``None`` when off, so their lengths
cannot be set without them. Every section has :meth:`to_dict` and :func:`section_from_dict`
reads it back (the optimiser by its ``name``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

from ..validation import (
    check_choice,
    check_positive_float,
    check_positive_int,
    fail,
    is_float,
    is_int,
    suggestion,
)
from .search import RESTARTS

__all__ = ["GradientAscent", "CMAES", "Optimizer", "Starts", "Behaviour", "Continuation",
           "SigmaDecay", "GRADIENT_OPTIMIZERS", "OPTIMIZERS", "BEHAVIOUR_FILTERS",
           "make_optimizer"]

GRADIENT_OPTIMIZERS = ("adam", "adamw", "sgd", "rmsprop")
"""The torch optimisers :class:`GradientAscent` names."""
OPTIMIZERS = (*GRADIENT_OPTIMIZERS, "cma-es")
"""Every optimiser name ``NOPGConfig(optimizer=...)`` takes as a string."""
BEHAVIOUR_FILTERS = ("weighted", "none", "advantage")
"""Values of :attr:`Behaviour.filter`."""


class _Section:
    """``to_dict`` of a section (a frozen dataclass)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]


@dataclass(frozen=True)
class GradientAscent(_Section):
    """Gradient ascent on ``J_hat`` with a torch optimiser (pass a torch optimiser to
    :class:`nopg.NOPG` for any other).

    Attributes
    ----------
    name : {"adam", "adamw", "sgd", "rmsprop"}
        The torch optimiser.
    learning_rate : float
        Its step size (also that of the behaviour term's pretraining).
    """

    name: str = "adam"
    learning_rate: float = 1e-2

    def __post_init__(self) -> None:
        check_choice("name", self.name, GRADIENT_OPTIMIZERS, "GradientAscent")
        check_positive_float("learning_rate", self.learning_rate, "GradientAscent")


@dataclass(frozen=True)
class CMAES(_Section):
    """Derivative-free search on ``J_hat`` (:mod:`nopg.train.search`): one CMA-ES generation of
    ``population`` evaluations per update, for policies with few parameters.

    Attributes
    ----------
    sigma : float
        Initial step size in the policy's parameter units (2.0 was chosen against 0.5 on the
        inverted pendulum's seeds 0–2, with a linear policy on standardised states).
    population : int or None
        Candidates per update (``None``: ``4 + floor(3 ln d)`` for ``d`` parameters).
    patience : int or None
        Updates without a better ``J_hat`` after which the search restarts (``restart``);
        ``None``: never.
    restart : {"fresh", "ipop"}
        ``"fresh"``: the same population from a mean drawn around the start; ``"ipop"``: from its
        start with twice the population (IPOP-CMA-ES; the population grows at every restart).
    horizon : int or None
        With ``model.successors="anchored"``: steps the model's episode must last. Each
        candidate's mean rollout in the model runs this long from every initial state
        (:meth:`nopg.model.anchored.AnchoredBellman.episode_lengths`); a candidate whose model episode
        ends sooner ranks below every one that lasts, the longer-lived first, and those that last
        rank by ``J_hat``. ``None``: ``J_hat`` alone.
    """

    sigma: float = 2.0
    population: int | None = None
    patience: int | None = None
    restart: str = "fresh"
    horizon: int | None = None

    name: ClassVar[str] = "cma-es"

    def __post_init__(self) -> None:
        owner = "CMAES"
        check_positive_float("sigma", self.sigma, owner)
        if self.population is not None and (not is_int(self.population) or self.population < 2):
            fail("population", "an int >= 2 or None", self.population, owner)
        check_positive_int("patience", self.patience, owner, allow_none=True)
        check_choice("restart", self.restart, RESTARTS, owner)
        check_positive_int("horizon", self.horizon, owner, allow_none=True)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, **asdict(self)}


Optimizer = GradientAscent | CMAES
"""The optimiser section of :class:`nopg.NOPGConfig`."""


def make_optimizer(value: Any) -> Optimizer:
    """The optimiser section of ``value``: a section, a name of :data:`OPTIMIZERS` (that
    optimiser's defaults) or a dict with a ``name`` and the section's fields."""
    if isinstance(value, (GradientAscent, CMAES)):
        return value
    if isinstance(value, str):
        if value == CMAES.name:
            return CMAES()
        if value in GRADIENT_OPTIMIZERS:
            return GradientAscent(value)
    if isinstance(value, dict):
        settings = dict(value)
        name = settings.pop("name", "adam")
        if name == CMAES.name:
            return build_section(CMAES, settings, "optimizer")
        if name in GRADIENT_OPTIMIZERS:
            return build_section(GradientAscent, {"name": name, **settings}, "optimizer")
    fail("optimizer", f"a GradientAscent, a CMAES or one of {OPTIMIZERS}", value, "NOPGConfig")


@dataclass(frozen=True)
class Starts(_Section):
    """Where the objective ``J_hat`` starts its episodes besides the given initial states.

    Attributes
    ----------
    draws : int or None
        If set, ``J_hat`` is the mean return from this many starts drawn around each initial
        state, ``z + draw_scale * h_s * xi`` with ``xi`` standard normal and ``h_s`` the state
        bandwidths, drawn once per :meth:`nopg.NOPG.setup` from the seed. A policy whose success
        hangs on one exact start then scores what it scores from the starts around it.
    draw_scale : float
        Spread of the drawn starts in state bandwidths.
    data : int or None
        If set, the objective's starts also include this many of the data's states, spread over
        them by farthest-point sampling from the initial states (:mod:`nopg.train.starts`), and
        ``J_hat`` is the mean return over all the starts: the policy is improved where the data
        go, not only along its own path from the initial states.
    """

    draws: int | None = None
    draw_scale: float = 2.0
    data: int | None = None

    def __post_init__(self) -> None:
        check_positive_int("draws", self.draws, "Starts", allow_none=True)
        check_positive_float("draw_scale", self.draw_scale, "Starts")
        check_positive_int("data", self.data, "Starts", allow_none=True)


@dataclass(frozen=True)
class Behaviour(_Section):
    """The behaviour-cloning term (a policy constraint, as in TD3+BC): each update ascends
    ``J_hat / |J_hat| - weight * mean_i w_i ||(pi(s_i) - a_i) / std(a)||^2``
    (:mod:`nopg.train.behaviour`).

    Attributes
    ----------
    weight : float or "auto"
        ``0`` is the paper's objective. ``"auto"`` is 2 times the data's action predictability
        (:func:`nopg.train.behaviour.action_predictability`): 0 on exploration data (random or grid
        actions), positive on data logged by a controller or a person.
    pretrain : int
        When the term is on, the fit first runs this many Adam steps on the behaviour-cloning
        error alone, so the policy starts from the logged behaviour (``0``: none). Not run when
        a fit resumes.
    n_mc_next : int or None
        Next states per transition while the term is on, in place of ``model.n_mc_next``
        (``None``: the kernel mean): on data logged by a policy the term keeps the policy at the
        data's states, and drawn next states lie off them.
    filter : {"weighted", "none", "advantage"}
        Which samples the term clones, and how much. ``"weighted"``: every sample, weighted by
        ``exp(A_i / beta)`` (capped) with the kernel estimate of the advantage ``A_i`` of its
        logged action over the policy's and ``beta = temperature * std(q)`` (advantage-weighted
        regression). ``"none"``: equal weights. ``"advantage"``: only the samples with
        ``A_i > 0``, equal weights. The pretraining clones all samples.
    temperature : float
        ``beta`` of ``filter="weighted"`` as a fraction of the spread ``std(q)`` of the values
        over the data (> 0).
    """

    weight: float | str = "auto"
    pretrain: int = 500
    n_mc_next: int | None = None
    filter: str = "weighted"
    temperature: float = 3e-3

    def __post_init__(self) -> None:
        owner = "Behaviour"
        if self.weight != "auto" and (not is_float(self.weight)
                                      or not 0 <= self.weight < math.inf):
            fail("weight", "'auto' or a finite float >= 0", self.weight, owner)
        if not is_int(self.pretrain) or self.pretrain < 0:
            fail("pretrain", "an int >= 0", self.pretrain, owner)
        check_positive_int("n_mc_next", self.n_mc_next, owner, allow_none=True)
        check_choice("filter", self.filter, BEHAVIOUR_FILTERS, owner)
        if not is_float(self.temperature) or not 0 < self.temperature < math.inf:
            fail("temperature", "a finite float > 0", self.temperature, owner)


@dataclass(frozen=True)
class Continuation(_Section):
    """Bandwidth continuation: the fit starts with every bandwidth multiplied by ``factor`` and
    shrinks the factor geometrically to 1 in ``stages`` steps over ``updates`` updates. Wide
    kernels smooth the objective early; the given bandwidths refine the policy at the end.

    Attributes
    ----------
    factor : float
        The first stage's multiplier (> 0).
    updates : int or None
        Updates over which the factor shrinks (``None``: half of the fit's).
    stages : int
        Number of bandwidth levels (>= 2), the last being the given bandwidths.
    """

    factor: float
    updates: int | None = None
    stages: int = 4

    def __post_init__(self) -> None:
        check_positive_float("factor", self.factor, "Continuation")
        check_positive_int("updates", self.updates, "Continuation", allow_none=True)
        if not is_int(self.stages) or self.stages < 2:
            fail("stages", "an int >= 2", self.stages, "Continuation")


@dataclass(frozen=True)
class SigmaDecay(_Section):
    """A Gaussian policy's ``sigma`` multiplied by a factor decaying linearly from 1 to ``to``
    over ``updates`` updates (paper appendix, NOPG-S).

    Attributes
    ----------
    to : float
        The last factor, in (0, 1].
    updates : int
        Length of the decay.
    """

    to: float
    updates: int

    def __post_init__(self) -> None:
        if not is_float(self.to) or not 0 < self.to <= 1:
            fail("to", "a float in (0, 1]", self.to, "SigmaDecay")
        check_positive_int("updates", self.updates, "SigmaDecay")


def build_section(cls: type, settings: dict[str, Any], where: str) -> Any:
    """``cls(**settings)``, with an unknown field refused by name (``where``: the section's
    place, e.g. ``"behaviour"``)."""
    known = [f.name for f in fields(cls)]
    for key in settings:
        if key not in known:
            raise ValueError(f"unknown setting {where}.{key} of {cls.__name__}"
                             f"{suggestion(key, known)}")
    try:
        return cls(**settings)
    except TypeError as error:    # a required field missing, e.g. Continuation's factor
        raise ValueError(f"{where}: {error}") from None


SECTIONS: dict[str, type] = {"starts": Starts, "behaviour": Behaviour,
                             "continuation": Continuation, "sigma_decay": SigmaDecay}
"""The sections of :class:`nopg.NOPGConfig` besides ``optimizer`` and ``model``, by field."""


def section_from_dict(name: str, value: Any) -> Any:
    """The section ``name`` of :class:`nopg.NOPGConfig` from ``value`` (the section itself, a
    dict of its fields, or ``None`` for the schedules)."""
    if name == "optimizer":
        return make_optimizer(value)
    cls = SECTIONS[name]
    if value is None or isinstance(value, cls):
        return value
    if isinstance(value, dict):
        return build_section(cls, value, name)
    fail(name, f"a {cls.__name__} or a dict of its fields", value, "NOPGConfig")
