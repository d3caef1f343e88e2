"""Helpers shared by several experiments: settings, external data sets, sub-sampling, reset states.

A task's own settings (``config.task``, ``--set task.<name>=...``) are a frozen dataclass derived
from :class:`TaskSettings`, declared with :func:`task_settings`: one place for their names,
types and defaults. They read like a mapping too (``settings["n_samples"]``, ``settings.get``),
so code and ``config.json`` files that treat ``config.task`` as a dict keep working.
:func:`check_task_value` refuses unknown names and values unlike their default.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import os
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

import numpy as np

from ..data.dataset import TransitionDataset
from ..data.formats import load_dataset, resolve_location
from ..model.config import ModelConfig
from ..validation import suggestion

T = TypeVar("T")


def checked_replace(config: Any, changes: dict[str, Any], what: str) -> Any:
    """``dataclasses.replace(config, **changes)``; a ValueError names unknown ``what`` settings.

    For a configuration that nests the model (:func:`nests_model`), ``model.<setting>`` keys, a
    ``model`` dict of changes to its model and the former flat names of model settings are
    known too.
    """
    known = [f.name for f in dataclasses.fields(config)]
    aliases = getattr(type(config), "MODEL_ALIASES", None)
    if aliases is not None:
        known += [*aliases, *(f"model.{name}" for name in MODEL_SETTINGS)]
        if isinstance(changes.get("model"), Mapping):     # changes to this model, not the default
            changes = {**{k: v for k, v in changes.items() if k != "model"},
                       **{f"model.{k}": v for k, v in changes["model"].items()}}
    for name in changes:
        if name not in known:
            raise ValueError(f"unknown {what} setting {name!r}{suggestion(name, known)}")
    return dataclasses.replace(config, **changes)


MODEL_SETTINGS = tuple(f.name for f in dataclasses.fields(ModelConfig))
"""The names of :class:`nopg.ModelConfig`'s settings."""


def fold_model_settings(settings: dict[str, Any], model: ModelConfig, aliases: tuple[str, ...],
                        what: str) -> dict[str, Any]:
    """``settings`` with their model settings folded into one ``model``: a :class:`ModelConfig`.

    ``settings["model"]`` may be a ModelConfig (the base, else ``model``) or a dict of changes
    to the base; ``model.<name>`` keys and the names in ``aliases`` change it too.
    """
    out, changes = {}, {}
    for key, value in settings.items():
        if key.startswith("model."):
            changes[key[len("model."):]] = value
        elif key in aliases:
            changes[key] = value
        elif key == "model" and isinstance(value, Mapping):
            changes.update(value)
        elif key == "model":
            if not isinstance(value, ModelConfig):
                raise ValueError(f"The 'model' setting of {what} must be a nopg.ModelConfig or a "
                                 f"dict of its settings. Got {type(value).__name__} instead.")
            model = value
        else:
            out[key] = value
    unknown = [name for name in changes if name not in MODEL_SETTINGS]
    if unknown:
        raise ValueError(f"unknown {what} model setting {unknown[0]!r}"
                         f"{suggestion(unknown[0], list(MODEL_SETTINGS))}")
    out["model"] = dataclasses.replace(model, **changes) if changes else model
    return out


def nests_model(cls: type[T]) -> type[T]:
    """Class decorator for a frozen dataclass holding the model's settings as
    ``model: ModelConfig`` and naming its former flat copies in ``MODEL_ALIASES``.

    The constructor then also takes ``model`` as a dict of changes to the default model,
    ``model.<setting>=`` keywords (``**{"model.top_k": 10}``) and the former names (``top_k=10``),
    so configurations, ``--set`` keys and ``config.json`` files written before the model was
    nested keep working; the former names read back as properties of ``model``.
    """
    init = cls.__init__
    default = {f.name: f for f in dataclasses.fields(cls)}["model"].default_factory
    aliases: tuple[str, ...] = cls.MODEL_ALIASES

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **settings: Any) -> None:
        init(self, *args, **fold_model_settings(settings, default(), aliases, cls.__name__))

    cls.__init__ = __init__
    for name in aliases:
        setattr(cls, name, property(operator.attrgetter(f"model.{name}"),
                                    doc=f"``model.{name}``, under its former name."))
    return cls


