"""Cost and accuracy of the linear solves of NOPG's policy updates (issue: Scale II).

For every size ``n`` (Pendulum-like data of :func:`bench_scale.pendulum_data`, Silverman
bandwidths, ``top_k=10`` with candidate neighbours, a deterministic 3-50-1 MLP, Adam at 1e-2,
float64, one thread) every solver variant fits a fresh policy (same seed) for ``--updates``
updates from the start (``--large-updates`` from ``--large-n`` samples on), all in this one
process, one variant after the other, so that the timings are comparable as ratios. Reported:

- ``ms/upd``: mean wall time per update over those updates (the first included: it builds the
  candidate sets and the first preconditioner), ``solve ms``: the part spent in
  :meth:`NonparametricBellman.solve` (BiCGSTAB, preconditioner builds and applications),
  ``share``, ``its``: BiCGSTAB iterations per update (q + mu), ``builds``: ILU factorisations;
- accuracy at the same policy, at updates ``--checks``: the cosine between the update's gradient
  and the gradient from exact solutions (SuperLU's complete LU of ``I - P``; ``1-cos`` is the
  worst over the checks) and the relative error of ``J_hat`` (worst over the checks);
- the fit's drift against the reference variant (``--reference``, default a 1e-12 tolerance):
  the largest relative difference of the ``J_hat`` trajectories over all updates, and the true
  return of the final policy (Pendulum-v1 dynamics, 200 steps from the hanging position and the
  mean over 50 random starts).

Variants: explicit tolerances (the former default 1e-10, 1e-8, 1e-6) with the former ILU rule
(rebuilt when a solve needs more than 15 iterations); ``solver_tol="auto"`` (the default: a proven
error bound of 1e-3 for ``q`` and ``mu``, :func:`nopg.linalg.solvers.solve_bellman_auto`) with its
cost-based ILU rebuild, and with other error targets, rebuild rules (former rule, built once,
rebuilt every update, cheaper to build), lower-fill ILU, no preconditioner; and warm-started
Neumann (Jacobi) sweeps ``q <- r + P q``, ``mu <- eps0 + P^T mu`` (1, 10 or 100 per update).

    OMP_NUM_THREADS=1 python benchmarks/bench_solver.py                        # 10^4 and 10^5
    OMP_NUM_THREADS=1 python benchmarks/bench_solver.py --sizes 10000 --updates 100 \\
        --variants "tol 1e-10" auto
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse
import scipy.sparse.linalg
import torch
from _harness import Stopwatch, add_out_arg, time_calls, write_json
from bench_scale import pendulum_data

import nopg.model.bellman as nb
from nopg import NOPG, GradientAscent, ModelConfig, NOPGConfig, TransitionDataset
from nopg.bandwidth.selection import select_bandwidths
from nopg.linalg.solvers import SolveInfo
from nopg.policies.networks import DeterministicMLPPolicy

S0 = np.array([[-1.0, 0.0, 0.0]])   # the hanging pendulum: the initial state of the fit


def _set(**attrs: Any) -> Callable[[Any], None]:
    """A model tweak: set attributes of the model's linear solver after ``setup``."""
    def tweak(model: Any) -> None:
        for key, value in attrs.items():
            setattr(model.linear_solver, key, value)
    return tweak


def _neumann(sweeps: int) -> Callable[[Any], None]:
    """Replace the model's solve by ``sweeps`` warm-started Neumann (Jacobi) sweeps."""
    def tweak(model: Any) -> None:
        def solve(P, eps0, warm_start=None, rewards=None):
            P64 = P.detach().to(torch.float64)
            e = eps0.detach().to(torch.float64)
            r = model.rewards if rewards is None else rewards.detach().to(torch.float64)
            matvec, rmatvec = P64.operators()
            q, mu = (torch.zeros_like(r), torch.zeros_like(e)) if warm_start is None else warm_start
            for _ in range(sweeps):
                q, mu = r + matvec(q), e + rmatvec(mu)
            res_q = float(torch.linalg.vector_norm(r - q + matvec(q)) / torch.linalg.vector_norm(r))
            res_mu = float(torch.linalg.vector_norm(e - mu + rmatvec(mu)) / torch.linalg.vector_norm(e))
            return (q, mu, SolveInfo("neumann", sweeps, res_q, True),
                    SolveInfo("neumann", sweeps, res_mu, True))
        model.solve = solve
    return tweak


