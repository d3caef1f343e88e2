"""What the ``nopg`` subcommands share: ``--config`` files and ``--set`` items, the subcommand
and factor-flag helpers, the thread count and the help texts of common arguments."""

from __future__ import annotations

import argparse
import inspect
import json
from pathlib import Path
from typing import Any

import torch

__all__ = ["DATA_HELP", "JSON_HELP", "OBS_KEY_HELP", "SAVED_RUN_HELP", "add_factor_args",
           "config_file", "parse_value", "set_items", "set_threads", "subcommand"]


DATA_HELP = "data set (.npz, .hdf5/.h5, minari:<id>)"
OBS_KEY_HELP = "Minari dict observations: use this key (repeat for several, in order)"
JSON_HELP = "print JSON instead of text"
SAVED_RUN_HELP = "run folder (seed_<k>/checkpoint/) or checkpoint folder"


def parse_value(text: str) -> Any:
    """A ``--set`` value: JSON where the text is JSON, else the text itself."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def config_file(path_text: str | None) -> dict[str, Any]:
    """The settings of a ``--config`` JSON file (``{}`` without one)."""
    if path_text is None:
        return {}
    path = Path(path_text)
    if not path.is_file():
        raise ValueError(f"config file {path} does not exist")
    try:
        loaded = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"config file {path} is not valid JSON: {err}") from None
    if not isinstance(loaded, dict):
        raise ValueError(f"config file {path} must hold a JSON object")
    return loaded


def set_items(items: list[str] | None) -> dict[str, Any]:
    """``--set KEY=VALUE`` items (values parsed as JSON where they are JSON, else strings)."""
    changes: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise ValueError(f"--set expects key=value, got {item!r}")
        key, text = item.split("=", 1)
        changes[key.strip()] = parse_value(text)
    return changes


def subcommand(sub: Any, name: str, help_text: str, description: str | None = None,
                **kwargs: Any) -> argparse.ArgumentParser:
    """Add the subcommand ``name``; ``description`` may be an indented triple-quoted string."""
    text = None if description is None else inspect.cleandoc(description)
    return sub.add_parser(name, help=help_text, description=text, **kwargs)


def add_factor_args(parser: argparse.ArgumentParser, note: str = "") -> None:
    """``--state-factor`` and ``--action-factor``: one factor, or one per dimension."""
    for kind in ("state", "action"):
        parser.add_argument(f"--{kind}-factor", type=float, nargs="+", default=[1.0], metavar="F",
                            help=f"{kind} bandwidth factor(s): one, or one per {kind} dimension"
                                 f"{note}")


def set_threads(args: argparse.Namespace) -> None:
    """torch's thread count from ``--threads``."""
    if args.threads < 1:
        raise ValueError(f"--threads must be >= 1. Got {args.threads} instead.")
    torch.set_num_threads(args.threads)
