"""Export a trained policy for deployment: TorchScript (``.pt``) or ONNX (``.onnx``).

The exported model maps a batch of states ``(batch, d_s)`` to actions ``(batch, d_a)``; the
batch size is free. A Gaussian policy (one with ``mean_std``) is exported as its mean action,
the action NOPG evaluates, so the file is deterministic. The policy is copied to the CPU in its
own floating dtype (or ``dtype``) before export; the original module is left untouched.

Every export is written to a temporary file beside the target, loaded back (``torch.jit.load``
or an ``onnxruntime.InferenceSession``) and, with ``verify``, compared with the torch module on
sample states; only a file that passes replaces the target. Both files carry a small JSON
description (nopg version, policy spec, dimensions, dtype): TorchScript as the extra file
``nopg.json``, ONNX as the model metadata entry ``nopg``.

ONNX needs the optional packages ``onnx`` and ``onnxruntime`` (``pip install 'nopg[export]'``).
With ``onnxscript`` installed as well, torch's ``torch.export``-based ONNX exporter is used,
otherwise the legacy TorchScript-based one.
"""

from __future__ import annotations

import copy
import importlib.util
import inspect
import json
import logging
import os
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .._version import __version__
from ..data.dimensions import StateSelect
from ..policies.networks import is_stochastic, mean_actions

__all__ = ["FORMATS", "ExportVerificationError", "export_policy", "load_exported_policy"]

FORMATS = ("torchscript", "onnx")
_SUFFIXES = {".pt": "torchscript", ".pth": "torchscript", ".ts": "torchscript", ".onnx": "onnx"}
_ONNX_EXPORTERS = ("auto", "dynamo", "legacy")
_META_KEY = "nopg"


class ExportVerificationError(ValueError):
    """The exported model's actions differ from the policy's beyond the tolerance."""


class _ActionModule(nn.Module):
    """The policy's action: ``mean_std(s)[0]`` for a Gaussian policy, else ``policy(s)``."""

    def __init__(self, policy: nn.Module) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        return mean_actions(self.policy, states)


@contextmanager
def _quiet() -> Iterator[None]:
    """Silence torch's deprecation notices for TorchScript/legacy ONNX and exporter log noise."""
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "torch.export", "torch._export",
                                                    "onnxscript", "onnx_ir")]
    levels = [lg.level for lg in loggers]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", message=".*(legacy|TorchScript|training mode|treespec).*")
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for lg, level in zip(loggers, levels):
                lg.setLevel(level)


# ----------------------------------------------------------------------------- checks
def resolve_format(path: Path, format: str | None) -> str:
    """``format`` checked, or taken from the suffix of ``path`` (``.onnx``, ``.pt``/``.pth``)."""
    if format is None:
        if path.suffix.lower() not in _SUFFIXES:
            raise ValueError(f"cannot tell the export format from {path.name!r}: use a .pt or "
                             f".onnx file name or give the format ({', '.join(FORMATS)})")
        return _SUFFIXES[path.suffix.lower()]
    if format not in FORMATS:
        raise ValueError(f"unknown export format {format!r}; choose one of {', '.join(FORMATS)}")
    return format


def check_target(path: str | os.PathLike[str], overwrite: bool) -> Path:
    """The output file: its folder must exist, and it must not exist unless ``overwrite``."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise ValueError(f"{path} is a folder; give a file name such as {path / 'policy.pt'}")
    if not path.parent.is_dir():
        raise ValueError(f"cannot write {path}: the folder {path.parent} does not exist")
    if path.exists() and not overwrite:
        raise ValueError(f"{path} already exists; pass overwrite=True (nopg export --overwrite) "
                         "to replace it")
    return path


def _policy_dtype(policy: nn.Module) -> torch.dtype:
    for tensor in (*policy.parameters(), *policy.buffers()):
        if tensor.is_floating_point():
            return tensor.dtype
    return torch.get_default_dtype()


def _state_dim(policy: nn.Module) -> int:
    """``d_s`` from the policy's spec, its gains, or its first linear layer."""
    spec = policy.spec() if callable(getattr(policy, "spec", None)) else {}
    kwargs = spec.get("kwargs", {})
    if "state_dim" in kwargs:
        return int(kwargs["state_dim"])
    if "theta" in kwargs:
        return len(kwargs["theta"])
    for module in policy.modules():
        if isinstance(module, nn.Linear):
            return int(module.in_features)
    raise ValueError(f"cannot tell the state dimension of {type(policy).__name__}: pass "
                     "example_states of shape (batch, state_dim)")


