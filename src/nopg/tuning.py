"""Pick the sparsification ``k`` and the candidate count ``K'`` for a data set (DESIGN §2).

:func:`neighbor_report` answers, for one data set, bandwidths and policy:

- for each ``k``: how much of each row's kernel mass the ``k`` kept entries carry (before the
  renormalisation; measured exactly on a subsample of rows against all ``n`` points, chunked),
  and how far ``J_hat`` and its gradient move against a reference (the dense ``P`` when ``n`` is
  small enough, otherwise the largest ``k`` asked for);
- for each ``K'``: after the policy moves by a typical update (every parameter perturbed by
  ``policy_step`` times its scale), the fraction of rows the certificate still vouches for (the
  others cost an exact k-NN query that update) and, for ``refine=False``, the error of ``J_hat``
  and the gradient cosine against the exact top-k.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from .bandwidth import Bandwidths
from .bellman import NonparametricBellman
from .data import TransitionDataset


@dataclass
class NeighborReport:
    """Results of :func:`neighbor_report` (one dict per ``k`` and per ``K'``)."""

    n: int
    reference: str
    k_rows: list[dict[str, float]] = field(default_factory=list)
    candidate_rows: list[dict[str, float]] = field(default_factory=list)

    def to_text(self) -> str:
        lines = [f"n = {self.n}; k errors against {self.reference}",
                 f"{'k':>6} {'mass min':>9} {'mass p5':>8} {'mass mean':>10} {'J rel err':>10} "
                 f"{'grad cos':>9}"]
        for r in self.k_rows:
            lines.append(f"{r['k']:>6} {r['mass_min']:9.4f} {r['mass_p5']:8.4f} {r['mass_mean']:10.4f} "
                         f"{r['J_rel_err']:10.2e} {r['grad_cos']:9.6f}")
        if self.candidate_rows:
            lines.append(f"{'K_cand':>6} {'certified':>10} {'approx J rel err':>17} {'approx grad cos':>16}")
            for r in self.candidate_rows:
                lines.append(f"{r['n_candidates']:>6} {r['certified']:10.4f} "
                             f"{r['approx_J_rel_err']:17.2e} {r['approx_grad_cos']:16.6f}")
        return "\n".join(lines)


def _estimate(model: NonparametricBellman, policy: nn.Module, s0: np.ndarray
              ) -> tuple[float, np.ndarray]:
    sol = model.evaluate(policy, s0, torch.Generator().manual_seed(0))
    grads = torch.autograd.grad(sol.surrogate(), list(policy.parameters()), allow_unused=True)
    flat = torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1)
                      for p, g in zip(policy.parameters(), grads)])
    return sol.J, flat.detach().cpu().numpy().astype(np.float64)


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-300))


def _moved(policy: nn.Module, step: float, seed: int) -> nn.Module:
    other = copy.deepcopy(policy)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in other.parameters():
            scale = float(p.detach().abs().mean()) or 1.0
            p.add_(step * scale * torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p))
    return other


@torch.no_grad()
def _kept_mass(model: NonparametricBellman, policy: nn.Module, rows: np.ndarray, ks: list[int],
               chunk: int = 256) -> dict[int, np.ndarray]:
    """Fraction of the full softmax mass of P's rows ``rows`` in their ``k`` largest entries."""
    out: dict[int, list[np.ndarray]] = {k: [] for k in ks}
    kmax = max(ks)
    for start in range(0, rows.size, chunk):
        idx = torch.as_tensor(rows[start:start + chunk], device=model.device)
        s = model.next_states[idx]
        actions = model._actions(policy, model._policy_input(policy, s), None)[:, 0, :] / model.h_a
        ds = s[:, None, :] / model.h_s - model.states_scaled[None, :, :]
        da = actions[:, None, :] - model.actions_scaled[None, :, :]
        logits = -0.5 * ((ds * ds).sum(-1) + (da * da).sum(-1))              # (c, n), c small
        total = torch.logsumexp(logits, dim=1)
        top = torch.topk(logits, kmax, dim=1).values
        for k in ks:
            out[k].append(torch.exp(torch.logsumexp(top[:, :k], dim=1) - total).cpu().numpy())
    return {k: np.concatenate(v) for k, v in out.items()}