# name -> (config changes, model tweak or None)
VARIANTS: dict[str, tuple[dict[str, Any], Callable[[Any], None] | None]] = {
    "tol 1e-12 (reference)": (dict(solver_tol=1e-12), None),
    "tol 1e-10 (old default)": (dict(solver_tol=1e-10), None),
    "tol 1e-8": (dict(solver_tol=1e-8), None),
    "tol 1e-6": (dict(solver_tol=1e-6), None),
    "auto (default)": (dict(solver_tol="auto"), None),
    "auto, float64 iterations": (dict(solver_tol="auto", solver_precision="double"), None),
    "auto, error 1e-2": (dict(solver_tol="auto", solver_error=1e-2), None),
    "auto, kernel mean": (dict(solver_tol="auto", n_mc_next=None), None),
    "auto, kernel mean, error 1e-2": (dict(solver_tol="auto", n_mc_next=None, solver_error=1e-2),
                                      None),
    "auto, error 1e-1": (dict(solver_tol="auto", solver_error=1e-1), None),
    "auto, error 1e-4": (dict(solver_tol="auto", solver_error=1e-4), None),
    "auto, ILU old rule (>15 its)": (dict(solver_tol="auto"), _set(refresh="iterations")),
    "auto, ILU built once": (dict(solver_tol="auto"), _set(refresh="once")),
    "auto, ILU every update": (dict(solver_tol="auto"), _set(refresh="always")),
    "auto, ILU drop 1e-4 (old default)": (dict(solver_tol="auto"),
                                          _set(ilu_options=dict(drop_tol=1e-4))),
    "auto, ILU drop 1e-2 fill 3": (dict(solver_tol="auto"),
                                   _set(ilu_options=dict(drop_tol=1e-2, fill_factor=3.0))),
    "auto, ILU(0) (no fill)": (dict(solver_tol="auto"),
                               _set(ilu_options=dict(drop_tol=0.0, fill_factor=1.0))),
    "auto, no preconditioner": (dict(solver_tol="auto", preconditioner="none"), None),
    "tol 1e-6, no preconditioner": (dict(solver_tol=1e-6, preconditioner="none"), None),
    "Neumann 1 sweep/update": (dict(solver_tol=1e-10), _neumann(1)),
    "Neumann 10 sweeps/update": (dict(solver_tol=1e-10), _neumann(10)),
    "Neumann 100 sweeps/update": (dict(solver_tol=1e-10), _neumann(100)),
}
LARGE = ["tol 1e-12 (reference)", "tol 1e-10 (old default)", "tol 1e-6", "auto (default)",
         "auto, float64 iterations",
         "auto, error 1e-2", "auto, ILU old rule (>15 its)", "auto, ILU built once",
         "Neumann 10 sweeps/update"]


def pendulum_return(policy: torch.nn.Module, starts: np.ndarray, steps: int = 200) -> float:
    """Mean undiscounted return of ``policy`` on the Pendulum-v1 dynamics from ``(th, thdot)``."""
    th, thdot = starts[:, 0].copy(), starts[:, 1].copy()
    g, m, length, dt = 10.0, 1.0, 1.0, 0.05
    total = np.zeros(len(th))
    with torch.no_grad():
        for _ in range(steps):
            obs = torch.tensor(np.stack([np.cos(th), np.sin(th), thdot], 1), dtype=torch.float64)
            u = np.clip(policy(obs).numpy()[:, 0], -2.0, 2.0)
            norm_th = ((th + np.pi) % (2 * np.pi)) - np.pi
            total += -(norm_th ** 2 + 0.1 * thdot ** 2 + 0.001 * u ** 2)
            thdot = np.clip(thdot + (3 * g / (2 * length) * np.sin(th) + 3.0 / (m * length ** 2) * u) * dt,
                            -8.0, 8.0)
            th = th + thdot * dt
    return float(total.mean())