def _sample_states(policy: nn.Module, example_states: np.ndarray | torch.Tensor | None,
                   n_random: int = 16, seed: int = 0) -> np.ndarray:
    """``example_states`` (when given) followed by standard-normal states, float64 (m, d_s)."""
    d_s = _state_dim(policy) if example_states is None else None
    parts = []
    if example_states is not None:
        ex = (example_states.detach().cpu().double().numpy()
              if isinstance(example_states, torch.Tensor)
              else np.array(example_states, dtype=np.float64))
        ex = ex.reshape(-1, ex.shape[-1]) if ex.ndim else ex.reshape(1, 1)
        if ex.shape[0] == 0 or not np.all(np.isfinite(ex)):
            raise ValueError("example_states must hold at least one finite state (batch, state_dim)")
        parts.append(ex)
        d_s = ex.shape[1]
    parts.append(np.random.default_rng(seed).standard_normal((n_random, d_s)))
    return np.concatenate(parts)


def _metadata(policy: nn.Module, state_dim: int, action_dim: int, dtype: torch.dtype) -> str:
    spec = policy.spec() if callable(getattr(policy, "spec", None)) else None
    return json.dumps({
        "nopg_version": __version__, "policy_spec": spec, "policy_type": type(policy).__name__,
        "state_dim": state_dim, "action_dim": action_dim, "dtype": str(dtype).replace("torch.", ""),
        "action": "mean" if is_stochastic(policy) else "deterministic",
        "input": "states (batch, state_dim)", "output": "actions (batch, action_dim)",
    })


# ----------------------------------------------------------------------------- writers
def _write_torchscript(module: nn.Module, example: torch.Tensor, path: Path, meta: str) -> None:
    with _quiet():
        traced = torch.jit.trace(module, (example,), check_trace=False)
        torch.jit.save(traced, str(path), _extra_files={"nopg.json": meta})


def _import_onnx() -> tuple[Any, Any]:
    try:
        import onnx
        import onnxruntime
    except ImportError as err:
        raise ImportError(f"ONNX export needs the packages onnx and onnxruntime ({err}); install "
                          "them with: pip install 'nopg[export]'") from None
    return onnx, onnxruntime


def _write_onnx(module: nn.Module, example: torch.Tensor, path: Path, meta: str,
                exporter: str) -> None:
    onnx, _ = _import_onnx()
    dynamo = exporter == "dynamo" or (exporter == "auto"
                                      and importlib.util.find_spec("onnxscript") is not None)
    kwargs: dict[str, Any] = {"input_names": ["states"], "output_names": ["actions"]}
    if dynamo:
        kwargs.update(dynamo=True, external_data=False, verbose=False,
                      dynamic_shapes=({0: torch.export.Dim("batch")},))
    else:
        kwargs["dynamic_axes"] = {"states": {0: "batch"}, "actions": {0: "batch"}}
        if "dynamo" in inspect.signature(torch.onnx.export).parameters:
            kwargs["dynamo"] = False            # torch >= 2.5 defaults to the dynamo exporter
    with _quiet():
        torch.onnx.export(module, (example,), str(path), **kwargs)
    model = onnx.load(str(path))
    onnx.helper.set_model_props(model, {_META_KEY: meta})
    onnx.save(model, str(path))


