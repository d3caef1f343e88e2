"""``nopg data``: summarise a data set, or convert it between formats (.npz, HDF5, Minari)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .common import OBS_KEY_HELP, subcommand

__all__ = ["add_parser", "command"]


def add_parser(sub: Any) -> None:
    """The ``data`` subcommand (inspect or convert a data set)."""
    data = subcommand(sub, "data", "inspect or convert a data set (.npz, .hdf5/.h5, minari:<id>)",
                       """
        nopg data PATH: summarise a data set (JSON by default). nopg data convert IN OUT:
        convert; the format follows the extension (.npz, .hdf5, .h5) or the prefix
        minari:<dataset id> (local Minari data sets only, never downloaded). A file named
        'convert' can be given as ./convert.""")
    data.add_argument("args", nargs="+", metavar="PATH | convert IN OUT",
                      help="a data set to inspect, or `convert IN OUT`")
    data.add_argument("--format", dest="output_format", choices=["json", "text"], default="json",
                      help="inspection output (default json)")
    data.add_argument("--obs-key", action="append", help=OBS_KEY_HELP)
    data.add_argument("--overwrite", action="store_true", help="convert: replace OUT if it exists")
    data.add_argument("--env-id", help="convert to Minari: gymnasium id recorded with the data set")


def _print_description(desc: dict[str, Any], fmt: str) -> None:
    if fmt == "json":
        print(json.dumps(desc, indent=2))
        return
    def vec(values: list[float]) -> str:
        return "[" + ", ".join(f"{v:.4g}" for v in values) + "]"
    print(f"transitions       {desc['n']}  (state dim {desc['state_dim']}, "
          f"action dim {desc['action_dim']})")
    print(f"episodes          {desc['n_episodes']}  (lengths {desc['episode_length_min']}-"
          f"{desc['episode_length_max']}, mean {desc['episode_length_mean']:.1f}; ids "
          f"{'stored' if desc['has_episode_ids'] else 'inferred'})")
    print(f"episode ends      {desc['episodes_ending_terminal']} terminal, "
          f"{desc['episodes_ending_truncated']} truncated, {desc['episodes_ending_open']} neither")
    print(f"flags             {desc['n_terminals']} terminals, {desc['n_truncations']} truncations")
    print(f"returns           mean {desc['episode_return_mean']:.4g}, min "
          f"{desc['episode_return_min']:.4g}, max {desc['episode_return_max']:.4g}, std "
          f"{desc['episode_return_std']:.4g}")
    print(f"rewards           mean {desc['reward_mean']:.4g}, min {desc['reward_min']:.4g}, "
          f"max {desc['reward_max']:.4g}")
    print(f"states            min {vec(desc['state_min'])}  max {vec(desc['state_max'])}")
    print(f"actions           min {vec(desc['action_min'])}  max {vec(desc['action_max'])}")


def command(args: argparse.Namespace) -> int:
    """``nopg data``: summarise a data set, or convert it; returns the exit code."""
    from ..data.formats import describe, load_dataset, resolve_location, save_dataset

    items = list(args.args)
    obs_keys = args.obs_key
    if items[0] == "convert":
        if len(items) != 3:
            raise ValueError("usage: nopg data convert IN OUT")
        src, dst = items[1], items[2]
        in_kind = resolve_location(src)[0]
        data = load_dataset(src, obs_keys=obs_keys if in_kind == "minari" else None)
        kind = save_dataset(data, dst, overwrite=args.overwrite, env_id=args.env_id)
        print(f"wrote {data!r} to {dst} ({kind})")
        return 0
    if items[0] == "inspect":
        items = items[1:]
    if len(items) != 1:
        raise ValueError("usage: nopg data PATH  or  nopg data convert IN OUT")
    _print_description(describe(load_dataset(items[0], obs_keys=obs_keys)), args.output_format)
    return 0
