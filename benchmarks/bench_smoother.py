"""One symmetric Gauss-Seidel sweep on a NOPG system: PyAMG's relaxation against triangular solves.

The aggregation preconditioner (``nopg.linalg.solvers.aggregation_preconditioner``) smooths with a
symmetric Gauss-Seidel sweep of ``A = I - P``. This script takes ``P`` from one update of the
library's defaults on ``bench_scale.py``'s Pendulum-like data (kernel-mean next states), in the
aggregates' order the solver uses, and times, per sweep (best of ``--repeats``):

- PyAMG's compiled ``gauss_seidel`` (what the library uses);
- the same sweep as two SuperLU triangular solves plus products with the strict triangles (the
  library's implementation before 2026-11-26);
- for scale, one product with ``A``.

Both sweeps must agree to round-off (the script checks).

    OMP_NUM_THREADS=1 python benchmarks/bench_smoother.py --sizes 100000 1000000
"""

from __future__ import annotations

import argparse

import numpy as np
import scipy.sparse
import scipy.sparse.linalg
import torch
from _harness import TablePrinter, best_of, ratio
from bench_scale import fitted_defaults
from pyamg.relaxation.relaxation import gauss_seidel

COLUMNS = [("n", "n", "9d"), ("entries", "entries", "10d"), ("PyAMG ms", "pyamg_ms", "9.1f"),
           ("SuperLU ms", "superlu_ms", "11.1f"), ("ratio", "ratio", "6.2f"),
           ("A x ms", "product_ms", "7.1f"), ("max diff", "diff", "9.1e")]


def system(n: int) -> scipy.sparse.csr_matrix:
    """``A = I - P`` at the policy after one update, samples in the aggregates' order."""
    algo = fitted_defaults(n, 1, None)
    model = algo.model_
    P = model.solution(algo.policy, algo.initial_states_).P.detach().to(torch.float64)
    order, inverse = model.linear_solver._sample_order()
    A = scipy.sparse.identity(n, format="csr") - P.permuted(order, inverse).to_scipy()
    A = A.tocsr()
    A.sort_indices()
    return A


def _triangle(triangle: scipy.sparse.csc_matrix) -> scipy.sparse.linalg.SuperLU:
    """SuperLU's exact factor of a triangle in its own order (no fill, no pivoting)."""
    return scipy.sparse.linalg.spilu(triangle, drop_tol=0.0, drop_rule="basic", fill_factor=1.5,
                                     permc_spec="NATURAL", diag_pivot_thresh=0.0,
                                     options=dict(SymmetricMode=True))


def measure(n: int, repeats: int) -> dict[str, float]:
    """Times (s) of one symmetric sweep by PyAMG and by SuperLU, and of a product with ``A``."""
    A = system(n)
    rng = np.random.default_rng(0)
    b, x0 = rng.normal(size=n), rng.normal(size=n)
    lower = _triangle(scipy.sparse.tril(A, format="csc"))
    upper = _triangle(scipy.sparse.triu(A, format="csc"))
    strict_upper = scipy.sparse.triu(A, k=1, format="csr")
    strict_lower = scipy.sparse.tril(A, k=-1, format="csr")

    def pyamg_sweep() -> np.ndarray:
        x = x0.copy()
        gauss_seidel(A, x, b, iterations=1, sweep="symmetric")
        return x

    def superlu_sweep() -> np.ndarray:
        x = lower.solve(b - strict_upper @ x0)
        return upper.solve(b - strict_lower @ x)

    t_amg, x_amg = best_of(pyamg_sweep, repeats)
    t_lu, x_lu = best_of(superlu_sweep, repeats)
    t_mv, _ = best_of(lambda: A @ x0, repeats)
    diff = float(np.abs(x_amg - x_lu).max() / np.abs(x_lu).max())
    assert diff < 1e-10, diff
    return {"entries": A.nnz, "pyamg": t_amg, "superlu": t_lu, "product": t_mv, "diff": diff}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    torch.set_num_threads(1)
    table = TablePrinter(COLUMNS)
    table.header()
    for n in args.sizes:
        r = measure(n, args.repeats)
        table.row({"n": n, "entries": r["entries"], "pyamg_ms": 1e3 * r["pyamg"],
                   "superlu_ms": 1e3 * r["superlu"], "ratio": ratio(r["superlu"], r["pyamg"]),
                   "product_ms": 1e3 * r["product"], "diff": r["diff"]})


if __name__ == "__main__":
    main()