class TaskSettings(Mapping[str, Any]):
    """Base of a task's settings: declare them with :func:`task_settings`.

    The fields read as attributes and, for code written against a dict, as a mapping
    (``settings["name"]``, ``settings.get``, iteration in field order); two settings, or settings
    and a dict, are equal when their items are.
    """

    __slots__ = ()

    def __getitem__(self, key: str) -> Any:
        if key not in self.names():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def names(self) -> tuple[str, ...]:
        """The settings' names, in declaration order."""
        return tuple(f.name for f in dataclasses.fields(self))  # type: ignore[arg-type]


def task_settings(cls: type[T]) -> type[T]:
    """Class decorator: a :class:`TaskSettings` subclass as a frozen dataclass of its fields."""
    return dataclasses.dataclass(frozen=True, eq=False)(cls)


def check_task_value(defaults: Mapping[str, Any], key: str, value: Any) -> Any:
    """Check a task setting against the task's defaults: a known name, and the default's type.

    A default of ``None`` accepts any value and ``None`` (unset) is accepted for any setting (the
    task checks it); otherwise an int default accepts ints, a float default ints and floats, a
    bool default bools, a str default strs, a list or tuple default lists.
    """
    if key not in defaults:
        known = [f"task.{name}" for name in defaults]
        hint = suggestion(f"task.{key}", known) if known else "; this task has no settings"
        raise ValueError(f"unknown task setting 'task.{key}'{hint}")
    default = defaults[key]
    if default is None or value is None:   # null: "not set", which the task checks itself
        return value
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif isinstance(default, str):
        ok = isinstance(value, str)
    elif isinstance(default, (list, tuple)):
        ok = isinstance(value, (list, tuple))
    else:
        ok = True
    if not ok:
        raise ValueError(f"task setting 'task.{key}' must be a {type(default).__name__} like its "
                         f"default {default!r}; got {value!r}")
    return value


__all__ = ["MODEL_SETTINGS", "TaskSettings", "check_task_value", "checked_replace",
           "fold_model_settings", "load_external_dataset", "nests_model", "sample_reset_states",
           "subsample", "suggestion", "task_settings"]


def load_external_dataset(spec: str | os.PathLike[str], minari_obs_keys: str | None = None
                          ) -> TransitionDataset:
    """Load a data set named by a path (``.npz``/``.hdf5``) or a Minari id from local disk.

    Uses :func:`nopg.data.formats.load_dataset`; ``minari_obs_keys`` selects the entry of Minari dict
    observations (e.g. ``"observation"`` for the point maze).
    """
    kind, _ = resolve_location(spec)
    if kind == "minari" and minari_obs_keys is not None:
        return load_dataset(spec, obs_keys=minari_obs_keys)
    return load_dataset(spec)


def subsample(data: TransitionDataset, n: int | None, seed: int) -> TransitionDataset:
    """``n`` transitions drawn uniformly without replacement (sorted), or ``data`` if ``n`` is None."""
    if n is None:
        return data
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"The 'n_samples' setting must be a positive int or null. Got {n!r}.")
    if n > data.n:
        raise ValueError(f"n_samples = {n} exceeds the {data.n} transitions available")
    if n == data.n:
        return data
    rng = np.random.default_rng([seed, 7])
    return data.subset(np.sort(rng.choice(data.n, size=int(n), replace=False)))


def sample_reset_states(env_fn: Any, m: int, seed: int) -> np.ndarray:
    """``m`` observations drawn from an environment's reset distribution (seeded once)."""
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
        raise ValueError(f"The number of initial states must be a positive int. Got {m!r}.")
    env = env_fn()
    try:
        first, _ = env.reset(seed=int(seed))
        states = [np.asarray(first, dtype=np.float64)]
        for _ in range(int(m) - 1):
            obs, _ = env.reset()
            states.append(np.asarray(obs, dtype=np.float64))
    finally:
        env.close()
    return np.stack(states)
