"""How accurately the Bellman systems need solving when the next states are drawn (issue: scale).

With ``n_mc_next`` draws per transition (the library's default below 10^5 samples) the model's
``P`` is itself a random estimate, new at every update. This script fits ``--updates`` updates
of the library's defaults on ``bench_scale.py``'s Pendulum-like data, then, at the fitted
policy and for two independent sets of draws, solves both systems with
``nopg.linalg.solvers.solve_bellman_auto`` at several error targets (the preconditioner of
``nopg.linalg.solvers.ilu_preconditioner`` built on each ``P``, warm starts from a third set of draws,
as in a fit) and reports, per target:

- the BiCGSTAB iterations (``q`` + ``mu``);
- ``1 - cos`` between the gradient of ``J_hat`` and the one from a tight solve of the same draws;
- the change in ``J_hat`` against that tight solve;

and, for comparison, ``1 - cos`` and the ``J_hat`` difference between the tight solutions of the
two sets of draws: the Monte-Carlo noise a solve error competes with.

    OMP_NUM_THREADS=1 python benchmarks/bench_draw_noise.py --n 10000 --updates 30
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np
import torch
from bench_scale import fitted_defaults

from nopg import NOPG
from nopg.linalg.solvers import ilu_preconditioner, solve_bellman_auto
from nopg.model.bellman import BellmanSolution

TIGHT = 1e-9


def _gradient(algo: NOPG, sol: BellmanSolution, q: torch.Tensor, mu: torch.Tensor) -> np.ndarray:
    params = list(algo.policy.parameters())
    grads = torch.autograd.grad(dataclasses.replace(sol, q=q, mu=mu).surrogate(), params,
                                retain_graph=True)
    return torch.cat([g.reshape(-1) for g in grads]).double().numpy()


def _solves(algo: NOPG, seed: int, warm: tuple[torch.Tensor, torch.Tensor],
            errors: list[float]) -> dict[float, tuple[np.ndarray, float, int]]:
    """Gradient, ``J_hat`` and iterations per error target for one set of draws."""
    model = algo.model_
    sol = model.solution(algo.policy, algo.initial_states_, torch.Generator().manual_seed(seed))
    P = sol.P.detach().to(torch.float64).to_scipy().tocsr()
    PT = P.T.tocsr()
    pre, pre_t = ilu_preconditioner(P)
    eps0 = sol.eps0.detach().to(torch.float64)
    rewards = model.rewards.to(torch.float64)
    out = {}
    for error in [TIGHT, *errors]:
        q, mu, info_q, info_mu = solve_bellman_auto(
            lambda v: torch.from_numpy(P @ v.numpy()), lambda v: torch.from_numpy(PT @ v.numpy()),
            rewards, eps0, algo.config.gamma, warm, error=error, precond=pre,
            precond_transpose=pre_t)
        out[error] = (_gradient(algo, sol, q, mu), float(eps0 @ q),
                      info_q.iterations + info_mu.iterations)
    return out


def _one_minus_cos(a: np.ndarray, b: np.ndarray) -> float:
    return 1.0 - float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=10_000)
    p.add_argument("--updates", type=int, default=30)
    p.add_argument("--draws", type=int, default=3)
    p.add_argument("--errors", type=float, nargs="+", default=[1e-3, 1e-2, 3e-2, 1e-1])
    args = p.parse_args()
    torch.set_num_threads(1)
    algo = fitted_defaults(args.n, args.updates, args.draws)
    warm_sol = algo.model_.solution(algo.policy, algo.initial_states_,
                                    torch.Generator().manual_seed(99))
    warm = (warm_sol.q, warm_sol.mu)
    a = _solves(algo, 1, warm, args.errors)
    b = _solves(algo, 2, warm, [])
    print(f"n = {args.n}, {args.draws} drawn next states per transition, after {args.updates} "
          "updates of the defaults")
    print(f"{'error target':>12} {'iterations':>10} {'1 - cos (same draws)':>21} {'|dJ_hat|':>10}")
    g_ref, J_ref, _ = a[TIGHT]
    for error in args.errors:
        g, J, its = a[error]
        print(f"{error:12.0e} {its:10d} {_one_minus_cos(g, g_ref):21.1e} {abs(J - J_ref):10.4f}")
    g2, J2, _ = b[TIGHT]
    print(f"{'other draws':>12} {'':>10} {_one_minus_cos(g2, g_ref):21.1e} {abs(J2 - J_ref):10.4f}"
          "   (two tight solves)")


if __name__ == "__main__":
    main()
