"""Numbers that change with any change of the library's behaviour, printed as JSON.

A refactoring that should change nothing (a module split, a rename) runs this script before and
after and compares the outputs bit for bit::

    PYTHONPATH=src OMP_NUM_THREADS=1 python scripts/fingerprints.py > /tmp/fp_before.json
    ...  # the change
    PYTHONPATH=src OMP_NUM_THREADS=1 python scripts/fingerprints.py > /tmp/fp_after.json
    cmp /tmp/fp_before.json /tmp/fp_after.json

It covers, on small seeded float64 problems (about a minute on one core): the bandwidths of every
bandwidth rule, the ``auto`` rule's guards, a Bellman solution per model variant (kernel,
local-linear, anchored) with its values at a few states, the linear solvers (dense, BiCGSTAB,
preconditioned, ``solver_tol="auto"``), short NOPG-D and NOPG-S fits on pendulum-grid data
(``J_hat`` and the gradient norm of every update), the cart-pole simulator and its data, the file
formats (round trips) and a small ``nopg reproduce pendulum-grid`` run (its returns). Floats are
written with ``repr`` precision, so equal output means bit-equal numbers.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["COLUMNS"] = "100"          # argparse's help text wraps at the terminal's width
torch.set_num_threads(1)
warnings.simplefilter("ignore")

import nopg  # noqa: E402
from nopg.linalg import solvers  # noqa: E402


def _floats(x: Any) -> Any:
    """``x`` as plain JSON numbers (lists for arrays and tensors)."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    if isinstance(x, np.ndarray):
        return x.astype(np.float64).tolist()
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    return x


def _digest(arrays: dict[str, np.ndarray]) -> str:
    """A SHA-256 of the arrays' bytes, in key order."""
    h = hashlib.sha256()
    for key in sorted(arrays):
        if arrays[key] is None:
            h.update(key.encode() + b"None")
            continue
        a = np.ascontiguousarray(np.asarray(arrays[key]))
        h.update(key.encode() + str(a.dtype).encode() + str(a.shape).encode() + a.tobytes())
    return h.hexdigest()


def _data_digest(data: nopg.TransitionDataset) -> str:
    return _digest({k: getattr(data, k) for k in ("states", "actions", "rewards", "next_states",
                                                   "terminals", "truncations", "episode_ids")})


def _small_arrays(n: int = 40, seed: int = 0) -> nopg.TransitionDataset:
    """The tests' 40 random transitions near the origin (two terminal)."""
    rng = np.random.default_rng(seed)
    states = rng.normal(scale=0.8, size=(n, 2))
    actions = rng.uniform(-1.0, 1.0, size=(n, 1))
    next_states = states + 0.3 * actions + 0.15 * rng.normal(size=(n, 2))
    rewards = -(states ** 2).sum(1) - 0.5 * (actions[:, 0] - 0.3) ** 2 + 0.1 * rng.normal(size=n)
    term = np.zeros(n, dtype=bool)
    term[[5, 17]] = True
    return nopg.TransitionDataset(states, actions, rewards, next_states, term)


def _grid_data() -> nopg.TransitionDataset:
    from nopg.envs.pendulum import collect_pendulum_grid
    return collect_pendulum_grid(8, 8, 2)


def bandwidths(grid: nopg.TransitionDataset, small: nopg.TransitionDataset) -> dict[str, Any]:
    from nopg.bandwidth.selection import METHODS, action_effect, select_bandwidths_and_guards
    out: dict[str, Any] = {}
    for name, data in (("grid", grid), ("small", small)):
        for method in METHODS:
            bw, sel = select_bandwidths_and_guards(data, method, seed=0)
            entry = bw.to_dict()
            if sel is not None:
                entry["selection"] = {k: _floats(v) for k, v in vars(sel).items()
                                      if not isinstance(v, nopg.Bandwidths)}
            out[f"{name}/{method}"] = json.loads(json.dumps(entry, default=_floats))
        bw = nopg.select_bandwidths(data, "silverman", state_factor=2.0, action_factor=0.5)
        out[f"{name}/factors"] = bw.to_dict()
        out[f"{name}/action_effect"] = _floats(action_effect(data, bw.state, bw.action))
    return json.loads(json.dumps(out, default=_floats))


