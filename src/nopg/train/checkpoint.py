"""NOPG checkpoints: a folder of JSON files, tensor-only torch files and (optionally) the data set.

A checkpoint folder holds

- ``config.json``: the :class:`~nopg.NOPGConfig`;
- ``meta.json``: ``format_version`` (:data:`CHECKPOINT_FORMAT_VERSION`), the nopg, torch and
  Python versions, the update count, NOPG-S or NOPG-D, the policy's spec (built-in policies),
  the bandwidths and the initial states;
- ``policy.pt``, ``optimizer.pt``: state dicts; ``state.pt``: :meth:`NOPG.training_state`
  (noise generator, warm starts, solver state); all loaded with ``weights_only=True``;
- ``history.csv``: the metrics of every update so far (:data:`~nopg.train.loggers.LOG_COLUMNS`);
- ``dataset.npz``: the data set (when saved with it).

No pickle. :meth:`nopg.NOPG.save` and :meth:`nopg.NOPG.load` are the entry points; a fit resumed
from a checkpoint continues exactly as the uninterrupted one.
"""

from __future__ import annotations

import csv
import json
import platform
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from .._version import __version__
from ..bandwidth.selection import Bandwidths
from ..data.dataset import TransitionDataset
from ..policies.networks import policy_from_spec
from .config import NOPGConfig
from .loggers import LOG_COLUMNS, csv_row

if TYPE_CHECKING:
    from .algorithm import NOPG

__all__ = ["CHECKPOINT_FORMAT_VERSION", "load_checkpoint", "read_checkpoint_meta", "read_history",
           "save_checkpoint"]

CHECKPOINT_FORMAT_VERSION = 1
"""``format_version`` that :meth:`NOPG.save` writes and the only one :meth:`NOPG.load` reads."""

_FILES = ("config.json", "meta.json", "policy.pt", "optimizer.pt", "state.pt")


def save_checkpoint(algo: NOPG, path: str | Path, *, include_data: bool = True) -> Path:
    """Write ``algo``'s checkpoint folder at ``path`` (created when missing); returns ``path``."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    spec = algo.policy.spec() if callable(getattr(algo.policy, "spec", None)) else None
    model = algo.model_
    meta = {
        "format_version": CHECKPOINT_FORMAT_VERSION, "nopg_version": __version__,
        "torch_version": torch.__version__, "python_version": platform.python_version(),
        "update": algo.update_,
        "stochastic": algo.stochastic, "policy_spec": spec,
        "bandwidths": model.bandwidths.to_dict() if model else None,
        "initial_states": None if algo.initial_states_ is None else algo.initial_states_.tolist(),
    }
    (path / "config.json").write_text(json.dumps(algo.config.to_dict(), indent=2))
    (path / "meta.json").write_text(json.dumps(meta, indent=2))
    torch.save(algo.policy.state_dict(), path / "policy.pt")
    torch.save(algo.optimizer.state_dict(), path / "optimizer.pt")
    torch.save(algo.training_state(), path / "state.pt")
    with open(path / "history.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=LOG_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(csv_row(m, LOG_COLUMNS) for m in algo.history_)
    if include_data and model is not None:
        model.data.save(path / "dataset.npz")
    return path


def read_checkpoint_meta(path: str | Path) -> dict[str, Any]:
    """The ``meta.json`` of a checkpoint folder (update, bandwidths, initial states, ...).

    Raises
    ------
    ValueError
        If the folder is not a checkpoint or its ``format_version`` is not one this version of
        nopg reads (:data:`CHECKPOINT_FORMAT_VERSION`).
    """
    path = Path(path)
    for name in _FILES:
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


def _config_on_device(path: Path, device: str | None) -> NOPGConfig:
    """The checkpoint's config, moved to ``device`` when given; its device must be available."""
    config = NOPGConfig.from_dict(json.loads((path / "config.json").read_text()))
    saved_device = config.model.device
    if device is not None:
        config = config.replace(**{"model.device": device})
    try:
        _ = config.torch_device
    except ValueError as err:
        raise ValueError(f"{err} (the checkpoint {path} was saved for device "
                         f"{saved_device!r}); pass device='cpu' to load it on the CPU") from None
    return config


def load_checkpoint(cls: type[NOPG], path: str | Path, policy: nn.Module | None = None, *,
                    data: TransitionDataset | None = None,
                    device: str | None = None) -> NOPG:
    """Build a ``cls`` (``NOPG`` or a subclass) from a checkpoint folder (see :meth:`NOPG.load`)."""
    path = Path(path)
    meta = read_checkpoint_meta(path)
    config = _config_on_device(path, device)
    if policy is None:
        if meta.get("policy_spec") is None:
            raise ValueError("this checkpoint holds a custom policy: pass `policy=` to load it")
        policy = policy_from_spec(meta["policy_spec"])
    algo = cls(policy.to(config.torch_dtype), config, stochastic=meta["stochastic"])
    algo.policy.load_state_dict(torch.load(path / "policy.pt", map_location=algo.device,
                                           weights_only=True))
    algo.optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location=algo.device,
                                              weights_only=True))
    algo.load_training_state(torch.load(path / "state.pt", map_location="cpu", weights_only=True))
    algo.update_ = int(meta["update"])
    algo.history_ = read_history(path / "history.csv")
    if data is None and (path / "dataset.npz").exists():
        data = TransitionDataset.load(path / "dataset.npz")
    if data is not None and meta.get("bandwidths") and meta.get("initial_states"):
        algo.setup(data, Bandwidths.from_dict(meta["bandwidths"]),
                   np.asarray(meta["initial_states"], dtype=np.float64))
    return algo


def read_history(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a ``history.csv`` or ``log.csv`` as metrics: numbers parsed, empty cells ``None``."""
    with open(path, newline="") as fh:
        return [{k: _parse(v) for k, v in row.items()} for row in csv.DictReader(fh)]


def _parse(value: str) -> Any:
    if value == "":
        return None
    try:
        number = float(value)
    except ValueError:
        return value
    return int(number) if number.is_integer() and "." not in value and "e" not in value else number
