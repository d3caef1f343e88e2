"""Runs of the pre-registered unseen tasks from the frozen code: the first registration
(``docs/preregistration.md``, frozen code ``371fb84``) and, with ``--registration 2``, the second
(``docs/preregistration2.md``, its own frozen code, :data:`REGISTRATIONS`).

Run with the frozen method on the path (``git worktree add /tmp/frozen 371fb84``; the second
registration's in ``/tmp/frozen2``)::

    cd /tmp && PYTHONPATH=/tmp/frozen/src OMP_NUM_THREADS=1 \\
        python /work/main/benchmarks/preregistered_run.py [--registration 2] drive

``drive`` runs one heavy process at a time, in the brief's order (NOPG seed 0 on every task,
then seeds 1-4; then the baselines task by task), skips what ``results.jsonl`` already holds,
appends each finished run as one JSON line, stops launching at ``--stop-launch`` and kills the
running one at ``--hard-stop`` (UTC), and commits the results file now and then.

* NOPG, tasks 2-7: ``python -m nopg.cli fit FILE --env ID --seeds S --no-progress --out RUNS
  --name NAME``, every other option at its default; the result is the run's ``summary.json``.
* NOPG, task 1 (``Pendulum-v1`` with ``g=14``, which ``--env`` cannot pass): ``fit-g14``
  registers ``PendulumG14-v1`` (gymnasium's ``PendulumEnv`` with ``kwargs={"g": 14.0}`` and
  the time limit 200: the same spec as ``gym.make("Pendulum-v1", g=14.0)``, checked step by step
  in the driver's self-check) and runs ``nopg.cli.main(["fit", FILE, "--env",
  "PendulumG14-v1", ...])``: the very code path of ``nopg fit --env``, which fits
  ``nopg.AutoNOPG(config, seed=S)`` (``config``: ``MethodConfig``'s defaults as ``nopg fit``
  has them) on the data from the states that start its episodes, with ``action_max=2.0``,
  ``horizon=200`` (the time limit), the observation space's bounds as ``state_bounds`` (as for
  every ``--env`` task) and the evaluation on ``gym.make`` of that id.
* Baselines: ``nopg.baselines.d3rlpy_bridge.train_d3rlpy_many([ALG], data, 20_000, S, -box,
  box, ...)`` (d3rlpy 2.8.1 defaults; ``box`` the environment's action bound, as the
  sample-efficiency sweep does), evaluated by the very function ``nopg fit`` evaluates with
  (``DataFileTask.evaluate``: 10 episodes of the mean action from reset seeds
  ``10 000 + 1000 S + k``; for task 1 in ``PendulumG14-v1``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)        # run as a script: the benchmarks folder shadows nothing

REPO = Path(__file__).resolve().parents[1]

REGISTRATIONS: dict[int, dict] = {
    1: {"results": REPO / "records" / "preregistered" / "results.jsonl",
        "root": Path("/tmp/prereg"), "frozen": "371fb84", "worktree": "/tmp/frozen",
        # number, name, env id for the evaluation (6, invertedpendulum-mixed, dropped)
        "tasks": [(1, "pendulum-strong-gravity", "PendulumG14-v1"),
                  (2, "pendulum-mixed", "Pendulum-v1"),
                  (3, "mountaincar-push-heuristic", "MountainCarContinuous-v0"),
                  (4, "invertedpendulum-small", "InvertedPendulum-v5"),
                  (5, "reacher-random", "Reacher-v5"),
                  (7, "inverteddoublependulum-random", "InvertedDoublePendulum-v5")]},
    2: {"results": REPO / "records" / "preregistered2" / "results.jsonl",
        "root": Path("/tmp/prereg2"), "frozen": "a0dd5c3", "worktree": "/tmp/frozen2",
        "tasks": [(1, "pendulum-random-small", "Pendulum-v1"),
                  (2, "pendulum-swingup-noisy", "Pendulum-v1"),
                  (3, "invertedpendulum-pd-noisy", "InvertedPendulum-v5"),
                  (4, "mountaincar-mixed", "MountainCarContinuous-v0"),
                  (5, "mountaincar-random", "MountainCarContinuous-v0"),
                  (6, "swimmer-random", "Swimmer-v5"),
                  (7, "pendulum-bangbang", "Pendulum-v1")]},
}
"""Each registration's results file, data and run folders (under ``root``), frozen code and
tasks."""

REGISTRATION: int
RESULTS: Path
DATA: Path
RUNS: Path
WORK: Path
FROZEN: str
WORKTREE: str
TASKS: list[tuple[int, str, str]]


def use_registration(number: int) -> None:
    """Point the module's paths, frozen code and tasks at registration ``number``."""
    global REGISTRATION, RESULTS, DATA, RUNS, WORK, FROZEN, WORKTREE, TASKS
    reg = REGISTRATIONS[number]
    REGISTRATION, RESULTS, TASKS = number, reg["results"], reg["tasks"]
    DATA, RUNS, WORK = reg["root"] / "data", reg["root"] / "runs", reg["root"] / "d3rlpy"
    FROZEN, WORKTREE = reg["frozen"], reg["worktree"]