def bellman(small: nopg.TransitionDataset) -> dict[str, Any]:
    bw = nopg.Bandwidths(state=[0.5, 0.7], action=[0.4])
    rng = np.random.default_rng(123)
    s0 = rng.normal(scale=0.5, size=(3, 2))
    queries = rng.normal(scale=0.5, size=(4, 2))
    torch.manual_seed(0)
    det = nopg.DeterministicMLPPolicy(2, 1, action_max=1.0, hidden=(8,), activation="tanh").double()
    torch.manual_seed(1)
    gauss = nopg.GaussianMLPPolicy(2, 1, action_max=1.0, sigma_max=0.5, hidden=(8,),
                                   activation="tanh").double()
    out: dict[str, Any] = {}
    variants = {
        "kernel": {},
        "kernel-topk": {"top_k": 6},
        "kernel-absorb": {"top_k": 6, "unsupported": "absorb"},
        "local-linear": {"successors": "local-linear", "top_k": 8, "neighbors": "knn"},
        "anchored": {"successors": "anchored", "top_k": 8, "neighbors": "knn"},
    }
    for name, settings in variants.items():
        for pname, policy in (("det", det), ("gauss", gauss)):
            model = nopg.bellman_model(small, bw, 0.9, **settings)
            gen = torch.Generator().manual_seed(0)
            sol = model.solution(policy, s0, generator=gen)
            grads = torch.autograd.grad(sol.surrogate(), list(policy.parameters()))
            out[f"{name}/{pname}"] = {
                "J": sol.J,
                "grad": [_floats(g.flatten()[:4]) for g in grads],
                "V": _floats(model.value(policy, queries, sol.q.detach())),
                "Q": _floats(model.q_value(queries, np.full((4, 1), 0.2), sol.q.detach())),
                "visitation": _floats(model.visitation(policy, queries, sol.mu.detach())),
                "support_gap": sol.support_gap,
            }
    return out


