"""Selection quality of the default method's judge on the pre-registered unseen tasks.

    cd /tmp && PYTHONPATH=/tmp/frozen2/src OMP_NUM_THREADS=1 \\
        python /work/main/benchmarks/preregistered_selection.py --registration 2 \\
        --stop-launch 22:40 --hard-stop 22:55

The issue "One NOPG" asks for the Spearman correlation of the selection criterion with the true
return, and the regret@1 of each choice, on the unseen tasks as on the benchmark data sets. This
script re-runs each registered NOPG run (task, seed) with the registration's frozen code, the
same command and one setting more: ``--set evaluate_candidates=true``, which also rolls out
every policy the judge scores (each fit's snapshots and its final policy) in the task's
environment with the evaluation's own protocol, for the record only; the judge never sees those
returns. It is a measurement of the frozen method, not a change of it: nothing here feeds back
into any setting.

One JSON line per run in ``selection.jsonl`` beside the registration's ``results.jsonl``: the
scored policies (fit, update, judge forecast, drawn-path standard error, true return, kept), the
within-seed Spearman correlation, the regret@1, and whether the kept policy's return equals that
of the registered run of the same task and seed (``same_as_registered``: the record-only
evaluations leave the method's choices alone). ``--summary`` prints, per task, the Spearman
correlation pooled over the seeds' scored policies, its median within a seed, and the regret@1's
mean and largest.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)        # run as a script: the benchmarks folder shadows nothing
sys.path.insert(0, str(Path(__file__).resolve().parent))

import preregistered_run as reg  # noqa: E402  (the registrations' tasks, paths and helpers)


def selection_file() -> Path:
    return reg.RESULTS.parent / "selection.jsonl"


def registered_returns() -> dict[tuple[str, int], float]:
    """The registered NOPG runs' mean returns by (task, seed)."""
    out = {}
    if reg.RESULTS.exists():
        for line in reg.RESULTS.read_text().splitlines():
            row = json.loads(line)
            if row.get("algorithm") == "NOPG" and row.get("status") == "ok":
                out[(row["task"], row["seed"])] = row["return_mean"]
    return out


def spearman(rows: list[dict]) -> float | None:
    from nopg.analysis.statistics import rank_correlation

    return rank_correlation([r["forecast"] for r in rows], [r["return"] for r in rows])


def selection_job(number: int, name: str, env_id: str, seed: int, limit_s: float) -> dict:
    """The registered command of (task, seed) with every scored policy evaluated."""
    runs = reg.RUNS.parent / "selection_runs"
    run_name = f"{name}__nopg__seed{seed}"
    flags = [str(reg.data_file(number, name)), "--env", env_id, "--seeds", str(seed),
             "--no-progress", "--out", str(runs), "--name", run_name,
             "--set", "evaluate_candidates=true"]
    if reg.REGISTRATION == 1 and number == 1:
        cmd = [sys.executable, str(Path(reg.__file__).resolve()), "--registration",
               str(reg.REGISTRATION), "fit-g14", *flags]
    else:
        cmd = [sys.executable, "-m", "nopg.cli", "fit", *flags]
    runs.mkdir(parents=True, exist_ok=True)
    log = runs / f"{run_name}.log"
    status, wall, rc = reg.run_limited(cmd, limit_s, log)
    row = {"task": name, "task_number": number, "seed": seed, "status": status, "wall_s": wall,
           "limit_s": limit_s, "code": reg.FROZEN, "command": "nopg fit " + " ".join(flags)}
    summary_path = runs / run_name / "summary.json"
    if status != "ok" or not summary_path.exists():
        row.update({"returncode": rc,
                    "log_tail": log.read_text()[-1500:] if log.exists() else None})
        return row
    seed_row = json.loads(summary_path.read_text())["seeds"][0]
    report = seed_row.get("fit_report", {})
    scored = [{k: r.get(k) for k in ("fit", "update", "forecast", "sampled_se", "return", "kept")}
              for r in report.get("scored", [])]
    registered = registered_returns().get((name, seed))
    row.update({"return_mean": seed_row["return_mean"], "kept": report.get("kept"),
                "recipes": report.get("recipes"), "scored": scored,
                "spearman": spearman(scored), "regret_at_1": report.get("regret_at_1"),
                "registered_return": registered,
                "same_as_registered": (None if registered is None
                                       else abs(registered - seed_row["return_mean"]) < 1e-9),
                "run_dir": str(runs / run_name)})
    return row


def done() -> set[tuple[str, int]]:
    path = selection_file()
    if not path.exists():
        return set()
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {(r["task"], r["seed"]) for r in rows if r["status"] == "ok"}


def drive(args: argparse.Namespace) -> int:
    stop_launch, hard_stop = reg.at_today(args.stop_launch), reg.at_today(args.hard_stop)
    tasks = reg.TASKS if args.tasks is None else \
        [next(t for t in reg.TASKS if t[0] == k) for k in args.tasks]
    for number, name, env_id in tasks:
        for seed in reg.SEEDS:
            if (name, seed) in done():
                continue
            now = reg.utc_now()
            if now >= stop_launch:
                print(f"[{now:%H:%M:%S}] past {args.stop_launch} UTC: no new run", flush=True)
                return 0
            limit_s = min(2 * reg.NOPG_LIMIT_S, (hard_stop - now).total_seconds())
            print(f"[{now:%H:%M:%S}] start {name} seed {seed} (limit {limit_s:.0f} s)",
                  flush=True)
            row = selection_job(number, name, env_id, seed, limit_s)
            row["finished_utc"] = f"{reg.utc_now():%Y-%m-%dT%H:%M:%SZ}"
            with open(selection_file(), "a") as fh:
                fh.write(json.dumps(row) + "\n")
            print(f"[{reg.utc_now():%H:%M:%S}] {name} seed {seed}: {row['status']} "
                  f"regret@1 {row.get('regret_at_1')} spearman {row.get('spearman')}", flush=True)
    return 0


def summary() -> list[dict]:
    """Per task: policies scored, Spearman pooled and median within a seed, regret@1."""
    rows = [json.loads(line) for line in selection_file().read_text().splitlines() if line]
    rows = [r for r in rows if r["status"] == "ok"]
    out = []
    for name in dict.fromkeys(r["task"] for r in rows):
        mine = [r for r in rows if r["task"] == name]
        pooled = [s for r in mine for s in r["scored"]]
        within = [r["spearman"] for r in mine if r["spearman"] is not None]
        regrets = [r["regret_at_1"] for r in mine if r["regret_at_1"] is not None]
        out.append({"task": name, "seeds": [r["seed"] for r in mine], "scored": len(pooled),
                    "spearman_pooled": spearman(pooled),
                    "spearman_within_median": statistics.median(within) if within else None,
                    "regret_at_1_mean": statistics.fmean(regrets) if regrets else None,
                    "regret_at_1_max": max(regrets) if regrets else None,
                    "same_as_registered": [r["same_as_registered"] for r in mine]})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--registration", type=int, default=2, choices=sorted(reg.REGISTRATIONS))
    parser.add_argument("--stop-launch", default="23:59")
    parser.add_argument("--hard-stop", default="23:59")
    parser.add_argument("--tasks", type=int, nargs="+", default=None,
                        help="task numbers, in the order to run them (default: all)")
    parser.add_argument("--summary", action="store_true", help="print the summary and stop")
    args = parser.parse_args(argv)
    reg.use_registration(args.registration)
    if args.summary:
        for row in summary():
            print(json.dumps(row))
        return 0
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
