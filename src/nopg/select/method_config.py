"""The settings of the method :class:`nopg.AutoNOPG` runs: bandwidths, policy, fits and selection.

:class:`MethodConfig` holds what decides the policy a data set gives, and nothing about a task's
evaluation: the number of updates, NOPG-D or NOPG-S, the bandwidth rule and its factors, the
policy network, restarts, the recipes (:mod:`nopg.select.recipes`) and the time the later ones may
spend (``budget``), the judged snapshots (:mod:`nopg.select.snapshots`), and NOPG's own settings as a
nested :class:`nopg.NOPGConfig`. Its defaults are those of ``nopg fit``. The experiments' configuration
(:class:`nopg.experiments.ExperimentConfig`) extends it with seeds, evaluation and the task's
settings, so a benchmark run and a user's fit share every field and default here.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..bandwidth.selection import ACTION_EFFECT_MAX, METHODS, check_max_action_effect
from ..train.config import NOPGConfig
from ..validation import suggestion
from .policy_selection import RULES
from .recipes import BUDGET, check_recipes

__all__ = ["MethodConfig"]


def _positive_int(name: str, value: Any, none_ok: bool = False) -> None:
    if none_ok and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"The '{name}' parameter must be a positive int"
                         f"{' or None' if none_ok else ''}. Got {value!r} instead.")


@dataclass(frozen=True)
class MethodConfig:
    """Settings of the default method (module docstring); every field has the default of
    ``nopg fit``."""

    n_updates: int = 1000                     # policy updates per fit
    stochastic: bool = False                  # NOPG-S (Gaussian policy) instead of NOPG-D
    bandwidth_method: str = "auto"            # auto | knn | silverman | scott | cv
    state_factor: float | tuple[float, ...] = 1.0   # per-dimension multipliers of the rule
    action_factor: float | tuple[float, ...] = 1.0
    max_action_effect: float | None = ACTION_EFFECT_MAX   # auto's action guard (None: off)
    hidden: tuple[int, ...] = (50,)           # policy MLP hidden widths (ReLU)
    sigma_max: float = 1.0                    # NOPG-S: sigma = sigma_max * sigmoid(g)
    normalize_states: bool = False            # the policy sees states standardised by the data
    restarts: int = 1                         # fits from other initialisations; best J_hat
    restart_updates: int | None = None        # updates per restart before choosing (None: all)
    recipes: tuple[str, ...] = ("auto",)      # fits per seed (nopg.select.recipes; "auto": by the data)
    snapshot_every: int | None = 100          # judged policy snapshots every N updates (None: off)
    snapshot_from: float = 0.5                # ... from this share of n_updates on
    budget: float | None = BUDGET             # CPU s after the plain fit / its (None: no limit)
    judge_rule: str = "sampled"               # the judge compares drawn paths | mean rollouts
    judge_particles: int = 8                  # paths drawn per initial state (sampled: >= 2)
    nopg: NOPGConfig = field(default_factory=NOPGConfig)

    KIND: ClassVar[str] = "method"            # the word unknown settings are named with

    def __post_init__(self) -> None:
        for name in ("n_updates", "restarts"):
            _positive_int(name, getattr(self, name))
        _positive_int("restart_updates", self.restart_updates, none_ok=True)
        _positive_int("snapshot_every", self.snapshot_every, none_ok=True)
        share = self.snapshot_from
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
            raise ValueError(f"The 'snapshot_from' parameter must be a number in [0, 1]. "
                             f"Got {share!r} instead.")
        budget = self.budget
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, float))
                                   or not math.isfinite(budget) or budget < 0):
            raise ValueError(f"The 'budget' parameter must be a finite number >= 0 (what follows "
                             f"the plain fit, in units of its time) or None (no limit). "
                             f"Got {budget!r} instead.")
        if self.judge_rule not in RULES:
            raise ValueError(f"The 'judge_rule' parameter must be one of {', '.join(RULES)}. "
                             f"Got {self.judge_rule!r} instead.")
        n = self.judge_particles
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"The 'judge_particles' parameter must be an int >= 0. Got {n!r} instead.")
        if self.judge_rule == "sampled" and n < 2:
            raise ValueError(f"judge_rule='sampled' compares drawn paths: 'judge_particles' must be "
                             f">= 2 (their standard error needs two). Got {n!r} instead.")
        check_recipes(self.recipes)
        if len(self.recipes) > 1 and self.restarts > 1:
            raise ValueError(f"'recipes' ({len(self.recipes)}) and 'restarts' ({self.restarts}) "
                             "both choose among fits: set one of them")
        check_max_action_effect(self.max_action_effect)
        if self.bandwidth_method not in METHODS:
            raise ValueError(f"The 'bandwidth_method' parameter must be one of {', '.join(METHODS)}. "
                             f"Got {self.bandwidth_method!r} instead.")
        if not isinstance(self.nopg, NOPGConfig):
            raise ValueError(f"The 'nopg' parameter must be a NOPGConfig. "
                             f"Got {type(self.nopg).__name__} instead.")

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["nopg"] = self.nopg.to_dict()
        return out

    def setting_names(self) -> list[str]:
        """Every name :meth:`replace` takes (``nopg.<path>`` for NOPG's own)."""
        top = [f.name for f in dataclasses.fields(self) if f.name != "nopg"]
        return top + [f"nopg.{name}" for name in self.nopg.setting_names()]

    def replace(self, **changes: Any) -> Any:
        """A copy with top-level fields or NOPG's settings by path (``nopg.model.top_k``,
        ``nopg.optimizer``, or a ``nopg`` dict of paths: :meth:`nopg.NOPGConfig.replace`)
        replaced; an unknown name is refused with the closest known one."""
        top: dict[str, Any] = {}
        nopg_changes: dict[str, Any] = {}
        fields = {f.name for f in dataclasses.fields(self)}
        for key, value in changes.items():
            if key.startswith("nopg."):
                nopg_changes[key[5:]] = value
            elif key == "nopg" and isinstance(value, dict):
                nopg_changes.update(value)
            elif key in fields:
                top[key] = tuple(value) if isinstance(value, list) else value
            else:
                raise ValueError(f"unknown {self.KIND} setting {key!r}"
                                 f"{suggestion(key, self.setting_names())}")
        if nopg_changes:
            top["nopg"] = top.get("nopg", self.nopg).with_settings(nopg_changes, prefix="nopg.")
        return dataclasses.replace(self, **top)
