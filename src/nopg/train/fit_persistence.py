"""Checkpoints of a :class:`~nopg.train.algorithm.NOPG` fit: :class:`FitPersistence` holds ``save``,
``load`` and the training state an exact resume needs; ``NOPG`` inherits them. The folders
themselves are written and read by :mod:`nopg.train.checkpoint`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..data.dataset import TransitionDataset
from ..model.bellman import NonparametricBellman
from .checkpoint import (
    CHECKPOINT_FORMAT_VERSION,
    load_checkpoint,
    read_checkpoint_meta,
    save_checkpoint,
)

if TYPE_CHECKING:
    from .algorithm import NOPG

__all__ = ["CHECKPOINT_FORMAT_VERSION", "FitPersistence"]


class FitPersistence:
    """Saving and loading :class:`~nopg.train.algorithm.NOPG` fits (a base class of ``NOPG``, which
    sets the attributes below)."""

    device: torch.device
    generator: torch.Generator
    model_: NonparametricBellman | None
    _warm: tuple[torch.Tensor, torch.Tensor] | None
    _solver_state: dict[str, torch.Tensor]

    def save(self, path: str | Path, *, include_data: bool = True) -> Path:
        """Write a checkpoint folder: config, policy, optimiser, RNG and warm-start state.

        No pickle: JSON files, tensor-only torch files (loaded with ``weights_only=True``) and,
        with ``include_data``, the data set as ``.npz`` (the layout: :mod:`nopg.train.checkpoint`).
        """
        return save_checkpoint(self, path, include_data=include_data)

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
        return read_checkpoint_meta(path)

    @classmethod
    def load(cls, path: str | Path, policy: nn.Module | None = None, *,
             data: TransitionDataset | None = None, device: str | None = None) -> NOPG:
        """Restore a checkpoint written by :meth:`save`; ``fit`` then resumes exactly.

        Parameters
        ----------
        path : folder written by :meth:`save`
        policy : torch.nn.Module, optional
            Required for custom policies; built-in policies are rebuilt from their spec.
        data : TransitionDataset, optional
            Defaults to the data set stored in the checkpoint (if any); with it the loaded object
            can answer ``value``/``J_hat`` queries straight away.
        device : str, optional
            Load onto this device (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"auto"``) instead of the
            one in the checkpoint's config, e.g. ``device="cpu"`` to open a GPU checkpoint on a
            machine without CUDA; the tensors are mapped there and ``config.model.device`` is set to it.

        Raises
        ------
        ValueError
            If the folder is not a checkpoint, its ``format_version`` is unknown or newer than
            :data:`CHECKPOINT_FORMAT_VERSION`, or its device is not available.
        """
        return load_checkpoint(cls, path, policy, data=data, device=device)