use_registration(1)           # the first list unless ``--registration`` says otherwise

SEEDS = (0, 1, 2, 3, 4)
BASELINES = ("BC", "TD3+BC", "IQL")
D3RLPY_STEPS = 20_000
NOPG_LIMIT_S = 20 * 60
D3RLPY_LIMIT_S = 15 * 60


def register_g14() -> None:
    import gymnasium as gym

    if "PendulumG14-v1" not in gym.registry:
        gym.register(id="PendulumG14-v1",
                     entry_point="gymnasium.envs.classic_control.pendulum:PendulumEnv",
                     max_episode_steps=200, kwargs={"g": 14.0})


def data_file(number: int, name: str) -> Path:
    return DATA / f"{number}_{name}.npz"


# ---------------------------------------------------------------------------- sub-commands
def fit_g14(argv: list[str]) -> int:
    """``nopg fit`` with ``PendulumG14-v1`` registered (argv: nopg fit's, without ``fit``)."""
    register_g14()
    from nopg.cli import main
    return main(["fit", *argv])


def baseline(task: str, algorithm: str, seed: int, out: Path) -> int:
    """Train one d3rlpy baseline and write its result (JSON) to ``out``."""
    import numpy as np
    import torch

    from nopg.baselines.d3rlpy_bridge import train_d3rlpy_many
    from nopg.experiments.data_file import DataFileTask, fit_config

    torch.set_num_threads(1)
    register_g14()
    number, name, env_id = next(t for t in TASKS if t[1] == task)
    task_obj = DataFileTask(data_file(number, name), env_id=env_id)
    config = fit_config().replace(seeds=[seed])
    box = np.asarray(task_obj.action_max, float)
    work = WORK / name / algorithm.replace("+", "p") / f"seed_{seed}"
    start = time.perf_counter()
    result = train_d3rlpy_many([algorithm], task_obj.data, D3RLPY_STEPS, seed, -box, box, work,
                               timeout=D3RLPY_LIMIT_S)[algorithm]
    train_wall = time.perf_counter() - start
    returns = task_obj.evaluate(result.policy, config, seed, config.final_eval_episodes)
    record = {"return_mean": float(np.mean(returns)), "returns": returns,
              "wall_s": time.perf_counter() - start, "train_wall_s": train_wall,
              "train_seconds": result.train_seconds, "data_sha256": result.sha256,
              "metrics": result.metrics, "policy": str(work / algorithm.replace("+", "p") /
                                                        "policy.pt"),
              "eval": "DataFileTask.evaluate, 10 episodes, reset seeds 10000 + 1000 S + k"}
    out.write_text(json.dumps(record))
    return 0


# --------------------------------------------------------------------------------- driver
def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def at_today(hhmm: str) -> dt.datetime:
    h, m = (int(x) for x in hhmm.split(":"))
    return utc_now().replace(hour=h, minute=m, second=0, microsecond=0)


def done_keys() -> set[tuple[str, str, int]]:
    if not RESULTS.exists():
        return set()
    keys = set()
    for line in RESULTS.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            keys.add((row["task"], row["algorithm"], int(row["seed"])))
    return keys


