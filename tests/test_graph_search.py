"""Warm-started graph search (``neighbors="graph"``, :mod:`nopg.model.graph_search`) against brute force:
exact where it claims to be (the graph, the first search of a warm start), measured recall after
the queries move, warm-start bookkeeping, bad inputs, and a fit through the model (float64,
small problems, fixed seeds)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import perturbed

import nopg
from nopg.model.bellman import NonparametricBellman
from nopg.model.graph_search import GraphSearch

N, D_S, D_A, K = 400, 4, 2, 5


def _pairs(n: int = N, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, D_S, dtype=torch.float64, generator=g),
            torch.rand(n, D_A, dtype=torch.float64, generator=g) * 4 - 2)


def _brute(states: torch.Tensor, actions: torch.Tensor, qs: torch.Tensor, qa: torch.Tensor,
           k: int) -> np.ndarray:
    d2 = torch.cdist(qs, states) ** 2 + torch.cdist(qa, actions) ** 2
    return torch.topk(d2, k, dim=1, largest=False).indices.numpy()


def _recall(found: torch.Tensor, exact: np.ndarray) -> float:
    f = found.numpy()
    return float(np.mean([np.isin(exact[i], f[i]).mean() for i in range(exact.shape[0])]))


def test_graph_is_the_exact_knn_graph_without_self() -> None:
    s, a = _pairs()
    search = GraphSearch(s, a, degree=6)
    graph = search.graph()
    assert graph.shape == (N, 6)
    assert not bool((graph == torch.arange(N)[:, None]).any())
    brute = _brute(s, a, s, a, 7)[:, 1:]                  # the point itself comes first
    assert np.array_equal(np.sort(graph.numpy(), 1), np.sort(brute, 1))


def test_state_neighbours_join_the_graph() -> None:
    s, a = _pairs()
    graph = GraphSearch(s, a, degree=4, state_degree=3).graph()
    assert graph.shape == (N, 7)
    by_state = torch.topk(torch.cdist(s, s), 4, dim=1, largest=False).indices[:, 1:].numpy()
    assert np.array_equal(np.sort(graph[:, 4:].numpy(), 1), np.sort(by_state, 1))
    with pytest.raises(ValueError, match="state_degree"):
        GraphSearch(s, a, state_degree=-1)


def test_first_search_is_exact() -> None:
    s, a = _pairs()
    qs, qa = _pairs(60, seed=1)
    search = GraphSearch(s, a, pool=16, beam=K)
    warm = search.start(qs, qa)
    assert _recall(search.search(warm, qs, qa, K), _brute(s, a, qs, qa, K)) == 1.0
    # the pool is the exact 16 nearest, sorted by distance
    assert np.array_equal(np.sort(warm.index.numpy(), 1), np.sort(_brute(s, a, qs, qa, 16), 1))


def test_warm_start_follows_moving_queries() -> None:
    s, a = _pairs()
    qs, qa = _pairs(80, seed=2)
    search = GraphSearch(s, a, degree=10, pool=24, beam=8, refresh_every=0)
    warm = search.start(qs, qa)
    recalls = []
    for step in range(1, 9):                     # the actions drift 0.8 in all, 0.1 per search
        moved = qa + 0.1 * step
        recalls.append(_recall(search.search(warm, qs, moved, K), _brute(s, a, qs, moved, K)))
    assert warm.searches == 8
    assert min(recalls) >= 0.95                  # measured: 0.9625 at the last (drift 0.8)
    # without the graph (no expansion) the stale pool does worse after the same drift
    frozen = GraphSearch(s, a, degree=10, pool=24, beam=8, max_rounds=1, expand=1,
                         refresh_every=0)
    cold = frozen.start(qs, qa)
    cold.expanded[:] = True                      # nothing left to expand: the pool only re-ranks
    moved = qa + 0.8
    assert _recall(frozen.search(cold, qs, moved, K), _brute(s, a, qs, moved, K)) < recalls[-1]


def test_restart_makes_every_pool_exact_in_turn() -> None:
    s, a = _pairs()
    qs, qa = _pairs(30, seed=4)
    search = GraphSearch(s, a, pool=12, beam=K, max_rounds=1, expand=1, refresh_every=0,
                         restart_every=3)
    warm = search.start(qs, qa)
    moved = qa + 1.5
    for _ in range(3):                    # each query restarted exactly once at the moved actions
        found = search.search(warm, qs, moved, K)
    assert _recall(found, _brute(s, a, qs, moved, K)) == 1.0


def test_expansion_updates_the_pool_and_refresh_clears_marks() -> None:
    s, a = _pairs()
    qs, qa = _pairs(40, seed=3)
    search = GraphSearch(s, a, pool=12, beam=K, refresh_every=2)
    warm = search.start(qs, qa)
    assert bool(warm.expanded[:, :K].all()) and not bool(warm.expanded[:, K:].any())
    before = warm.index.clone()
    search.search(warm, qs, qa + 1.0, K)
    assert warm.expanded_rows > 0
    assert not torch.equal(before, warm.index)
    # entries stay distinct and their cached state distances stay exact
    assert all(len(set(row.tolist())) == row.numel() for row in warm.index)
    exact_sq = ((qs[:, None, :] - s[warm.index]) ** 2).sum(-1)
    assert torch.allclose(warm.sq_state, exact_sq)


def test_bad_inputs_get_clear_errors() -> None:
    s, a = _pairs()
    with pytest.raises(ValueError, match="same n"):
        GraphSearch(s, a[:-1])
    nan = s.clone()
    nan[3, 1] = float("nan")
    with pytest.raises(ValueError, match="finite"):
        GraphSearch(nan, a)
    with pytest.raises(ValueError, match="pool"):
        GraphSearch(s, a, pool=0)
    with pytest.raises(ValueError, match="refresh_every"):
        GraphSearch(s, a, refresh_every=-1)
    with pytest.raises(ValueError, match="restart_every"):
        GraphSearch(s, a, restart_every=True)
    search = GraphSearch(s, a, pool=10)
    with pytest.raises(ValueError, match=r"shapes \(m, 4\) and \(m, 2\)"):
        search.start(s[:5, :3], a[:5])
    warm = search.start(s[:5], a[:5])
    with pytest.raises(ValueError, match="finite"):
        search.search(warm, s[:5], torch.full((5, D_A), float("nan"), dtype=torch.float64), K)
    with pytest.raises(ValueError, match="k must be"):
        search.search(warm, s[:5], a[:5], 11)               # larger than the pool
    with pytest.raises(ValueError, match="warm start holds 5"):
        search.search(warm, s[:6], a[:6], K)
    small = GraphSearch(s[:8], a[:8], pool=32)              # the pool is capped at n
    with pytest.raises(ValueError, match="k must be"):
        small.search(small.start(s[:2], a[:2]), s[:2], a[:2], 9)   # larger than the data


def _data(n: int = 300, seed: int = 3) -> nopg.TransitionDataset:
    rng = np.random.default_rng(seed)
    s = rng.uniform(-1, 1, (n, 3))
    a = rng.uniform(-1, 1, (n, 1))
    s2 = s + 0.1 * a + 0.05 * rng.normal(size=(n, 3))
    return nopg.TransitionDataset(s, a, -(s ** 2).sum(1), s2, np.zeros(n, bool))


def test_model_graph_rows_match_exact_then_stay_close() -> None:
    data = _data()
    bw = nopg.Bandwidths([0.3, 0.25, 0.35], [0.15])
    torch.manual_seed(1)
    policy = nopg.DeterministicMLPPolicy(3, 1, action_max=1.0, hidden=(8,), activation="tanh").double()
    s0 = np.array([[0.1, -0.2, 0.3]])
    models = {nb: NonparametricBellman(data, bw, 0.95, top_k=5, neighbors=nb, n_mc_next=None,
                                       solver="dense") for nb in ("knn", "graph")}
    P = {nb: m.transition_matrix(policy).to_dense() for nb, m in models.items()}
    assert torch.allclose(P["knn"], P["graph"], rtol=0, atol=1e-14)   # first selection: exact
    moved = perturbed(policy, 0.05)
    P = {nb: m.transition_matrix(moved).to_dense() for nb, m in models.items()}
    same_rows = (P["knn"] - P["graph"]).abs().amax(1) < 1e-12
    assert float(same_rows.double().mean()) >= 0.95
    J = {nb: m.solution(moved, s0).J for nb, m in models.items()}
    assert abs(J["graph"] - J["knn"]) <= 1e-2 * abs(J["knn"])


def test_graph_mode_needs_top_k() -> None:
    with pytest.raises(ValueError, match="neighbors"):
        nopg.NOPGConfig(model=nopg.ModelConfig(top_k=None, neighbors="graph"))
    assert nopg.NOPGConfig(model=nopg.ModelConfig(neighbors="graph")).model.neighbors == "graph"
