"""``nopg export``: a saved policy as a TorchScript or ONNX file, checked against the policy."""

from __future__ import annotations

import argparse
from typing import Any

import torch

from .common import SAVED_RUN_HELP, subcommand

__all__ = ["add_parser", "command"]


def add_parser(sub: Any) -> None:
    """The ``export`` subcommand (a saved policy, after training)."""
    ex = subcommand(sub, "export", "export a saved policy as TorchScript or ONNX", """
        nopg export RUN_OR_CHECKPOINT --out FILE: write the policy (a Gaussian policy's mean
        action) as a TorchScript or ONNX file mapping states (batch, state_dim) to actions
        (batch, action_dim), and check that the file reproduces the policy's actions.""")
    ex.add_argument("path", help=SAVED_RUN_HELP)
    ex.add_argument("--out", required=True, help="output file (.pt for TorchScript, .onnx)")
    ex.add_argument("--format", dest="export_format", choices=["torchscript", "onnx"],
                    help="default: from the --out suffix")
    ex.add_argument("--seed", type=int, help="which seed's checkpoint of a run folder")
    ex.add_argument("--dtype", choices=["float64", "float32"], help="default: the policy's")
    ex.add_argument("--overwrite", action="store_true", help="replace an existing --out file")


def command(args: argparse.Namespace) -> int:
    """``nopg export``: write and check one checkpoint's policy; returns the exit code."""
    from ..io.export import check_target, export_policy, resolve_format
    from ..io.run_evaluation import checkpoint_folders, load_saved

    target = check_target(args.out, args.overwrite)
    fmt = resolve_format(target, args.export_format)
    found = checkpoint_folders(args.path, args.seed)
    if len(found) > 1:
        seeds = ", ".join(str(s) for s, _ in found)
        raise ValueError(f"{args.path} holds the checkpoints of seeds {seeds}; choose one with --seed")
    saved = load_saved(found[0][1], found[0][0])
    model = saved.algo.model_
    example = model.data.states[:64] if model is not None else None
    dtype = None if args.dtype is None else getattr(torch, args.dtype)
    try:
        path = export_policy(saved.policy, target, fmt, example_states=example,
                             overwrite=args.overwrite, dtype=dtype)
    except ImportError as err:
        raise ValueError(str(err)) from None
    print(f"wrote {path} ({fmt}; checked against the policy of {found[0][1]})")
    return 0