def neighbor_report(dataset: TransitionDataset, bandwidths: Bandwidths, policy: nn.Module,
                    initial_states: np.ndarray, *, gamma: float = 0.99,
                    ks: tuple[int, ...] = (5, 10, 20, 40), candidates: tuple[int, ...] = (16, 32, 64),
                    top_k: int = 10, policy_step: float = 0.05, mass_rows: int = 1000,
                    dense_max_n: int = 4000, seed: int = 0) -> NeighborReport:
    """Measure what ``k`` and ``K'`` cost in accuracy on this data set (module docstring).

    Parameters
    ----------
    dataset, bandwidths, policy, initial_states
        As for :class:`nopg.NOPG` (a deterministic policy; evaluated in float64 on the CPU).
    ks : candidate values of ``top_k``.
    candidates : candidate values of ``n_candidates`` (evaluated at ``top_k``).
    policy_step : relative size of the simulated policy update for the certificate check.
    mass_rows : rows of ``P`` on which the kept mass is measured exactly.
    dense_max_n : above this ``n`` the reference is the largest ``k`` instead of the dense ``P``.
    """
    ks_sorted = sorted({int(k) for k in ks if 1 <= int(k) <= dataset.n})
    if not ks_sorted:
        raise ValueError(f"ks must hold values between 1 and n = {dataset.n}. Got {ks!r} instead.")
    policy = copy.deepcopy(policy).to(torch.float64)
    rng = np.random.default_rng(seed)
    n = dataset.n
    rows = rng.choice(n, size=min(mass_rows, n), replace=False)
    base = NonparametricBellman(dataset, bandwidths, gamma, top_k=max(ks_sorted))
    mass = _kept_mass(base, policy, rows, ks_sorted)

    if n <= dense_max_n:
        reference = "the dense P (every entry)"
        ref_model = NonparametricBellman(dataset, bandwidths, gamma)
    else:
        reference = f"top_k = {max(ks_sorted)}"
        ref_model = base
    J_ref, g_ref = _estimate(ref_model, policy, initial_states)
    report = NeighborReport(n=n, reference=reference)
    for k in ks_sorted:
        J, g = _estimate(NonparametricBellman(dataset, bandwidths, gamma, top_k=k), policy, initial_states)
        m = mass[k]
        report.k_rows.append({"k": k, "mass_min": float(m.min()), "mass_p5": float(np.percentile(m, 5)),
                              "mass_mean": float(m.mean()),
                              "J_rel_err": abs(J - J_ref) / max(abs(J_ref), 1e-300),
                              "grad_cos": _cos(g, g_ref)})

    moved = _moved(policy, policy_step, seed)
    J_exact, g_exact = _estimate(NonparametricBellman(dataset, bandwidths, gamma, top_k=top_k),
                                 moved, initial_states)
    for kc in candidates:
        exact = NonparametricBellman(dataset, bandwidths, gamma, top_k=top_k, n_candidates=kc)
        approx = NonparametricBellman(dataset, bandwidths, gamma, top_k=top_k, n_candidates=kc,
                                      refine=False)
        for model in (exact, approx):
            model.transition_matrix(policy)            # candidates built at the current policy
        exact.refined_rows_ = 0
        exact.transition_matrix(moved)
        J_a, g_a = _estimate(approx, moved, initial_states)
        report.candidate_rows.append({
            "n_candidates": int(min(kc, n)), "certified": 1.0 - exact.refined_rows_ / n,
            "approx_J_rel_err": abs(J_a - J_exact) / max(abs(J_exact), 1e-300),
            "approx_grad_cos": _cos(g_a, g_exact)})
    return report
