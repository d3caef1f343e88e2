"""Pools of nearest data states (``neighbors="pool"``, :mod:`nopg.model.state_pools`): the pools
against brute force, the certificate, and the model's rows, ``J_hat`` and gradient against the
exact k-NN path as the policy moves, deterministic and stochastic, with pools small enough that
the exact fall-back runs (float64, small problems, fixed seeds)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import perturbed

import nopg
from nopg.model import state_pools
from nopg.model.bellman import NonparametricBellman
from nopg.model.state_pools import StatePools


def _data(n: int = 300, d_s: int = 5, d_a: int = 2, seed: int = 3) -> nopg.TransitionDataset:
    rng = np.random.default_rng(seed)
    s = rng.uniform(-1, 1, (n, d_s))
    a = rng.uniform(-1, 1, (n, d_a))
    s2 = s + 0.1 * np.resize(a, s.shape) + 0.05 * rng.normal(size=(n, d_s))
    return nopg.TransitionDataset(s, a, -(s ** 2).sum(1), s2, np.zeros(n, bool))


def test_pools_are_the_nearest_states_with_the_next_distance() -> None:
    g = torch.Generator().manual_seed(0)
    states = torch.randn(200, 4, dtype=torch.float64, generator=g)
    queries = torch.randn(30, 4, dtype=torch.float64, generator=g)
    idx, sq, radius = StatePools(states).start(queries, 12)
    d2 = torch.cdist(queries, states) ** 2
    order = torch.sort(d2, dim=1).values
    assert idx.shape == sq.shape == (30, 12)
    assert np.array_equal(np.sort(idx.numpy(), 1),
                          np.sort(torch.topk(d2, 12, largest=False).indices.numpy(), 1))
    assert torch.allclose(sq, d2.gather(1, idx), rtol=0, atol=1e-12)
    assert torch.allclose(radius ** 2, order[:, 12], rtol=0, atol=1e-12)
    # a pool of every point leaves nothing out
    idx, sq, radius = StatePools(states).start(queries, 500)
    assert idx.shape == (30, 200) and bool(torch.isinf(radius).all())
    assert torch.allclose(sq, d2, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="pool"):
        StatePools(states).start(queries, 0)


def _models(data, pool: int, **kw) -> dict[str, NonparametricBellman]:
    bw = nopg.Bandwidths([0.4] * data.state_dim, [0.3] * data.action_dim)
    return {nb: NonparametricBellman(data, bw, 0.95, top_k=6, neighbors=nb, n_mc_next=None,
                                     solver="dense", n_candidates=pool if nb == "pool" else None,
                                     **kw)
            for nb in ("knn", "pool")}


@pytest.mark.parametrize(("pool", "max_pool", "budget"),
                         [(8, 4096, 512), (8, 32, 512), (8, 4096, 10), (40, 4096, 512),
                          (400, 4096, 512)])
def test_rows_equal_the_exact_path_as_the_policy_moves(pool: int, max_pool: int, budget: int,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(state_pools, "MAX_POOL", max_pool)
    monkeypatch.setattr(state_pools, "MEAN_POOL_BUDGET", budget)
    data = _data()
    models = _models(data, pool)
    torch.manual_seed(1)
    policy = nopg.DeterministicMLPPolicy(5, 2, action_max=1.0, hidden=(8,)).double()
    s0 = data.states[:4]
    for step in range(4):             # one set of pools, made at the first selection, reused
        moved = perturbed(policy, 0.3 * step, seed=step)
        P = {nb: m.transition_matrix(moved).to_dense() for nb, m in models.items()}
        assert torch.allclose(P["knn"], P["pool"], rtol=0, atol=1e-14)
        J = {nb: m.solution(moved, s0).J for nb, m in models.items()}
        assert abs(J["pool"] - J["knn"]) <= 1e-12 * abs(J["knn"])
    pools = models["pool"].selector.state_pools
    sets = models["pool"]._next_queries.candidates            # the rows of P
    rows = torch.cat([t.rows for t in sets.tiers] + [sets.exact_rows])
    assert torch.equal(torch.sort(rows).values, torch.arange(data.n))   # each row once
    sizes = [t.size for t in sets.tiers]
    first = min(pool, data.n)
    assert sizes == sorted(set(sizes)) and all(
        size in [first * 4 ** j for j in range(6)] for size in sizes)
    if pool == 8:                     # pools too small for some rows: they moved up
        assert pools.promoted > 0 and len(sizes) > 1
    if max_pool == 32:                # no pool above 32: exact queries answered the rest
        assert pools.uncertified > 0 and sets.exact_rows.numel() > 0 and max(sizes) <= 32
    if budget == 10:                  # the memory budget sent rows to exact queries
        assert sets.exact_rows.numel() > 0
        assert sum(t.index.numel() for t in sets.tiers) <= 10 * data.n
    if pool == 400:                   # every data point pooled: nothing to certify
        assert pools.uncertified == pools.promoted == 0 and len(sizes) == 1


def test_target_sizes_jump_by_the_pools_growth(monkeypatch: pytest.MonkeyPatch) -> None:
    g = torch.Generator().manual_seed(0)
    states = torch.rand(20000, 2, dtype=torch.float64, generator=g)     # uniform: d = 2
    pools = StatePools(states)
    queries = torch.rand(200, 2, dtype=torch.float64, generator=g) * 0.5 + 0.25
    tier = pools.tier(queries, torch.arange(200), 64)
    R = tier.radius
    # just beyond R: one tier up; 1.5 R: about 65 * 1.5^2 = 146 states, the 256 tier
    assert pools.target_sizes(tier, (1.01 * R) ** 2).tolist() == [256] * 200
    assert float((pools.target_sizes(tier, (1.5 * R) ** 2) == 256).double().mean()) >= 0.9
    assert pools.target_sizes(tier, (1000 * R) ** 2).tolist() == [0] * 200   # exact queries
    monkeypatch.setattr(state_pools, "MAX_POOL", 128)
    assert pools.target_sizes(tier, (1.5 * R) ** 2).tolist() == [0] * 200


def test_gradient_and_stochastic_rows_equal_the_exact_path() -> None:
    data = _data(d_s=4, d_a=1)
    models = _models(data, 20, stochastic=True, n_mc_policy=5)
    torch.manual_seed(2)
    policy = nopg.GaussianMLPPolicy(4, 1, action_max=1.0, hidden=(8,)).double()
    s0 = data.states[:3]
    grads = {}
    for nb, m in models.items():
        sol = m.solution(policy, s0, torch.Generator().manual_seed(0))
        g = torch.autograd.grad(sol.surrogate(), list(policy.parameters()))
        grads[nb] = torch.cat([x.reshape(-1) for x in g])
    assert torch.allclose(grads["pool"], grads["knn"], rtol=1e-10, atol=1e-12)


def test_a_fit_with_pools_follows_the_exact_fit() -> None:
    data = _data()
    bw = nopg.Bandwidths([0.4] * 5, [0.3] * 2)
    J = {}
    for nb in ("knn", "pool"):
        torch.manual_seed(0)
        policy = nopg.DeterministicMLPPolicy(5, 2, action_max=1.0, hidden=(8,)).double()
        config = nopg.NOPGConfig(gamma=0.95, model=nopg.ModelConfig(
            top_k=6, neighbors=nb, n_candidates=16 if nb == "pool" else None, n_mc_next=None))
        algo = nopg.NOPG(policy, config).fit(data, bw, data.states[:4], n_updates=15,
                                             progress=False)
        J[nb] = [h["J_hat"] for h in algo.history_]
    assert np.allclose(J["pool"], J["knn"], rtol=1e-9, atol=0)


def test_pool_mode_needs_top_k() -> None:
    with pytest.raises(ValueError, match="neighbors"):
        nopg.NOPGConfig(model=nopg.ModelConfig(top_k=None, neighbors="pool"))
    assert nopg.NOPGConfig(model=nopg.ModelConfig(neighbors="pool")).model.neighbors == "pool"


def test_auto_uses_pools_for_many_dimensions_on_the_cpu() -> None:
    from nopg.model.defaults import POOL_MIN_DIMS, resolve_neighbors

    assert resolve_neighbors("auto", 10, POOL_MIN_DIMS) == "pool"
    assert resolve_neighbors("auto", 10, POOL_MIN_DIMS - 1) == "candidates"
    assert resolve_neighbors("auto", 10, 14, "cuda") == "candidates"
    assert resolve_neighbors("auto", None, 14) == "dense"
    assert resolve_neighbors("knn", 10, 14) == "knn"
    data = _data(d_s=9, d_a=2)                    # 11-D pairs: the model resolves to pools
    bw = nopg.Bandwidths([0.4] * 9, [0.3] * 2)
    assert NonparametricBellman(data, bw, 0.95, top_k=6).neighbors == "pool"