# ----------------------------------------------------------------------------- loading
def _torchscript_runner(path: Path) -> tuple[Callable[[np.ndarray], np.ndarray], dict[str, Any]]:
    extra = {"nopg.json": ""}
    with _quiet():
        module = torch.jit.load(str(path), map_location="cpu", _extra_files=extra)
    meta = json.loads(extra["nopg.json"] or "{}")
    dtype = getattr(torch, meta.get("dtype", "float64"))

    def run(states: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return module(torch.tensor(np.asarray(states, dtype=np.float64), dtype=dtype)).double().numpy()

    return run, meta


def _onnx_runner(path: Path) -> tuple[Callable[[np.ndarray], np.ndarray], dict[str, Any]]:
    _, ort = _import_onnx()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    meta = json.loads(session.get_modelmeta().custom_metadata_map.get(_META_KEY, "{}"))
    feed = session.get_inputs()[0]
    np_dtype = np.float32 if feed.type == "tensor(float)" else np.float64

    def run(states: np.ndarray) -> np.ndarray:
        out = session.run(None, {feed.name: np.asarray(states, dtype=np_dtype)})[0]
        return np.asarray(out, dtype=np.float64)

    return run, meta


def load_exported_policy(path: str | os.PathLike[str], format: str | None = None
                         ) -> tuple[Callable[[np.ndarray], np.ndarray], dict[str, Any]]:
    """Load an exported policy as a numpy function ``states (batch, d_s) -> actions (batch, d_a)``.

    Parameters
    ----------
    path : path of a file written by :func:`export_policy`
    format : {"torchscript", "onnx"}, optional
        Default: from the file name (``.pt``/``.pth``/``.ts`` or ``.onnx``).

    Returns
    -------
    (callable, dict)
        The policy function (float64 output) and the file's nopg metadata (``{}`` if none).
    """
    path = Path(path).expanduser()
    fmt = resolve_format(path, format)
    if not path.is_file():
        raise ValueError(f"{path} does not exist")
    return (_torchscript_runner if fmt == "torchscript" else _onnx_runner)(path)


# ----------------------------------------------------------------------------- export
def _verify(run: Callable[[np.ndarray], np.ndarray], module: nn.Module, states: np.ndarray,
            dtype: torch.dtype, rtol: float, atol: float, fmt: str) -> None:
    """Compare the exported actions with the module's on ``states`` and on one single state."""
    for batch in (states, states[:1]):
        with torch.no_grad():
            expected = module(torch.as_tensor(batch, dtype=dtype)).double().numpy()
        got = run(batch)
        if got.shape != expected.shape:
            raise ExportVerificationError(
                f"the exported {fmt} model returns actions of shape {got.shape} for states of "
                f"shape {batch.shape}; the policy returns {expected.shape}")
        if not np.allclose(got, expected, rtol=rtol, atol=atol):
            diff = float(np.max(np.abs(got - expected)))
            raise ExportVerificationError(
                f"the exported {fmt} model's actions differ from the policy's by up to {diff:.3g} "
                f"(rtol={rtol:g}, atol={atol:g}); the file was not written")


def export_policy(policy: nn.Module, path: str | os.PathLike[str], format: str | None = None, *,
                  example_states: np.ndarray | torch.Tensor | None = None, verify: bool = True,
                  overwrite: bool = False, dtype: torch.dtype | None = None,
                  rtol: float = 1e-5, atol: float = 1e-6, onnx_exporter: str = "auto") -> Path:
    """Export ``policy`` (states -> actions; a Gaussian policy's mean) as TorchScript or ONNX.

    Parameters
    ----------
    policy : torch.nn.Module
        A policy from :mod:`nopg.policies.networks` or any module mapping ``(batch, d_s)`` to
        ``(batch, d_a)``; a module with ``mean_std`` is exported as its mean action.
    path : path
        Output file; its folder must exist.
    format : {"torchscript", "onnx"}, optional
        Default: from the suffix (``.pt``/``.pth``/``.ts`` -> TorchScript, ``.onnx`` -> ONNX).
    example_states : array of shape (m, d_s), optional
        States to trace with and to verify on (e.g. the data's), besides 16 random states.
        Needed when the state dimension cannot be read off the policy.
    verify : bool
        Load the written file and check its actions against the policy's.
    overwrite : bool
        Replace an existing file.
    dtype : torch.dtype, optional
        Floating dtype of the exported model (default: the policy's).
    rtol, atol : float
        Tolerances of the verification (``numpy.allclose``).
    onnx_exporter : {"auto", "dynamo", "legacy"}
        ``auto`` uses torch's ``torch.export``-based exporter when ``onnxscript`` is installed.

    Returns
    -------
    pathlib.Path
        The written file.

    Raises
    ------
    ValueError
        Unknown format, missing output folder, existing file without ``overwrite``, bad states.
    ExportVerificationError
        The exported model disagrees with the policy (nothing is written then).
    ImportError
        ONNX requested without ``onnx``/``onnxruntime``.
    """
    if not isinstance(policy, nn.Module):
        raise ValueError(f"policy must be a torch.nn.Module. Got {type(policy).__name__} instead.")
    target = check_target(path, overwrite)
    fmt = resolve_format(target, format)
    if onnx_exporter not in _ONNX_EXPORTERS:
        raise ValueError(f"onnx_exporter must be one of {', '.join(_ONNX_EXPORTERS)}. "
                         f"Got {onnx_exporter!r} instead.")
    if fmt == "onnx":
        _import_onnx()
    dtype = dtype or _policy_dtype(policy)
    module = _ActionModule(copy.deepcopy(policy).to(device="cpu", dtype=dtype)).eval()
    if example_states is not None and isinstance(policy, StateSelect):
        ex = np.asarray(example_states.detach().cpu() if isinstance(example_states, torch.Tensor)
                        else example_states, dtype=np.float64)
        if ex.ndim == 2 and ex.shape[1] == len(policy.keep) != policy.state_dim:
            example_states = policy.full_states(ex)     # the model's states: on full width
    states = _sample_states(policy, example_states)
    example = torch.as_tensor(states[: max(2, min(len(states), 8))], dtype=dtype)
    try:
        with torch.no_grad():
            action_dim = int(module(example).shape[-1])
    except RuntimeError as err:
        raise ValueError(f"the policy cannot act on states of shape {tuple(example.shape)} "
                         f"(check example_states): {err}") from None
    meta = _metadata(policy, int(states.shape[1]), action_dim, dtype)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        if fmt == "torchscript":
            _write_torchscript(module, example, tmp, meta)
        else:
            _write_onnx(module, example, tmp, meta, onnx_exporter)
        run, _ = load_exported_policy(tmp, fmt)
        if verify:
            _verify(run, module, states, dtype, rtol, atol, fmt)
        os.replace(tmp, target)
    except OSError as err:
        raise ValueError(f"cannot write {target}: {err.strerror or err}") from None
    finally:
        tmp.unlink(missing_ok=True)
        tmp.with_name(tmp.name + ".data").unlink(missing_ok=True)   # external weights, if any
    return target