def append(row: dict) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with open(RESULTS, "a") as fh:
        fh.write(json.dumps(row) + "\n")
    print(f"[{utc_now():%H:%M:%S}] {row['task']} {row['algorithm']} seed {row['seed']}: "
          f"{row['status']} return {row.get('return_mean')} wall {row.get('wall_s')}", flush=True)


def commit(message: str) -> None:
    rel = str(RESULTS.relative_to(REPO))
    for cmd in (["git", "-C", str(REPO), "add", rel],
                ["git", "-C", str(REPO), "commit", "-q", "-m", message, "--", rel]):
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"commit skipped: {' '.join(cmd[3:5])}: {proc.stderr.strip()[:300]}",
                  flush=True)
            return
    print(f"[{utc_now():%H:%M:%S}] committed {rel}", flush=True)


def run_limited(cmd: list[str], limit_s: float, log: Path) -> tuple[str, float, int | None]:
    """Run ``cmd`` (cwd /tmp, its own process group) for at most ``limit_s`` seconds."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": f"{WORKTREE}/src"}
    start = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, cwd="/tmp", env=env, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=max(1.0, limit_s))
            status = "ok" if rc == 0 else "error"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc, status = None, "timeout"
    return status, time.perf_counter() - start, rc


def nopg_job(number: int, name: str, env_id: str, seed: int, limit_s: float) -> dict:
    run_name = f"{name}__nopg__seed{seed}"
    file = str(data_file(number, name))
    flags = [file, "--env", env_id, "--seeds", str(seed), "--no-progress", "--out", str(RUNS),
             "--name", run_name]
    if REGISTRATION == 1 and number == 1:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--registration", str(REGISTRATION),
               "fit-g14", *flags]
    else:
        cmd = [sys.executable, "-m", "nopg.cli", "fit", *flags]
    log = RUNS / f"{run_name}.log"
    RUNS.mkdir(parents=True, exist_ok=True)
    status, wall, rc = run_limited(cmd, limit_s, log)
    row = {"task": name, "task_number": number, "algorithm": "NOPG", "seed": seed,
           "status": status, "return_mean": None, "returns": None, "wall_s": wall,
           "limit_s": limit_s, "command": " ".join(["preregistered_run.py fit-g14"
                                                   if REGISTRATION == 1 and number == 1
                                                   else "nopg fit", *flags]),
           "code": FROZEN}
    summary_path = RUNS / run_name / "summary.json"
    if status == "ok" and summary_path.exists():
        summary = json.loads(summary_path.read_text())
        s = summary["seeds"][0]
        report = s.get("fit_report", {})
        row.update({
            "return_mean": s["return_mean"], "returns": s["returns"],
            "wall_s_seed": s.get("wall_time_s"), "fit_time_s": s.get("fit_time_s"),
            "bandwidth_time_s": s.get("bandwidth_time_s"), "J_hat": s.get("J_hat"),
            "support_gap": s.get("support_gap"), "n_samples": s.get("n_samples"),
            "kept": report.get("kept"), "recipes": report.get("recipes"),
            "decisions": report.get("decisions"), "escalation": report.get("escalation"),
            "budget_s": report.get("budget_s"), "horizon": report.get("horizon"),
            "dropped_state_dims": report.get("dropped_state_dims"),
            "candidates": [{k: c.get(k) for k in ("name", "kept", "return_mean", "J_hat",
                                                   "support_gap", "fit_time_s", "stopped_at")}
                           for c in report.get("candidates", [])],
            "run_dir": str(RUNS / run_name)})
    else:
        row["log_tail"] = log.read_text()[-1500:] if log.exists() else None
        row["returncode"] = rc
    return row


def baseline_job(number: int, name: str, algorithm: str, seed: int, limit_s: float) -> dict:
    out = WORK / f"{name}__{algorithm.replace('+', 'p')}__seed{seed}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--registration", str(REGISTRATION),
           "baseline", name, algorithm, str(seed), str(out)]
    log = WORK / f"{name}__{algorithm.replace('+', 'p')}__seed{seed}.log"
    status, wall, rc = run_limited(cmd, limit_s, log)
    row = {"task": name, "task_number": number, "algorithm": algorithm, "seed": seed,
           "status": status, "return_mean": None, "returns": None, "wall_s": wall,
           "limit_s": limit_s, "n_steps": D3RLPY_STEPS, "d3rlpy": "2.8.1", "code": FROZEN}
    if status == "ok" and out.exists():
        rec = json.loads(out.read_text())
        row.update(rec)
        row["wall_s_process"] = wall
    else:
        text = log.read_text() if log.exists() else ""
        if "TimeoutExpired" in text:
            row["status"] = "timeout"
        row["log_tail"] = text[-1500:]
        row["returncode"] = rc
    return row


def plan(phase: str, order: list[int] | None = None) -> list[tuple]:
    """The runs in the brief's order; ``order`` (task numbers) reorders or restricts the tasks."""
    tasks = TASKS if order is None else [next(t for t in TASKS if t[0] == k) for k in order]
    jobs: list[tuple] = []
    if phase in ("all", "nopg"):
        for seed in SEEDS:
            for number, name, env_id in tasks:
                jobs.append(("NOPG", number, name, env_id, seed))
    if phase in ("all", "baselines"):
        for number, name, env_id in tasks:
            for algorithm in BASELINES:
                for seed in SEEDS:
                    jobs.append((algorithm, number, name, env_id, seed))
    return jobs