def _flat(grads: tuple[torch.Tensor, ...]) -> torch.Tensor:
    return torch.cat([g.reshape(-1) for g in grads]).double()


def run_variant(name: str, data: TransitionDataset, bw: Any, updates: int, checks: set[int],
                lr: float, seed: int = 0) -> dict[str, Any]:
    changes, tweak = VARIANTS[name]
    torch.manual_seed(seed)
    policy = DeterministicMLPPolicy(3, 1, action_max=2.0, hidden=(50,))
    config = NOPGConfig(optimizer=GradientAscent(learning_rate=lr),
                        model=ModelConfig(top_k=10, solver="bicgstab", **changes))
    algo = NOPG(policy, config)
    algo.setup(data, bw, S0)
    model = algo.model_
    if tweak is not None:
        tweak(model)
    solve_log: list[float] = []
    check_log: list[float] = []
    accuracy: list[dict[str, float]] = []
    build_log: list[float] = []
    time_calls(model, "solve", solve_log)
    time_calls(model.linear_solver, "build_ilu", build_log)
    inner_solution = model.solution
    counter = {"update": 0}

    def checked_solution(policy: Any, initial_states: Any, generator: Any = None, warm_start: Any = None):
        sol = inner_solution(policy, initial_states, generator, warm_start)
        counter["update"] += 1
        if counter["update"] in checks:
            with Stopwatch() as watch:
                accuracy.append(dict(update=counter["update"], **_accuracy(model, sol, policy)))
            check_log.append(watch.wall_s)
        return sol
    model.solution = checked_solution
    times, its, Js = [], [], []
    for _ in range(updates):
        n_checks, n_solves = len(check_log), len(solve_log)
        with Stopwatch() as watch:
            m = algo.step()
        times.append(watch.wall_s - sum(check_log[n_checks:]))   # the accuracy check is not timed
        assert len(solve_log) == n_solves + 1
        its.append(m["solver_iters_q"] + m["solver_iters_mu"])
        Js.append(m["J_hat"])
    starts = np.random.default_rng(1).uniform([-np.pi, -1.0], [np.pi, 1.0], (50, 2))
    return {"variant": name, "updates": updates, "ms_per_update": 1e3 * float(np.mean(times)),
            "solve_ms": 1e3 * float(np.mean(solve_log)),
            "solve_share": float(np.sum(solve_log) / np.sum(times)),
            "iterations": float(np.mean(its)), "builds": len(build_log),
            "build_ms": 1e3 * float(np.mean(build_log)) if build_log else 0.0,
            "worst_1_minus_cos": max(a["1-cos"] for a in accuracy) if accuracy else float("nan"),
            "worst_J_rel_err": max(a["J_rel_err"] for a in accuracy) if accuracy else float("nan"),
            "checks": accuracy, "J_hat": Js,
            "return_hanging": pendulum_return(algo.policy, np.array([[np.pi, 0.0]])),
            "return_random": pendulum_return(algo.policy, starts)}


def _accuracy(model: Any, sol: Any, policy: torch.nn.Module) -> dict[str, float]:
    """Gradient cosine and relative J_hat error of ``sol`` against exact solutions."""
    n = model.n
    P = sol.P.detach().to(torch.float64)
    A = (scipy.sparse.identity(n, format="csc") - P.to_scipy().tocsc()).tocsc()
    lu = scipy.sparse.linalg.splu(A)
    r = model.rewards.numpy()
    if model.unsupported == "absorb":
        r = r + model.absorbing_value * sol.lost_next.detach().double().numpy()
    e = sol.eps0.detach().to(torch.float64).numpy()
    q_x, mu_x = torch.from_numpy(lu.solve(r)), torch.from_numpy(lu.solve(e, "T"))
    params = [p for p in policy.parameters() if p.requires_grad]
    g = _flat(torch.autograd.grad(sol.surrogate(), params, retain_graph=True))
    exact = dataclasses.replace(sol, q=q_x, mu=mu_x)
    g_x = _flat(torch.autograd.grad(exact.surrogate(), params, retain_graph=True))
    J_x = float(torch.from_numpy(e) @ q_x)
    return {"1-cos": float(1.0 - g @ g_x / (g.norm() * g_x.norm())),
            "J_rel_err": abs(sol.J - J_x) / abs(J_x),
            "bound_q": sol.info_q.error_bound, "bound_mu": sol.info_mu.error_bound,
            "err_q": float((sol.q - q_x).abs().max() / (q_x.max() - q_x.min())),
            "err_mu": float((sol.mu - mu_x).abs().sum() / mu_x.abs().sum())}


