"""``nopg collect``: record mountain-car demonstrations with the keyboard."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_parser", "command"]


def add_parser(sub: Any) -> None:
    """The ``collect`` subcommand (keyboard demonstrations)."""
    col = sub.add_parser("collect", help="record demonstrations with the keyboard")
    col.add_argument("env", choices=["mountaincar"], help="environment (MountainCarContinuous-v0)")
    col.add_argument("--out", required=True, help="output file (.npz, .hdf5) or minari:<id>")
    col.add_argument("--episodes", type=int, default=3, help="episodes to record (default 3)")
    col.add_argument("--seed", type=int, default=0, help="reset seed of the first episode")
    col.add_argument("--max-steps", type=int, default=999, help="time limit (default 999)")
    col.add_argument("--fps", type=float, default=30.0, help="steps per second (default 30)")
    col.add_argument("--hold-steps", type=int, default=4,
                     help="keep a push for N steps after a key press (bridges key-repeat gaps)")
    col.add_argument("--append", action="store_true", help="add the episodes to an existing OUT")


def command(args: argparse.Namespace) -> int:
    """``nopg collect``: record episodes by keyboard and write them; returns the exit code."""
    from ..data.dataset import concatenate
    from ..data.formats import load_dataset, resolve_location, save_dataset
    from ..envs.mountaincar import TerminalKeys, collect_demonstrations, render_ascii

    if args.fps <= 0:
        raise ValueError(f"--fps must be positive. Got {args.fps}.")
    kind, target = resolve_location(args.out)
    exists = kind == "minari" or Path(target).exists()
    previous = load_dataset(args.out) if args.append and exists else None
    if previous is None and kind != "minari" and Path(target).exists():
        raise ValueError(f"{target} already exists; pass --append to add episodes to it")
    print("MountainCarContinuous-v0: left/a push -1, right/d push +1, s/space coast, q quits. "
          "Episodes end at the goal or the time limit.", file=sys.stderr)

    def show(obs: Any, action: float, t: int) -> None:
        print("\r" + render_ascii(obs, action, t), end="", file=sys.stderr, flush=True)

    def done(k: int, ep: dict[str, Any]) -> None:
        end = "goal" if ep["terminals"][-1] else "time limit"
        print(f"\nepisode {k}: {ep['rewards'].size} steps, return {ep['rewards'].sum():.1f} "
              f"({end})", file=sys.stderr)

    with TerminalKeys() as keys:
        data = collect_demonstrations(args.episodes, keys, seed=args.seed,
                                      max_episode_steps=args.max_steps, hold_steps=args.hold_steps,
                                      step_time=1.0 / args.fps, on_step=show, on_episode=done)
    if data is None:
        print("\nno episode completed; nothing written", file=sys.stderr)
        return 1
    if previous is not None:
        data = concatenate([previous, data])
    save_dataset(data, args.out, overwrite=previous is not None)
    print(f"\nwrote {data!r} to {args.out}")
    return 0
