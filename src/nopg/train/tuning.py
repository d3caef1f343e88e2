"""Pick ``top_k`` (the entries kept per row of ``P``) and ``n_candidates`` for a data set.

:func:`neighbor_report` answers, for one data set, bandwidths and policy:

- for each ``top_k`` value ``k`` (the report's column ``k``): how much of each row's kernel
  mass the ``k`` kept entries carry (before the renormalisation; measured exactly on a subsample
  of rows against all ``n`` points, chunked), and how far ``J_hat`` and its gradient move
  against a reference (the dense ``P`` when ``n`` is small enough, otherwise the largest ``k``
  asked for);
- for each ``n_candidates`` value: after the policy moves by a typical update (every parameter perturbed by
  ``policy_step`` times its scale), the fraction of rows the certificate still vouches for (the
  others cost an exact k-NN query that update) and, for ``refine=False``, the error of ``J_hat``
  and the gradient cosine against the exact top-k.

It recommends the smallest ``k`` whose ``J_hat`` and gradient agree with the reference within
stated thresholds (:data:`J_REL_ERR_MAX`, :data:`GRAD_COS_MIN`, :data:`GRAD_NORM_RATIO`).

Why a gradient cosine can have either sign: the cosine compares directions only. When the kept
entries' weights barely depend on the policy's actions (e.g. every kept neighbour of a next state
carries the same action, as with human demonstrations whose "coast" action is exactly 0), the
top-k model's gradient is zero up to round-off (``|grad| ~ 1e-14`` against ``~1e-5`` for the
dense ``P`` on the bundled mountain-car data at a fresh policy) and its cosine with anything is
noise (-0.97 at one k, 0.99 at the next). The report therefore prints each gradient's norm
relative to the reference's, marks the round-off ones, and the recommendation requires the norm
to match too. (The policy and the seed of every estimate are the same for all ``k``.)
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from ..bandwidth.selection import Bandwidths
from ..data.dataset import TransitionDataset
from ..model.bellman import NonparametricBellman
from ..model.kernels import log_weights
from .gradient import surrogate_gradient

J_REL_ERR_MAX = 0.01
"""Recommendation threshold: ``|J_hat(k) - J_hat(ref)| / |J_hat(ref)|`` at most 1 %."""
GRAD_COS_MIN = 0.99
"""Recommendation threshold: cosine between the ``k`` and the reference gradient at least 0.99."""
GRAD_NORM_RATIO = (0.5, 2.0)
"""Recommendation threshold: ``|grad(k)| / |grad(ref)|`` within this range (no vanishing gradient)."""
ROUNDOFF_RATIO = 1e-6
"""A gradient below this fraction of the reference's norm is marked as round-off (cosine = noise)."""
TINY_GRADIENT = 1e-8
"""The reference gradient is called tiny when ``|grad| < TINY_GRADIENT * max(|J_hat|, 1e-12)``."""