def _chain(n: int, gamma: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    P = np.zeros((n, n))
    for i in range(n):
        cols = (i + rng.integers(0, 3, 4)) % n
        np.add.at(P[i], cols, rng.random(4))
    P = gamma * P / P.sum(1, keepdims=True)
    return P, rng.normal(size=n) - 1.0


def linear_solvers() -> dict[str, Any]:
    import scipy.sparse
    P, r = _chain(60, 0.95)
    Pt = torch.from_numpy(P)
    b = torch.from_numpy(r)
    c = torch.full((60,), 1.0 / 60, dtype=torch.float64)
    out: dict[str, Any] = {}
    x, y, info = nopg.solve_dense(Pt, b, c)
    out["dense"] = {"x": _floats(x[:5]), "y": _floats(y[:5]), "residual": info.residual}

    def matvec(v: torch.Tensor) -> torch.Tensor:
        return v - Pt @ v

    def rmatvec(v: torch.Tensor) -> torch.Tensor:
        return v - Pt.T @ v

    x, info = nopg.bicgstab(matvec, b, tol=1e-10, max_iter=500)
    out["bicgstab"] = {"x": _floats(x[:5]), "iters": info.iterations, "residual": info.residual}
    x, info = nopg.bicgstab(matvec, b, tol=1e-6, max_iter=500, norm="inf")
    out["bicgstab-inf"] = {"x": _floats(x[:5]), "iters": info.iterations,
                           "residual": info.stop_residual}
    sparse = scipy.sparse.csr_matrix(P)
    preconditioners = {"ilu": solvers.ilu_preconditioner(sparse),
                       "agg": solvers.aggregation_preconditioner(sparse, np.arange(60) // 4)}
    for name, pre in preconditioners.items():
        x, info = nopg.bicgstab(matvec, b, tol=1e-10, max_iter=500, precond=pre[0])
        out[f"bicgstab-{name}"] = {"x": _floats(x[:5]), "iters": info.iterations,
                                   "residual": info.residual}
    q, mu, iq, imu = solvers.solve_bellman_auto(matvec, rmatvec, b, c, 0.95)
    out["auto"] = {"q": _floats(q[:5]), "mu": _floats(mu[:5]), "iters": [iq.iterations,
                   imu.iterations], "bounds": [iq.error_bound, imu.error_bound]}
    return out


def fits(grid: nopg.TransitionDataset) -> dict[str, Any]:
    from nopg.envs.pendulum import BOTTOM_STATE
    bw = nopg.select_bandwidths(grid)
    s0 = BOTTOM_STATE[None, :].copy()
    out: dict[str, Any] = {}
    for stochastic in (False, True):
        torch.manual_seed(0)
        if stochastic:
            policy = nopg.GaussianMLPPolicy(3, 1, action_max=2.0, hidden=(10,))
        else:
            policy = nopg.DeterministicMLPPolicy(3, 1, action_max=2.0, hidden=(10,))
        config = nopg.NOPGConfig(gamma=0.99, seed=0, model=nopg.ModelConfig(n_mc_policy=5, dtype="float64"))
        algo = nopg.NOPG(policy, config).fit(grid, bw, s0, n_updates=4, progress=False)
        out["NOPG-S" if stochastic else "NOPG-D"] = {
            "J_hat": [m["J_hat"] for m in algo.history_],
            "grad_norm": [m["grad_norm"] for m in algo.history_],
            "support_gap": [m["support_gap"] for m in algo.history_],
            "final_J_hat": algo.J_hat(),
            "value": _floats(algo.value(grid.states[:3])),
        }
    return out


def cartpole() -> dict[str, Any]:
    from nopg.envs import cartpole as cp
    data = cp.collect_cartpole_random(200, seed=0)
    s = cp.sample_initial_states(0, 3)
    out = {
        "data": _data_digest(data),
        "step": _floats(cp.cartpole_step(s, np.array([1.0, -2.0, 0.5]))),
        "energy": _floats(cp.cartpole_energy(s)),
        "obs": _floats(cp.state_to_obs(s)),
    }
    env = cp.make_cartpole_env(max_episode_steps=20)
    obs, _ = env.reset(seed=3)
    total = 0.0
    for _ in range(20):
        obs, reward, term, trunc, _ = env.step(np.array([0.3], dtype=np.float32))
        total += float(reward)
        if term or trunc:
            break
    env.close()
    out["env_return"] = total
    out["env_obs"] = _floats(obs)
    return out


def formats(small: nopg.TransitionDataset) -> dict[str, Any]:
    from nopg.data import formats as fm
    out: dict[str, Any] = {"describe": json.loads(json.dumps(fm.describe(small), default=_floats))}
    with tempfile.TemporaryDirectory() as tmp:
        for suffix in (".npz", ".hdf5"):
            path = Path(tmp) / f"d{suffix}"
            fm.save_dataset(small, path)
            out[suffix] = _data_digest(fm.load_dataset(path))
    return out


def reproduce() -> dict[str, Any]:
    from nopg.cli import main
    with tempfile.TemporaryDirectory() as tmp:
        args = ["reproduce", "pendulum-grid", "--set", "task.n_theta=7", "--set",
                "task.n_theta_dot=7", "--set", "task.eval_steps=100", "--set", "budget=null",
                "--seeds", "0", "1",
                "--n-updates", "15", "--out", tmp, "--name", "run", "--no-progress"]
        out: dict[str, Any] = {}
        for stochastic in (False, True):
            name = "run-s" if stochastic else "run"
            argv = args[:-2] + [name, "--no-progress"] + (["--stochastic"] if stochastic else [])
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                rc = main(argv)
            summary = json.loads((Path(tmp) / name / "summary.json").read_text())
            out["NOPG-S" if stochastic else "NOPG-D"] = {"rc": rc, "summary": _strip(summary)}
    return out


def _run_cli(argv: list[str]) -> dict[str, Any]:
    """The exit code and the standard output of ``nopg <argv>``."""
    from nopg.cli import main
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(io.StringIO()):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code
    text = re.sub(r"selected in \S+ s", "selected in <t> s", stdout.getvalue())
    text = re.sub(r'"seconds": [^,\n]+', '"seconds": <t>', text)
    return {"rc": rc, "stdout": text}


def cli(small: nopg.TransitionDataset) -> dict[str, Any]:
    """Every subcommand's help, ``nopg list``, ``nopg data`` and ``nopg bandwidth`` on a file."""
    commands = ["reproduce", "fit", "list", "data", "tune-k", "bandwidth", "collect", "evaluate",
                "export", "sweep-report"]
    out = {"help": _run_cli(["--help"])}
    for command in commands:
        out[f"help/{command}"] = _run_cli([command, "--help"])
    out["list"] = _run_cli(["list"])
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "small.npz")
        small.save(path)
        out["data"] = _run_cli(["data", path])
        out["data-json"] = _run_cli(["data", path, "--format", "text"])
        plot = str(Path(tmp) / "bandwidth_report.png")
        out["bandwidth"] = _run_cli(["bandwidth", path, "--json", "--plot", plot])
        out["bandwidth-silverman"] = _run_cli(["bandwidth", path, "--method", "silverman",
                                               "--plot", plot])
        out["data-convert"] = _run_cli(["data", "convert", path, str(Path(tmp) / "s.hdf5")])
    for value in out.values():
        value["stdout"] = value["stdout"].replace(tmp, "<tmp>")
    return out


def _strip(x: Any) -> Any:
    """``x`` without timings and paths (which change from run to run). The run sets
    ``budget=null``: the later fits' time budget would make the results depend on the
    machine's load."""
    if isinstance(x, dict):
        return {k: _strip(v) for k, v in x.items()
                if not (k.endswith("_s") or any(t in k for t in ("time", "seconds", "path", "dir",
                                                                  "date")))}
    if isinstance(x, list):
        return [_strip(v) for v in x]
    return x


def main() -> None:
    small = _small_arrays()
    grid = _grid_data()
    out = {
        "grid_data": _data_digest(grid),
        "bandwidths": bandwidths(grid, small),
        "bellman": bellman(small),
        "solvers": linear_solvers(),
        "fits": fits(grid),
        "cartpole": cartpole(),
        "formats": formats(small),
        "cli": cli(small),
        "reproduce": reproduce(),
    }
    json.dump(out, sys.stdout, indent=1, sort_keys=True, default=_floats)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
