"""Neighbour maintenance of the sparse path: shrunk candidate index, its certificate, blocked and
index-only k-NN queries. Every path must equal the dense top-k (float64, small problems)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import perturbed

import nopg
from nopg.model.bellman import candidate_action_scale
from nopg.model.candidates import CandidateSets
from nopg.model.neighbors import NeighborIndex

N = 300
K = 5
BW = nopg.Bandwidths([0.3, 0.25, 0.35], [0.15])
S0 = np.array([[0.1, -0.2, 0.3], [-0.5, 0.4, 0.0]])


def _data(n: int = N, seed: int = 3, action_dim: int = 1) -> nopg.TransitionDataset:
    rng = np.random.default_rng(seed)
    s = rng.uniform(-1, 1, (n, 3))
    a = rng.uniform(-1, 1, (n, action_dim))
    s2 = s + 0.1 * a.sum(1, keepdims=True) + 0.05 * rng.normal(size=(n, 3))
    r = -(s ** 2).sum(1) - 0.1 * (a ** 2).sum(1)
    return nopg.TransitionDataset(s, a, r, s2, np.zeros(n, bool))


@pytest.fixture(scope="module")
def data() -> nopg.TransitionDataset:
    return _data()


def _policy(stochastic: bool = False, action_dim: int = 1, seed: int = 1) -> torch.nn.Module:
    torch.manual_seed(seed)
    cls = nopg.GaussianMLPPolicy if stochastic else nopg.DeterministicMLPPolicy
    return cls(3, action_dim, action_max=1.0, hidden=(8,), activation="tanh").double()


def _model(data, mode, scale=None, **kw):
    kw.setdefault("top_k", K)
    model = nopg.bellman_model(data, BW, 0.95, neighbors=mode, solver="dense", **kw)
    if scale is not None:
        model.candidate_action_scale = scale
    return model


def test_scale_rule():
    assert candidate_action_scale(10, 40, 1) == 1.0
    assert candidate_action_scale(10, 160, 1) == pytest.approx(0.25)
    assert candidate_action_scale(10, 160, 2) == pytest.approx(0.5)
    assert candidate_action_scale(10, 8000, 1) == pytest.approx(0.005)
    # The default candidate count keeps the plain joint index.
    assert nopg.bellman_model(_data(), BW, 0.95, top_k=10).candidate_action_scale == 1.0


@pytest.mark.parametrize("scale, n_candidates", [(0.5, 16), (0.25, 32), (0.1, 64), (0.02, 8)])
@pytest.mark.parametrize("stochastic", [False, True])
def test_shrunk_candidates_equal_dense_top_k(data, scale, n_candidates, stochastic):
    """Candidates built at one policy, evaluated at several others: J_hat and the gradient equal
    the dense top-k computation whatever the shrink factor (a tiny one forces the fallback)."""
    extra = {"stochastic": stochastic, "n_mc_policy": 4 if stochastic else None}
    ref_model = _model(data, "dense", **extra)
    model = _model(data, "candidates", scale=scale, n_candidates=n_candidates, **extra)
    policy = _policy(stochastic)
    model.solution(perturbed(policy, 0.3), S0, torch.Generator().manual_seed(0))
    for step in (0.0, 0.05, 0.3):
        moved = perturbed(policy, step, seed=11)
        ref = ref_model.solution(moved, S0, torch.Generator().manual_seed(4))
        got = model.solution(moved, S0, torch.Generator().manual_seed(4))
        assert got.J == pytest.approx(ref.J, rel=1e-12, abs=1e-12)
        torch.testing.assert_close(got.P.to_dense().detach(), ref.P.to_dense().detach(),
                                   rtol=1e-12, atol=1e-14)
        params = list(moved.parameters())
        g_ref = torch.cat([g.reshape(-1) for g in torch.autograd.grad(ref.surrogate(), params)])
        g_got = torch.cat([g.reshape(-1) for g in torch.autograd.grad(got.surrogate(), params)])
        torch.testing.assert_close(g_got, g_ref, rtol=1e-9, atol=1e-11)


def test_shrunk_candidates_two_dimensional_actions():
    data = _data(action_dim=2)
    bw = nopg.Bandwidths([0.3, 0.25, 0.35], [0.15, 0.2])
    policy = _policy(action_dim=2)
    ref_model = nopg.bellman_model(data, bw, 0.95, top_k=K, neighbors="dense", solver="dense")
    model = nopg.bellman_model(data, bw, 0.95, top_k=K, n_candidates=40, solver="dense")
    assert model.candidate_action_scale == pytest.approx(np.sqrt(4 * K / 40))
    model.transition_matrix(policy)
    moved = perturbed(policy, 0.2)
    torch.testing.assert_close(model.transition_matrix(moved).to_dense().detach(),
                               ref_model.transition_matrix(moved).to_dense().detach(),
                               rtol=1e-12, atol=1e-14)


def test_tiny_scale_falls_back_to_joint_neighbours(data):
    """With a shrink factor far too small for n_candidates, the shrunk sets cannot certify their own centre;
    those rows take the joint neighbours (scale 1) and stay exact and certified."""
    policy = _policy()
    model = _model(data, "candidates", scale=0.01, n_candidates=8)
    model.transition_matrix(policy)
    scale = model._next_queries.candidates.scale
    assert bool((scale == 1.0).any())
    assert model.refined_rows_ == 0
    model.transition_matrix(policy)               # the same policy: every row certified
    assert model.refined_rows_ == 0


@pytest.mark.parametrize("scale", [1.0, 0.5, 0.2, 0.05])
def test_certificate_is_a_lower_bound(data, scale):
    """Where the certificate vouches for a row at an action, no point outside its candidates is
    nearer than the k-th candidate (checked by brute force over many actions)."""
    model = _model(data, "candidates", scale=scale, n_candidates=12)
    selector = model.selector
    queries = CandidateSets(model.next_states / model.h_s)
    rows = torch.arange(N)
    gen = torch.Generator().manual_seed(0)
    centre = torch.rand(N, 1, generator=gen, dtype=torch.float64) * 8 - 4
    selector.recentre(queries, rows, centre)
    points = torch.cat([model.states_scaled, model.actions_scaled], 1)
    outside = torch.ones(N, N, dtype=torch.bool).scatter(1, queries.index, False)
    certified_any = 0
    for shift in (0.0, 0.1, 0.5, 1.0, 2.0, 4.0):
        actions = centre + shift * (2 * torch.rand(N, 1, generator=gen, dtype=torch.float64) - 1)
        _, kth = selector.rerank(queries, rows, actions[:, None, :])
        ok = selector.certified(queries, rows, actions[:, None, :], kth)[:, 0]
        q = torch.cat([queries.states, actions], 1)
        d2 = ((q[:, None, :] - points[None, :, :]) ** 2).sum(-1)
        nearest_outside = torch.where(outside, d2, torch.inf).min(1).values
        assert bool((nearest_outside[ok] >= kth[ok, 0] * (1 - 1e-12)).all())
        certified_any += int(ok.sum())
    assert certified_any > 0


def test_shrunk_candidates_are_deterministic(data):
    policy, moved = _policy(), perturbed(_policy(), 0.2)
    out = []
    for _ in range(2):
        model = _model(data, "candidates", scale=0.3, n_candidates=24)
        model.transition_matrix(policy)
        P = model.transition_matrix(moved)
        out.append((P.index.clone(), P.values.detach().clone(), model.refined_rows_))
    assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])
    assert out[0][2] == out[1][2]


@pytest.mark.parametrize("backend", ["kdtree", "torch"])
def test_blocked_query_and_query_index(backend):
    gen = torch.Generator().manual_seed(0)
    points = torch.randn(500, 4, generator=gen, dtype=torch.float64)
    queries = torch.randn(123, 4, generator=gen, dtype=torch.float64)
    big = NeighborIndex(points, backend)
    small = NeighborIndex(points, backend, block_elements=4 * 7 * 3)   # a few rows per block
    d_big, i_big = big.query(queries, 7)
    d_small, i_small = small.query(queries, 7)
    assert torch.equal(i_big, i_small) and torch.equal(d_big, d_small)
    d2 = ((queries[:, None, :] - points[None]) ** 2).sum(-1)
    ref_d, ref_i = torch.sort(d2, dim=1)
    torch.testing.assert_close(d_big, ref_d[:, :7], rtol=1e-12, atol=1e-12)
    assert torch.equal(i_big, ref_i[:, :7])
    idx = big.query_index(queries, 7)
    assert torch.equal(torch.sort(idx, 1).values, torch.sort(ref_i[:, :7], 1).values)
    assert big.query_index(queries[:0], 3).shape == (0, 3)
    with pytest.raises(ValueError, match="k must be"):
        big.query_index(queries, 501)


def test_auto_neighbour_mode():
    from nopg.model.defaults import (
        RECENTRE_SWITCH_MIN_N,
        RECENTRE_SWITCH_SHARE,
        resolve_neighbors,
        resolve_switch_share,
    )
    assert resolve_neighbors("auto", None) == "dense"
    assert resolve_neighbors("auto", 10) == "candidates"      # at any size, switching to k-NN as needed
    assert resolve_neighbors("candidates", 10) == "candidates"
    assert resolve_neighbors("knn", 10) == "knn"
    assert resolve_switch_share("auto", "candidates", RECENTRE_SWITCH_MIN_N) == RECENTRE_SWITCH_SHARE
    assert resolve_switch_share("auto", "candidates", RECENTRE_SWITCH_MIN_N - 1) is None
    assert resolve_switch_share("candidates", "candidates", 10 ** 6) is None
    assert resolve_switch_share("auto", "dense", 10 ** 6) is None
    assert nopg.bellman_model(_data(), BW, 0.95, top_k=K).neighbors == "candidates"


def test_auto_preconditioner_by_n_and_device():
    from nopg.model.defaults import AGGREGATION_MIN_N, AGGREGATION_MIN_N_DRAWN, resolve_preconditioner
    assert AGGREGATION_MIN_N_DRAWN < AGGREGATION_MIN_N
    assert resolve_preconditioner("auto", "cpu", AGGREGATION_MIN_N - 1) == "ilu"
    assert resolve_preconditioner("auto", "cpu", AGGREGATION_MIN_N) == "aggregation"
    # rows drawn afresh at every update: the aggregation from a smaller n
    assert resolve_preconditioner("auto", "cpu", AGGREGATION_MIN_N_DRAWN - 1, drawn=True) == "ilu"
    assert resolve_preconditioner("auto", "cpu", AGGREGATION_MIN_N_DRAWN, drawn=True) == "aggregation"
    assert resolve_preconditioner("auto", "cpu", AGGREGATION_MIN_N_DRAWN) == "ilu"
    assert resolve_preconditioner("auto", "cpu", 10, aggregation_min_n=10) == "aggregation"
    data = _data(AGGREGATION_MIN_N_DRAWN)
    assert nopg.bellman_model(data, BW, 0.95, top_k=K, n_mc_next=3).preconditioner == "aggregation"
    assert nopg.bellman_model(data, BW, 0.95, top_k=K, n_mc_next=None).preconditioner == "ilu"
    assert resolve_preconditioner("auto", "cuda", 10 ** 6) == "none"
    assert resolve_preconditioner("ilu", "cpu", 10 ** 7) == "ilu"
    assert resolve_preconditioner("aggregation", "cpu", 100) == "aggregation"
    assert resolve_preconditioner("none", "cpu", 100) == "none"
    for kind in ("ilu", "aggregation"):
        with pytest.raises(ValueError, match="CPU only"):
            resolve_preconditioner(kind, "cuda", 100)
    assert nopg.bellman_model(_data(), BW, 0.95, top_k=K).preconditioner == "ilu"


def test_neighbor_index_defaults_follow_the_device():
    """CPU points: KD-tree up to 20 dimensions, tiles of 2**24. Points elsewhere (a GPU; the
    ``meta`` device stands in for one here, no data needed): the CPU KD-tree up to 8 dimensions,
    the tiled search above, with tiles of 2**27."""
    from nopg.model.neighbors import DEFAULT_BLOCK_ELEMENTS

    cpu = NeighborIndex(torch.zeros(5, 14))
    assert (cpu.backend, cpu.block_elements) == ("kdtree", DEFAULT_BLOCK_ELEMENTS["cpu"])
    assert NeighborIndex(torch.zeros(5, 21)).backend == "torch"
    low = NeighborIndex(torch.empty(5, 8, device="meta"))
    high = NeighborIndex(torch.empty(5, 9, device="meta"))
    assert (low.backend, high.backend) == ("kdtree", "torch")
    assert high.block_elements == DEFAULT_BLOCK_ELEMENTS["gpu"] > DEFAULT_BLOCK_ELEMENTS["cpu"]
    assert NeighborIndex(torch.zeros(5, 2), block_elements=7).block_elements == 7
    with pytest.raises(ValueError, match="block_elements"):
        NeighborIndex(torch.zeros(5, 2), block_elements=0)