@dataclass
class NeighborReport:
    """Results of :func:`neighbor_report` (one dict per ``top_k`` value ``k`` and per
    ``n_candidates`` value).

    ``k_rows`` hold ``k``, ``mass_min``/``mass_p5``/``mass_mean`` (share of a row's kernel mass in
    its ``k`` kept entries), ``J``, ``J_rel_err``, ``grad_cos``, ``grad_norm`` and
    ``grad_norm_ratio`` (``|grad(k)| / |grad(ref)|``); ``candidate_rows`` hold ``n_candidates``,
    ``certified``, ``approx_J_rel_err``, ``approx_grad_cos`` and ``exact_grad_norm`` (of the
    exact top-k gradient at the moved policy).
    """

    n: int
    reference: str
    k_rows: list[dict[str, float]] = field(default_factory=list)
    candidate_rows: list[dict[str, float]] = field(default_factory=list)
    reference_J: float | None = None
    reference_grad_norm: float | None = None
    reference_k: int | None = None
    """The ``k`` serving as the reference (``None``: the dense ``P``)."""
    top_k: int | None = None
    bandwidths: dict[str, Any] | None = None
    gamma: float | None = None

    @staticmethod
    def meets_thresholds(row: dict[str, float]) -> bool:
        """Whether a ``k`` row meets :data:`J_REL_ERR_MAX`, :data:`GRAD_COS_MIN` and
        :data:`GRAD_NORM_RATIO`."""
        ratio = row.get("grad_norm_ratio", 1.0)
        return (row["J_rel_err"] <= J_REL_ERR_MAX and row["grad_cos"] >= GRAD_COS_MIN
                and GRAD_NORM_RATIO[0] <= ratio <= GRAD_NORM_RATIO[1])

    @property
    def recommended_k(self) -> int | None:
        """The smallest ``k`` meeting the thresholds (not the reference ``k`` itself), or None."""
        for row in sorted(self.k_rows, key=lambda r: r["k"]):
            if row["k"] != self.reference_k and self.meets_thresholds(row):
                return int(row["k"])
        return None

    @property
    def reference_gradient_tiny(self) -> bool:
        """Whether the reference gradient is negligible against ``J_hat`` (cosines uninformative)."""
        if self.reference_grad_norm is None or self.reference_J is None:
            return False
        return self.reference_grad_norm < TINY_GRADIENT * max(abs(self.reference_J), 1e-12)

    def thresholds(self) -> dict[str, Any]:
        return {"J_rel_err_max": J_REL_ERR_MAX, "grad_cos_min": GRAD_COS_MIN,
                "grad_norm_ratio": list(GRAD_NORM_RATIO)}

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form, with ``recommended_k`` and the ``thresholds`` behind it."""
        return {"n": self.n, "reference": self.reference, "reference_k": self.reference_k,
                "reference_J": self.reference_J, "reference_grad_norm": self.reference_grad_norm,
                "reference_gradient_tiny": self.reference_gradient_tiny,
                "bandwidths": self.bandwidths, "gamma": self.gamma, "top_k": self.top_k,
                "k_rows": self.k_rows, "candidate_rows": self.candidate_rows,
                "recommended_k": self.recommended_k, "thresholds": self.thresholds()}

    def _recommendation_text(self) -> str:
        lo, hi = GRAD_NORM_RATIO
        rule = (f"J rel err <= {J_REL_ERR_MAX:g}, grad cos >= {GRAD_COS_MIN:g} and |grad|/|ref| "
                f"in [{lo:g}, {hi:g}]")
        k = self.recommended_k
        if k is not None:
            text = f"recommended k = {k}: the smallest k with {rule}"
            if self.reference_k is not None:
                text += f" (against top_k = {self.reference_k}, not the dense P)"
            return text
        tried = max((int(r["k"]) for r in self.k_rows), default=0)
        return (f"recommended k: none, no k meets {rule}; try k above {tried}"
                + (" (the largest k is the reference, so confirm with a larger one)"
                   if self.reference_k is not None else "")
                + " or wider bandwidths (more kernel mass in the kept entries)")

    def to_text(self) -> str:
        head = f"n = {self.n}"
        if self.gamma is not None:
            head += f"; gamma = {self.gamma:g}"
        if self.bandwidths is not None:
            fmt = lambda v: "[" + ", ".join(f"{x:.4g}" for x in v) + "]"  # noqa: E731
            head += (f"; bandwidths state {fmt(self.bandwidths['state'])}, action "
                     f"{fmt(self.bandwidths['action'])}")
        ref_norm = ("" if self.reference_grad_norm is None
                    else f"; |ref grad| = {self.reference_grad_norm:.3g}")
        if self.reference_J is not None:
            ref_norm += f", J_hat(ref) = {self.reference_J:.6g}"
        lines = [head,
                 f"top_k = k against {self.reference}{ref_norm}:",
                 "  mass min/p5/mean  share of a row's kernel mass in its k kept entries (before "
                 "renormalisation; min, 5th percentile, mean over sampled rows)",
                 "  J rel err         |J_hat(k) - J_hat(ref)| / |J_hat(ref)|",
                 "  grad cos          cosine between the policy gradients of k and of the reference",
                 "  |grad|/|ref|      norm of the k gradient over the reference's; '*': round-off "
                 "level, so its cosine is noise",
                 f"{'k':>6} {'mass min':>9} {'mass p5':>8} {'mass mean':>10} {'J rel err':>10} "
                 f"{'grad cos':>9} {'|grad|/|ref|':>13}"]
        flagged = False
        for r in self.k_rows:
            ratio = r.get("grad_norm_ratio", math.nan)
            mark = "*" if ratio < ROUNDOFF_RATIO else " "
            flagged |= mark == "*"
            lines.append(f"{r['k']:>6} {r['mass_min']:9.4f} {r['mass_p5']:8.4f} {r['mass_mean']:10.4f} "
                         f"{r['J_rel_err']:10.2e} {r['grad_cos']:9.6f} {ratio:12.3g}{mark}")
        if flagged:
            lines.append("  * the kept weights barely depend on the policy's actions (e.g. all kept "
                         "neighbours share one action): that k's gradient vanishes and its cosine "
                         "can take either sign")
        if self.reference_gradient_tiny:
            lines.append(f"  note: the reference gradient is tiny (|grad| = "
                         f"{self.reference_grad_norm:.3g} against J_hat = {self.reference_J:.4g}): "
                         "the policy is near a stationary point of J_hat, so the cosines say "
                         "little; judge k by J rel err and mass")
        lines.append(self._recommendation_text())
        if self.candidate_rows:
            at = f" = {self.top_k}" if self.top_k is not None else ""
            lines += ["",
                      f"candidate counts at top_k{at}, after a typical policy update:",
                      "  K_cand            candidate neighbours kept per query (n_candidates)",
                      "  certified         share of rows the certificate still vouches for (the "
                      "others cost an exact k-NN query)",
                      "  approx J rel err, approx grad cos   refine=False (stale candidates) "
                      "against the exact top-k",
                      f"{'K_cand':>6} {'certified':>10} {'approx J rel err':>17} "
                      f"{'approx grad cos':>16}"]
            for r in self.candidate_rows:
                lines.append(f"{r['n_candidates']:>6} {r['certified']:10.4f} "
                             f"{r['approx_J_rel_err']:17.2e} {r['approx_grad_cos']:16.6f}")
            exact = [r["exact_grad_norm"] for r in self.candidate_rows if "exact_grad_norm" in r]
            if exact and self.reference_grad_norm and \
                    max(exact) < ROUNDOFF_RATIO * self.reference_grad_norm:
                lines.append(f"  the exact top_k{at} gradient is at round-off level here "
                             f"(|grad| = {max(exact):.2g}), so approx grad cos is noise")
        return "\n".join(lines)


def _estimate(model: NonparametricBellman, policy: nn.Module, s0: np.ndarray
              ) -> tuple[float, np.ndarray]:
    sol = model.solution(policy, s0, torch.Generator().manual_seed(0))
    flat = torch.cat([g.reshape(-1) for g in surrogate_gradient(sol.surrogate(),
                                                                list(policy.parameters()))])
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
def _kept_mass(model: NonparametricBellman, policy: nn.Module, rows: np.ndarray,
               top_k_values: list[int], chunk: int = 256) -> dict[int, np.ndarray]:
    """Fraction of the full softmax mass of P's rows ``rows`` in their ``top_k`` largest entries,
    for each of ``top_k_values``."""
    out: dict[int, list[np.ndarray]] = {top_k: [] for top_k in top_k_values}
    largest = max(top_k_values)
    for start in range(0, rows.size, chunk):
        idx = torch.as_tensor(rows[start:start + chunk], device=model.device)
        s = model.next_states[idx]
        actions = model.policy_actions(policy, s)[:, 0, :] / model.h_a
        logits = log_weights(s[:, None, :] / model.h_s, actions[:, None, :],
                             model.states_scaled[None, :, :], model.actions_scaled[None, :, :])
        total = torch.logsumexp(logits, dim=1)
        top = torch.topk(logits, largest, dim=1).values
        for top_k in top_k_values:
            out[top_k].append(torch.exp(torch.logsumexp(top[:, :top_k], dim=1) - total).cpu().numpy())
    return {k: np.concatenate(v) for k, v in out.items()}


def neighbor_report(data: TransitionDataset, bandwidths: Bandwidths, policy: nn.Module,
                    initial_states: np.ndarray, *, gamma: float = 0.99,
                    top_k_values: tuple[int, ...] = (5, 10, 20, 40),
                    n_candidates_values: tuple[int, ...] = (16, 32, 64), top_k: int = 10,
                    policy_step: float = 0.05, mass_rows: int = 1000, dense_max_n: int = 4000,
                    seed: int = 0) -> NeighborReport:
    """Measure what ``top_k`` and ``n_candidates`` cost in accuracy on this data set (module
    docstring).

    Parameters
    ----------
    data, bandwidths, policy, initial_states
        As for :class:`nopg.NOPG` (a deterministic policy; evaluated in float64 on the CPU).
    top_k_values : the values of ``top_k`` to compare (formerly ``ks``).
    n_candidates_values : the values of ``n_candidates`` to compare at ``top_k`` (formerly
        ``candidates``).
    top_k : the ``top_k`` of the ``n_candidates`` comparison.
    policy_step : relative size of the simulated policy update for the certificate check.
    mass_rows : rows of ``P`` on which the kept mass is measured exactly.
    dense_max_n : above this ``n`` the reference is the largest ``top_k`` instead of the dense ``P``.
    seed : seed of the sampled rows and of the simulated policy update.

    Returns
    -------
    NeighborReport
        With :attr:`NeighborReport.recommended_k`, the smallest ``top_k`` meeting the thresholds.
    """
    values = sorted({int(k) for k in top_k_values if 1 <= int(k) <= data.n})
    if not values:
        raise ValueError(f"top_k_values must hold values between 1 and n = {data.n}. "
                         f"Got {top_k_values!r} instead.")
    policy = copy.deepcopy(policy).to(torch.float64)
    rng = np.random.default_rng(seed)
    n = data.n
    rows = rng.choice(n, size=min(mass_rows, n), replace=False)
    base = NonparametricBellman(data, bandwidths, gamma, top_k=max(values))
    mass = _kept_mass(base, policy, rows, values)

    if n <= dense_max_n:
        reference, reference_k = "the dense P (every entry)", None
        ref_model = NonparametricBellman(data, bandwidths, gamma)
    else:
        reference, reference_k = f"top_k = {max(values)}", max(values)
        ref_model = base
    J_ref, g_ref = _estimate(ref_model, policy, initial_states)
    ref_norm = float(np.linalg.norm(g_ref))
    report = NeighborReport(n=n, reference=reference, reference_J=float(J_ref),
                            reference_grad_norm=ref_norm, reference_k=reference_k, top_k=int(top_k),
                            bandwidths=bandwidths.to_dict(), gamma=float(gamma))
    for k in values:
        J, g = _estimate(NonparametricBellman(data, bandwidths, gamma, top_k=k), policy, initial_states)
        m = mass[k]
        norm = float(np.linalg.norm(g))
        report.k_rows.append({"k": k, "mass_min": float(m.min()), "mass_p5": float(np.percentile(m, 5)),
                              "mass_mean": float(m.mean()), "J": float(J),
                              "J_rel_err": abs(J - J_ref) / max(abs(J_ref), 1e-300),
                              "grad_cos": _cos(g, g_ref), "grad_norm": norm,
                              "grad_norm_ratio": norm / ref_norm if ref_norm > 0 else math.inf})

    moved = _moved(policy, policy_step, seed)
    J_exact, g_exact = _estimate(NonparametricBellman(data, bandwidths, gamma, top_k=top_k),
                                 moved, initial_states)
    for n_candidates in n_candidates_values:
        exact = NonparametricBellman(data, bandwidths, gamma, top_k=top_k, n_candidates=n_candidates)
        approx = NonparametricBellman(data, bandwidths, gamma, top_k=top_k,
                                      n_candidates=n_candidates, refine=False)
        for model in (exact, approx):
            model.transition_matrix(policy)            # candidates built at the current policy
        exact.refined_rows_ = 0
        exact.transition_matrix(moved)
        J_a, g_a = _estimate(approx, moved, initial_states)
        report.candidate_rows.append({
            "n_candidates": int(min(n_candidates, n)), "certified": 1.0 - exact.refined_rows_ / n,
            "approx_J_rel_err": abs(J_a - J_exact) / max(abs(J_exact), 1e-300),
            "approx_grad_cos": _cos(g_a, g_exact), "exact_grad_norm": float(np.linalg.norm(g_exact))})
    return report