def default_accuracy(n: int, updates: int, lr: float) -> dict[str, Any]:
    """The issue's criterion: ``NOPGConfig()`` defaults (Adam at ``lr``) fitted for ``updates``
    updates, then its ``J_hat`` and gradient against the exact dense top-k model (every
    log-weight, dense LU) at the same policy."""
    data = pendulum_data(n)
    bw = select_bandwidths(data, "silverman", action_factor=np.array([1.0]))
    torch.manual_seed(0)
    algo = NOPG(DeterministicMLPPolicy(3, 1, action_max=2.0, hidden=(50,)),
                NOPGConfig(optimizer=GradientAscent(learning_rate=lr)))
    algo.setup(data, bw, S0)
    for _ in range(updates):
        algo.step()
    resolved = algo.config.resolved(n)
    params = list(algo.policy.parameters())

    def estimate(model: Any, warm: Any) -> tuple[float, torch.Tensor, Any]:
        # the same generator seed for both models: the same Monte-Carlo next states (n_mc_next)
        sol = model.solution(algo.policy, algo.initial_states_, warm_start=warm,
                             generator=torch.Generator().manual_seed(0))
        return sol.J, _flat(torch.autograd.grad(sol.surrogate(), params)), sol

    state = algo.training_state()
    J, g, sol = estimate(algo.model_, (state["warm_q"], state["warm_mu"]))
    exact = nb.NonparametricBellman(data, algo.model_.bandwidths, algo.config.gamma, top_k=10,
                                    neighbors="dense", solver="dense",
                                    n_mc_next=algo.model_.n_mc_next)
    J_x, g_x, _ = estimate(exact, None)
    return {"n": n, "updates": updates, "top_k": resolved.top_k, "solver": resolved.solver,
            "n_mc_next": algo.model_.n_mc_next,
            "solver_tol": resolved.solver_tol, "J_rel_err": abs(J - J_x) / abs(J_x),
            "grad_cos": float(g @ g_x / (g.norm() * g_x.norm())),
            "error_bound_q": sol.info_q.error_bound, "error_bound_mu": sol.info_mu.error_bound}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="*", default=[10000, 100000])
    p.add_argument("--updates", type=int, default=100)
    p.add_argument("--large-updates", type=int, default=30)
    p.add_argument("--large-n", type=int, default=50000)
    p.add_argument("--variants", nargs="+", default=None,
                   help=f"subset of {list(VARIANTS)} (default: all; from --large-n on: {LARGE})")
    p.add_argument("--reference", default="tol 1e-12 (reference)")
    p.add_argument("--checks", type=int, nargs="+", default=[1, 10, 30, 50, 100])
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--warmup", type=int, default=3, help="updates of an untimed fit before the table")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--return-seeds", type=int, default=0,
                   help="also fit --return-variants from this many policy seeds (1, 2, ...) and "
                        "report the final returns' mean and spread (the J_hat trajectories of "
                        "any two variants part after a few dozen updates: Adam's first steps are "
                        "close to sign(gradient), so tiny differences change the fit)")
    p.add_argument("--return-variants", nargs="+",
                   default=["tol 1e-12 (reference)", "tol 1e-10 (old default)", "auto (default)"])
    p.add_argument("--accuracy-n", type=int, nargs="*", default=[],
                   help="also check NOPGConfig() defaults after --updates updates against the "
                        "exact dense top-k model at these sizes (the issue's criterion: n = 3000)")
    add_out_arg(p, "--json", help="also write the results (with the J_hat trajectories) here")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    unknown = [v for v in args.variants or [] if v not in VARIANTS]
    if unknown:
        p.error(f"unknown variants {unknown}; known: {list(VARIANTS)}")
    print(f"# NOPG solver variants: Pendulum-like data, top_k=10, Adam {args.lr:g}, float64, "
          f"{torch.get_num_threads()} thread(s) on {os.cpu_count()} cores; times are means over "
          "the first updates of one fit (ratios within one n are comparable)")
    results = []
    for n in args.sizes or []:
        data = pendulum_data(n)
        bw = select_bandwidths(data, "silverman", action_factor=np.array([1.0]))
        updates = args.large_updates if n >= args.large_n else args.updates
        names = args.variants or (LARGE if n >= args.large_n else list(VARIANTS))
        if args.reference not in names:
            names = [args.reference] + names
        names = [args.reference] + [v for v in names if v != args.reference]
        checks = {c for c in args.checks if c <= updates} | {updates}
        run_variant("auto (default)", data, bw, args.warmup, set(), args.lr)   # untimed warm-up
        print(f"\nn = {n}: {updates} updates, accuracy checked at updates {sorted(checks)}")
        print(f"{'variant':32s} {'ms/upd':>8} {'solve ms':>9} {'share':>6} {'its':>6} {'builds':>6} "
              f"{'1-cos':>8} {'J err':>8} {'drift':>8} {'ret(hang)':>10} {'ret(rand)':>10}")
        ref = None
        for name in names:
            row = run_variant(name, data, bw, updates, checks, args.lr)
            row["n"] = n
            if ref is None:
                ref = row
            Js, J_ref = np.array(row["J_hat"]), np.array(ref["J_hat"])
            row["J_drift"] = float(np.max(np.abs(Js - J_ref) / np.abs(J_ref)))
            results.append(row)
            print(f"{name:32s} {row['ms_per_update']:8.1f} {row['solve_ms']:9.1f} "
                  f"{row['solve_share']:6.2f} {row['iterations']:6.1f} {row['builds']:6d} "
                  f"{row['worst_1_minus_cos']:8.1e} {row['worst_J_rel_err']:8.1e} "
                  f"{row['J_drift']:8.1e} {row['return_hanging']:10.1f} {row['return_random']:10.1f}",
                  flush=True)
        if args.return_seeds:
            print(f"final returns over policy seeds 1..{args.return_seeds} ({updates} updates): "
                  "mean +- sd (hanging start / random starts) and J_hat")
            for name in args.return_variants:
                rows = [run_variant(name, data, bw, updates, set(), args.lr, seed)
                        for seed in range(1, args.return_seeds + 1)]
                stats = {key: (float(np.mean([r[key] for r in rows])), float(np.std([r[key] for r in rows])))
                         for key in ("return_hanging", "return_random")}
                J = [r["J_hat"][-1] for r in rows]
                results.append({"n": n, "variant": name, "seeds": args.return_seeds, **stats,
                                "final_J_hat": J, "ms_per_update": [r["ms_per_update"] for r in rows]})
                print(f"  {name:32s} {stats['return_hanging'][0]:9.1f} +- {stats['return_hanging'][1]:6.1f}"
                      f" / {stats['return_random'][0]:9.1f} +- {stats['return_random'][1]:6.1f}   J_hat "
                      f"{np.mean(J):9.2f} +- {np.std(J):6.2f}", flush=True)
    for n in args.accuracy_n:
        row = default_accuracy(n, args.updates, args.lr)
        results.append(row)
        print(f"\nNOPGConfig() at n = {n} (top_k={row['top_k']}, solver={row['solver']}, "
              f"solver_tol={row['solver_tol']!r}) after {row['updates']} updates vs the exact dense "
              f"top-k model (n_mc_next={row['n_mc_next']}, the same draws): gradient cosine "
              f"{row['grad_cos']:.7f}, relative J_hat error "
              f"{row['J_rel_err']:.1e} (error bounds q {row['error_bound_q']:.1e}, mu "
              f"{row['error_bound_mu']:.1e})", flush=True)
    if args.out:
        write_json(args.out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