def drive(args: argparse.Namespace) -> int:
    stop_launch, hard_stop = at_today(args.stop_launch), at_today(args.hard_stop)
    last_commit = time.monotonic()
    for algorithm, number, name, env_id, seed in plan(args.phase, args.tasks):
        if (name, algorithm, seed) in done_keys():
            continue
        now = utc_now()
        if now >= stop_launch:
            print(f"[{now:%H:%M:%S}] past {args.stop_launch} UTC: no new run", flush=True)
            break
        limit = NOPG_LIMIT_S if algorithm == "NOPG" else D3RLPY_LIMIT_S + 120
        to_hard = (hard_stop - now).total_seconds()
        killed_by_deadline = to_hard < limit
        limit_s = min(limit, to_hard)
        print(f"[{now:%H:%M:%S}] start {name} {algorithm} seed {seed} (limit {limit_s:.0f} s)",
              flush=True)
        try:
            if algorithm == "NOPG":
                row = nopg_job(number, name, env_id, seed, limit_s)
            else:
                row = baseline_job(number, name, algorithm, seed, limit_s)
        except Exception:    # noqa: BLE001 -- recorded, never dropped
            row = {"task": name, "task_number": number, "algorithm": algorithm, "seed": seed,
                   "status": "driver-error", "error": traceback.format_exc()[-1500:]}
        if row["status"] == "timeout" and killed_by_deadline:
            row["status"] = "killed-at-deadline"
        row["finished_utc"] = f"{utc_now():%Y-%m-%dT%H:%M:%SZ}"
        append(row)
        if time.monotonic() - last_commit > args.commit_every:
            commit(f"{RESULTS.relative_to(REPO)}: runs up to {name} {algorithm} seed {seed}")
            last_commit = time.monotonic()
    commit(f"{RESULTS.relative_to(REPO)}: the driver's last runs")
    return 0


def main() -> int:
    argv = sys.argv[1:]
    if len(argv) > 1 and argv[0] == "--registration":
        use_registration(int(argv[1]))
        argv = argv[2:]
    if argv and argv[0] == "fit-g14":
        return fit_g14(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("drive")
    d.add_argument("--phase", choices=("all", "nopg", "baselines"), default="all")
    d.add_argument("--stop-launch", default="11:40")
    d.add_argument("--hard-stop", default="11:50")
    d.add_argument("--commit-every", type=float, default=1800.0)
    d.add_argument("--tasks", type=int, nargs="+", default=None,
                   help="task numbers, in the order to run them (default: all)")
    b = sub.add_parser("baseline")
    b.add_argument("task")
    b.add_argument("algorithm", choices=BASELINES)
    b.add_argument("seed", type=int)
    b.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    if args.command == "drive":
        return drive(args)
    return baseline(args.task, args.algorithm, args.seed, args.out)


if __name__ == "__main__":
    sys.exit(main())
