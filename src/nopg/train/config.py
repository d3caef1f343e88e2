"""NOPG's hyper-parameters: one frozen, validated dataclass of ten fields and its sections.

:class:`NOPGConfig` holds the discount, the optimiser (:class:`~nopg.train.config_sections.GradientAscent`
or :class:`~nopg.train.config_sections.CMAES`), the Bellman model's settings
(:class:`~nopg.model.config.ModelConfig`, with dtype and device), the objective's starts, the
behaviour term, the two schedules (``None`` when off), the support warning, the seed and the
allocator switch. A setting is reached by its path, ``"model.top_k"`` or
``"optimizer.learning_rate"`` (:meth:`NOPGConfig.replace`, ``nopg fit --set nopg.model.top_k=10``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

import torch

from ..model.config import (
    DTYPES,
    NEIGHBOR_MODES,
    PRECONDITIONERS,
    SOLVERS,
    ModelConfig,
    plain_numbers,
)
from ..model.neighbors import BACKENDS
from ..validation import check_bool, check_discount, fail, is_float, is_int, suggestion
from .config_sections import (
    CMAES,
    OPTIMIZERS,
    SECTIONS,
    Behaviour,
    Continuation,
    GradientAscent,
    Optimizer,
    SigmaDecay,
    Starts,
    build_section,
    make_optimizer,
    section_from_dict,
)

__all__ = ["NOPGConfig", "OPTIMIZERS", "SOLVERS", "NEIGHBORS", "NEIGHBOR_BACKENDS",
           "PRECONDITIONERS", "DTYPES"]

NEIGHBORS = NEIGHBOR_MODES
NEIGHBOR_BACKENDS = BACKENDS
_OWNER = "NOPGConfig"


@dataclass(frozen=True)
class NOPGConfig:
    """Hyper-parameters of NOPG (paper appendix defaults; the model's size settings are ``auto``).

    Attributes
    ----------
    gamma : float
        Discount factor in [0, 1).
    optimizer : GradientAscent, CMAES or str
        How ``J_hat`` is ascended: a torch optimiser (:class:`~nopg.train.config_sections.GradientAscent`,
        default Adam at 1e-2) or derivative-free search
        (:class:`~nopg.train.config_sections.CMAES`). A name (``"adam"``, ``"sgd"``, ``"cma-es"``, ...)
        stands for that optimiser's defaults.
    model : ModelConfig
        The Bellman model: sparsification and neighbour search, Monte-Carlo counts, linear
        solver, support model, successors, task bounds, dtype and device
        (:class:`~nopg.model.config.ModelConfig`; its ``stochastic`` comes from the policy, so it
        is left ``False`` here).
    starts : Starts
        Starts of the objective besides the initial states (:class:`~nopg.train.config_sections.Starts`).
    behaviour : Behaviour
        The behaviour-cloning term (:class:`~nopg.train.config_sections.Behaviour`; its default weight
        ``"auto"`` reads the data's action predictability).
    continuation : Continuation or None
        Bandwidth continuation (:class:`~nopg.train.config_sections.Continuation`); ``None``: off.
    sigma_decay : SigmaDecay or None
        Decay of a Gaussian policy's ``sigma`` (:class:`~nopg.train.config_sections.SigmaDecay`);
        ``None``: off.
    support_warning : float
        ``fit`` warns when the final ``support_gap`` (share of the policy's discounted
        visitation where the data are thin) exceeds this.
    seed : int
        Seed of the Monte-Carlo noise generator.
    reuse_memory : bool
        On Linux with glibc, let the process keep large freed blocks for reuse instead of
        returning them to the system and faulting them in again at every update
        (:mod:`nopg.train.allocator`; process-wide, applied at the first ``setup``).
    """

    gamma: float = 0.99
    optimizer: Optimizer = field(default_factory=GradientAscent)
    model: ModelConfig = field(default_factory=ModelConfig)
    starts: Starts = field(default_factory=Starts)
    behaviour: Behaviour = field(default_factory=Behaviour)
    continuation: Continuation | None = None
    sigma_decay: SigmaDecay | None = None
    support_warning: float = 0.25
    seed: int = 0
    reuse_memory: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "optimizer", make_optimizer(self.optimizer))
        if isinstance(self.model, dict):
            object.__setattr__(self, "model", build_section(ModelConfig, self.model, "model"))
        if not isinstance(self.model, ModelConfig):
            fail("model", "a ModelConfig or a dict of its fields", self.model, _OWNER)
        for name in SECTIONS:
            object.__setattr__(self, name, section_from_dict(name, getattr(self, name)))
        for name in ("optimizer", *SECTIONS):
            if getattr(self, name) is not None:
                plain_numbers(getattr(self, name))
        check_discount("gamma", self.gamma, _OWNER)
        if self.model.stochastic:
            fail("model.stochastic", "False (NOPG-S or NOPG-D is the policy's: "
                 "NOPG(policy, config, stochastic=True))", True, _OWNER)
        if (isinstance(self.optimizer, CMAES) and self.optimizer.horizon is not None
                and self.model.successors != "anchored"):
            fail("optimizer.horizon", "None unless model.successors='anchored' (it ranks the "
                 "search's candidates by their model episode)", self.optimizer.horizon, _OWNER)
        if not is_float(self.support_warning) or not 0 <= self.support_warning <= 1:
            fail("support_warning", "a float in [0, 1]", self.support_warning, _OWNER)
        if not is_int(self.seed):
            fail("seed", "an int", self.seed, _OWNER)
        object.__setattr__(self, "seed", int(self.seed))
        check_bool("reuse_memory", self.reuse_memory, _OWNER)

    @property
    def torch_dtype(self) -> torch.dtype:
        return self.model.torch_dtype

    @property
    def torch_device(self) -> torch.device:
        return self.model.torch_device

    @property
    def pretrain_learning_rate(self) -> float:
        """Step size of the behaviour term's pretraining: the gradient optimiser's, or
        :class:`~nopg.train.config_sections.GradientAscent`'s default with CMA-ES."""
        if isinstance(self.optimizer, GradientAscent):
            return self.optimizer.learning_rate
        return GradientAscent().learning_rate

    def model_config(self, stochastic: bool = False) -> ModelConfig:
        """The model's settings with ``stochastic`` (NOPG-S) from the policy."""
        return replace(self.model, stochastic=stochastic)

    def resolved(self, n: int, behaviour_term: bool = False) -> NOPGConfig:
        """This configuration with concrete model settings for a data set of ``n`` samples.

        ``model.top_k`` becomes an int or ``None``, ``model.solver`` ``"dense"`` or
        ``"bicgstab"``, ``model.n_mc_next`` an int or ``None`` (``behaviour.n_mc_next`` when
        ``behaviour_term``, i.e. the fit's behaviour weight is positive) and
        ``model.dense_max_n`` the limit ``solver="auto"`` applies
        (:meth:`ModelConfig.resolved`); explicit settings are kept. Fitting with the result gives
        the same numbers as fitting with this configuration.
        """
        m = self.model.resolved(n)
        if behaviour_term:
            m = replace(m, n_mc_next=self.behaviour.n_mc_next)
        return replace(self, model=m)

    def to_dict(self) -> dict[str, Any]:
        """Nested plain values (the optimiser with its ``name``), the form of
        :meth:`from_dict` and of JSON."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = value.to_dict() if hasattr(value, "to_dict") else value
        return out

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> NOPGConfig:
        """The configuration of :meth:`to_dict`'s form; an unknown field is refused by name."""
        known = [f.name for f in fields(cls)]
        for key in values:
            if key not in known:
                raise ValueError(f"unknown NOPGConfig field {key!r}"
                                 f"{suggestion(key, cls().setting_names())}")
        return cls(**values)

    def setting_names(self, prefix: str = "") -> list[str]:
        """Every path :meth:`replace` takes (the current optimiser's fields), after ``prefix``."""
        names: list[str] = []
        for f in fields(self):
            value = getattr(self, f.name)
            names.append(f.name)
            section = SECTIONS.get(f.name)
            if f.name == "model":
                names += [f"model.{m.name}" for m in fields(ModelConfig) if m.name != "stochastic"]
            elif f.name == "optimizer":
                names += [f"optimizer.{o.name}" for o in fields(value) if o.name != "name"]
            elif section is not None:
                names += [f"{f.name}.{s.name}" for s in fields(section)]
        return [prefix + name for name in names]

    def replace(self, **changes: Any) -> NOPGConfig:
        """A copy with settings replaced by their paths: a field (``gamma=0.9``,
        ``optimizer="cma-es"``, ``continuation={"factor": 3.0}``, ``continuation=None``) or a
        section's field (``**{"model.top_k": 10, "optimizer.patience": 20}``). Whole sections
        are replaced before their fields; an unknown path is refused with the closest one."""
        return self.with_settings(changes)

    def with_settings(self, changes: Mapping[str, Any], prefix: str = "") -> NOPGConfig:
        """:meth:`replace` with the paths in a mapping; ``prefix`` (e.g. ``"nopg."``) is how the
        caller names this configuration in its error messages."""
        top = {k: v for k, v in changes.items() if "." not in k}
        nested = {k: v for k, v in changes.items() if "." in k}
        known = [f.name for f in fields(self)]
        for key in top:
            if key not in known:
                raise ValueError(f"unknown NOPG setting {prefix + key!r}"
                                 f"{suggestion(prefix + key, self.setting_names(prefix))}")
        out = replace(self, **top) if top else self
        by_section: dict[str, dict[str, Any]] = {}
        for path, value in nested.items():
            section, _, name = path.partition(".")
            if section not in known or section in ("gamma", "support_warning", "seed",
                                                   "reuse_memory") or "." in name:
                raise ValueError(f"unknown NOPG setting {prefix + path!r}"
                                 f"{suggestion(prefix + path, out.setting_names(prefix))}")
            by_section.setdefault(section, {})[name] = value
        sections: dict[str, Any] = {}
        for section, settings in by_section.items():
            current = getattr(out, section)
            base = current.to_dict() if current is not None else {}
            if section == "optimizer":
                extra = [k for k in settings if k not in base]
                if extra:
                    path = f"{prefix}optimizer.{extra[0]}"
                    raise ValueError(f"unknown NOPG setting {path!r} of the {base['name']!r} "
                                     f"optimiser{suggestion(path, out.setting_names(prefix))}")
            sections[section] = {**base, **settings}
        return replace(out, **sections) if sections else out
