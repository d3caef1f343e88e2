"""Generate and save the data sets of the "user data" experiments (:mod:`nopg.experiments.user_data`).

The data are exactly those ``nopg reproduce <task> --seeds <s>`` trains on: the task's
``make_dataset`` with its default settings (``--set task.<key>=<value>`` changes one, as in
``nopg reproduce``). Each data set is written with ``TransitionDataset.save`` to
``<out>/<task>__seed<s>.npz`` (read it back with ``TransitionDataset.load`` or ``nopg data``).

    python scripts/make_user_data.py pendulum-uniform --seeds 0 1 --out data/
    python scripts/make_user_data.py mountaincar-uniform --seeds 0 --set task.n_samples=1000
    python scripts/make_user_data.py all --seeds 0
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from nopg.experiments.user_data import USER_DATA_TASKS

NAMES = [cls.name for cls in USER_DATA_TASKS]


def _parse_value(text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", choices=[*NAMES, "all"], help="user-data task (or all four)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="data seeds (default 0)")
    parser.add_argument("--out", default="data", help="output folder (default ./data)")
    parser.add_argument("--set", action="append", metavar="task.KEY=VALUE", default=[],
                        help="a data setting, e.g. task.n_samples=1000")
    args = parser.parse_args(argv)

    changes: dict[str, object] = {}
    for item in args.set:
        key, sep, text = item.partition("=")
        if not sep or not key.strip().startswith("task."):
            parser.error(f"--set expects task.KEY=VALUE, got {item!r}")
        changes[key.strip()] = _parse_value(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for cls in USER_DATA_TASKS:
        if args.task not in (cls.name, "all"):
            continue
        task = cls()
        config = task.default_config().replace(**changes)
        for seed in args.seeds:
            start = time.perf_counter()
            data = task.make_dataset(config, seed)
            path = out / f"{task.name}__seed{seed}.npz"
            data.save(path)
            s = data.summary()
            print(f"{path}: n={s['n']} episodes={s['n_episodes']} terminals={s['n_terminals']} "
                  f"truncations={s['n_truncations']} reward mean={s['reward_mean']:.3f} "
                  f"episode return mean={s['episode_return_mean']:.2f} "
                  f"({time.perf_counter() - start:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
