"""The near-linear sparse path: neighbour search, candidate sets, certificates, no n x n arrays."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from conftest import perturbed

import nopg
from nopg.model.neighbors import NeighborIndex
from nopg.model.row_matrices import SparseRows

N = 300
K = 5


def _data(n: int = N, seed: int = 3) -> nopg.TransitionDataset:
    rng = np.random.default_rng(seed)
    s = rng.uniform(-1, 1, (n, 3))
    a = rng.uniform(-1, 1, (n, 1))
    s2 = s + 0.1 * a + 0.05 * rng.normal(size=(n, 3))
    r = -(s ** 2).sum(1) - 0.1 * a[:, 0] ** 2
    term = np.zeros(n, bool)
    term[[7, n // 2]] = True
    return nopg.TransitionDataset(s, a, r, s2, term)


@pytest.fixture(scope="module")
def data() -> nopg.TransitionDataset:
    return _data()


# Small action bandwidth: state neighbours carry very different actions, so a few candidates
# often cannot certify the top-k and refinement is exercised.
BW = nopg.Bandwidths([0.3, 0.25, 0.35], [0.15])
S0 = np.array([[0.1, -0.2, 0.3], [-0.5, 0.4, 0.0]])


def _policy(stochastic: bool = False) -> torch.nn.Module:
    torch.manual_seed(1)
    if stochastic:
        return nopg.GaussianMLPPolicy(3, 1, action_max=1.0, hidden=(8,), activation="tanh").double()
    return nopg.DeterministicMLPPolicy(3, 1, action_max=1.0, hidden=(8,), activation="tanh").double()


def _estimate(data, policy, **kw):
    kw.setdefault("top_k", K)
    return nopg.policy_gradient(data, policy, bandwidths=BW, gamma=0.95, initial_states=S0,
                                solver="dense", seed=4, **kw)


def _flat(grads) -> np.ndarray:
    return torch.cat([g.reshape(-1) for g in grads]).detach().numpy()


# ---------------------------------------------------------------- neighbour search
@pytest.mark.parametrize("backend", ["kdtree", "torch"])
def test_neighbor_index_matches_brute_force(backend):
    rng = np.random.default_rng(0)
    pts = rng.normal(size=(500, 4))
    qs = rng.normal(size=(60, 4))
    index = NeighborIndex(torch.tensor(pts), backend=backend, block_elements=1000)
    d2, idx = index.query(torch.tensor(qs), 7)
    full = ((qs[:, None, :] - pts[None, :, :]) ** 2).sum(-1)
    expected = np.argsort(full, axis=1)[:, :7]
    np.testing.assert_array_equal(idx.numpy(), expected)
    np.testing.assert_allclose(d2.numpy(), np.take_along_axis(full, expected, 1), rtol=1e-12)


def test_neighbor_index_bad_input():
    index = NeighborIndex(torch.zeros(5, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match="k must be between 1"):
        index.query(torch.zeros(1, 2, dtype=torch.float64), 6)
    with pytest.raises(ValueError, match=r"queries must have shape \(m, 2\)"):
        index.query(torch.zeros(1, 3, dtype=torch.float64), 1)
    with pytest.raises(ValueError, match="backend"):
        NeighborIndex(torch.zeros(5, 2), backend="faiss")


# ---------------------------------------------------------------- equality with the dense top-k


def _model(data, mode, **kw):
    kw.setdefault("top_k", K)
    return nopg.bellman_model(data, BW, 0.95, neighbors=mode, solver="dense", **kw)


@pytest.mark.parametrize("mode, kw", [
    ("candidates", {"n_candidates": 8}),      # few candidates: re-centring does real work
    ("candidates", {"n_candidates": 64}),
    ("candidates", {"n_candidates": N}),      # every point a candidate
    ("knn", {}),
])
@pytest.mark.parametrize("variant", ["deterministic", "stochastic", "mc_next"])
def test_sparse_paths_equal_dense_top_k(data, mode, kw, variant):
    """After the candidates were built at another policy (as during training), J_hat, q, mu and
    the gradient still equal the dense top-k computation."""
    stochastic = variant == "stochastic"
    extra = {"stochastic": stochastic, "n_mc_policy": 4 if stochastic else None,
             "n_mc_next": 3 if variant == "mc_next" else None}
    policy = _policy(stochastic)
    ref_model = _model(data, "dense", **extra)
    model = _model(data, mode, **extra, **kw)
    model.solution(perturbed(policy, 0.3), S0, torch.Generator().manual_seed(0))  # prime caches
    gen_ref, gen = torch.Generator().manual_seed(4), torch.Generator().manual_seed(4)
    ref = ref_model.solution(policy, S0, gen_ref)
    got = model.solution(policy, S0, gen)
    assert got.J == pytest.approx(ref.J, rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(got.q, ref.q, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(got.mu, ref.mu, rtol=1e-10, atol=1e-12)
    params = list(policy.parameters())
    g_ref = _flat(torch.autograd.grad(ref.surrogate(), params))
    g_got = _flat(torch.autograd.grad(got.surrogate(), params))
    np.testing.assert_allclose(g_got, g_ref, rtol=1e-9, atol=1e-11)


def test_certificate_triggers_refinement_and_refinement_is_needed(data):
    policy, moved = _policy(), perturbed(_policy(), 0.3)
    exact = _model(data, "dense")
    refined = _model(data, "candidates", n_candidates=8)
    approx = _model(data, "candidates", n_candidates=8, refine=False)
    for model in (refined, approx):
        model.transition_matrix(policy)              # candidates built at the first policy
        assert model.refined_rows_ == 0
    P_ref = exact.transition_matrix(moved).to_dense().detach()
    P_refined = refined.transition_matrix(moved).to_dense().detach()
    P_approx = approx.transition_matrix(moved).to_dense().detach()
    assert 0 < refined.refined_rows_ < N          # some rows certified, some re-centred
    assert approx.refined_rows_ == 0
    torch.testing.assert_close(P_refined, P_ref, rtol=1e-12, atol=1e-14)
    # Without the certificate some rows keep a wrong entry after the policy moved...
    assert (P_approx - P_ref).abs().max() > 1e-3
    # ...and only rows the certificate flagged can be wrong.
    rows_differ = ((P_approx - P_ref).abs() > 1e-12).any(1).sum().item()
    assert 0 < rows_differ <= refined.refined_rows_
    # The same policy again: every row is certified, nothing is re-centred.
    refined.refined_rows_ = 0
    refined.transition_matrix(moved)
    assert refined.refined_rows_ == 0


def test_auto_mode_switches_to_knn_after_a_costly_selection_and_back(data, monkeypatch):
    """``neighbors="auto"``: a selection that re-centres more than ``switch_share`` of the rows
    sends the next ``probe_every - 1`` to the exact k-NN query, then the candidates are tried
    again. A costly probe doubles the run; it answers its uncertified pairs by exact k-NN
    queries without re-centring, except when the runs have reached their longest. Every matrix
    equals the dense top-k throughout."""
    from nopg.model.candidates import _MAX_RUN
    from nopg.model.defaults import RECENTRE_SWITCH_SHARE

    exact = _model(data, "dense")
    assert _model(data, "auto", n_candidates=8).switch_share is None     # below the size
    monkeypatch.setattr("nopg.model.defaults.RECENTRE_SWITCH_MIN_N", N)
    model = _model(data, "auto", n_candidates=8)
    assert model.neighbors == "candidates" and model.switch_share == RECENTRE_SWITCH_SHARE
    assert _model(data, "candidates", n_candidates=8).switch_share is None
    sel = model.selector
    sel.probe_every = 3

    def check(policy) -> None:
        got = model.transition_matrix(policy).to_dense().detach()
        torch.testing.assert_close(got, exact.transition_matrix(policy).to_dense().detach(),
                                   rtol=1e-12, atol=1e-14)

    check(_policy())                                   # builds the candidate sets
    model.refined_rows_ = 0
    check(perturbed(_policy(), 1.0))                   # a large move: most rows re-centred
    assert model.refined_rows_ > RECENTRE_SWITCH_SHARE * N
    for scale in (1.5, 2.0):                           # the next two: exact k-NN queries
        check(perturbed(_policy(), scale))
    assert sel.knn_selections == 2
    sets = model._next_queries.candidates
    model.refined_rows_ = 0
    far = perturbed(_policy(), 3.0)
    check(far)                                         # the probe: costly again, so a run of 6,
    assert model.refined_rows_ == 0 and sets.knn_left == 5 and sets.knn_run == 12  # no re-centring
    for _ in range(5):
        check(far)
    assert sel.knn_selections == 7 and sets.knn_left == 0
    # The same policy from now on: the sets are still centred at the earlier one, so the probes
    # stay costly until the run reaches its longest, where the rows are re-centred at last.
    longest = _MAX_RUN * sel.probe_every
    selections = 0
    while model.refined_rows_ == 0:
        assert sets.knn_left == 0 and sets.knn_run <= longest      # the next one is a probe
        run = sets.knn_run
        check(far)
        selections += 1 + sets.knn_left
        for _ in range(sets.knn_left):
            check(far)
    assert run == longest and selections == 12 + 24 + 48
    # Centred at this policy, the next probe re-centres nothing and the candidates stay.
    knn, model.refined_rows_ = sel.knn_selections, 0
    for _ in range(2 * sel.probe_every):
        check(far)
    assert sel.knn_selections == knn and model.refined_rows_ == 0 and sets.knn_run == 0


def test_all_candidates_certify_every_row(data):
    model = _model(data, "candidates", n_candidates=N)
    model.transition_matrix(_policy())
    model.transition_matrix(perturbed(_policy(), 1.0))
    assert model.refined_rows_ == 0


def test_sparse_rows_keep_k_entries_and_sum_to_gamma(data):
    model = nopg.bellman_model(data, BW, 0.95, top_k=K, n_candidates=16)
    P = model.transition_matrix(_policy())
    assert isinstance(P, SparseRows) and P.index.shape == (N, K)
    sums = P.values.detach().sum(1).numpy()
    np.testing.assert_allclose(sums, data.discounts(0.95), rtol=1e-12)


@pytest.mark.parametrize("mode", ["candidates", "knn"])
def test_queries_equal_dense_top_k(data, mode):
    policy = _policy()
    ref = nopg.bellman_model(data, BW, 0.95, top_k=K, neighbors="dense")
    got = nopg.bellman_model(data, BW, 0.95, top_k=K, neighbors=mode, n_candidates=8)
    sol = ref.solution(policy, S0)
    rng = np.random.default_rng(5)
    qs = rng.uniform(-1.5, 1.5, (50, 3))
    qa = rng.uniform(-1, 1, (50, 1))
    np.testing.assert_allclose(got.value(policy, qs, sol.q), ref.value(policy, qs, sol.q), rtol=1e-11)
    np.testing.assert_allclose(got.q_value(qs, qa, sol.q), ref.q_value(qs, qa, sol.q), rtol=1e-11)
    np.testing.assert_allclose(got.visitation(policy, qs, sol.mu), ref.visitation(policy, qs, sol.mu),
                               rtol=1e-10, atol=1e-14)


def test_finite_differences_on_candidate_path_with_bicgstab(data):
    """Autograd of the surrogate equals central differences of J_hat on the sparse path."""
    policy = _policy()
    model = nopg.bellman_model(data, BW, 0.95, top_k=K, n_candidates=8, solver="bicgstab",
                                 solver_tol=1e-13)
    model.solution(perturbed(policy, 0.3), S0)      # candidates built elsewhere
    sol = model.solution(policy, S0)
    grads = torch.autograd.grad(sol.surrogate(), list(policy.parameters()))
    flat = torch.nn.utils.parameters_to_vector(policy.parameters()).detach().clone()
    rng = np.random.default_rng(0)
    for i in rng.choice(flat.numel(), size=6, replace=False):
        eps = 1e-6
        vals = []
        for sign in (1, -1):
            v = flat.clone()
            v[i] += sign * eps
            torch.nn.utils.vector_to_parameters(v, policy.parameters())
            vals.append(model.solution(policy, S0).J)
        torch.nn.utils.vector_to_parameters(flat, policy.parameters())
        fd = (vals[0] - vals[1]) / (2 * eps)
        ad = torch.cat([g.reshape(-1) for g in grads])[i].item()
        assert ad == pytest.approx(fd, rel=1e-5, abs=1e-7)


def test_operators_match_matvec(data):
    model = nopg.bellman_model(data, BW, 0.95, top_k=K)
    P = model.transition_matrix(_policy()).detach()
    matvec, rmatvec = P.operators()
    x = torch.tensor(np.random.default_rng(1).normal(size=N))
    torch.testing.assert_close(matvec(x), P.matvec(x), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(rmatvec(x), P.rmatvec(x), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(matvec(x), P.to_dense() @ x, rtol=1e-13, atol=1e-13)


def test_fit_logs_refined_rows(data):
    algo = nopg.NOPG(_policy(),
                     nopg.NOPGConfig(seed=0, optimizer=nopg.GradientAscent(learning_rate=0.2),
                                     model=nopg.ModelConfig(top_k=K, n_candidates=8)))
    algo.fit(data, BW, S0, 4, progress=False)
    assert all(isinstance(m["refined_rows"], int) for m in algo.history_)
    assert sum(m["refined_rows"] for m in algo.history_[1:]) > 0   # large steps move rows


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("kw, match", [
    ({"neighbors": "faiss", "top_k": 5}, "'neighbors' parameter must be one of"),
    ({"neighbors": "knn"}, "needs top_k"),
    ({"n_candidates": 0, "top_k": 5}, "'n_candidates' parameter must be a positive int"),
    ({"n_candidates": 4, "top_k": 5}, r"n_candidates \(4\) must be at least top_k \(5\)"),
])
def test_bad_sparse_options(data, kw, match):
    with pytest.raises(ValueError, match=match):
        nopg.bellman_model(data, BW, 0.95, **kw)


def test_config_rejects_bad_sparse_options():
    with pytest.raises(ValueError, match="'neighbors' parameter"):
        nopg.NOPGConfig(model=nopg.ModelConfig(top_k=None, neighbors="knn"))          # needs top_k
    with pytest.raises(ValueError, match="'neighbor_backend'"):
        nopg.NOPGConfig(model=nopg.ModelConfig(top_k=5, neighbor_backend="ball"))
    with pytest.raises(ValueError, match="'refine'"):
        nopg.NOPGConfig(model=nopg.ModelConfig(top_k=5, refine="yes"))


def test_dense_without_top_k_is_refused_for_large_data():
    big = _data(n=20_001, seed=0)
    with pytest.raises(ValueError, match="set top_k"):
        nopg.bellman_model(big, BW, 0.95)


# ---------------------------------------------------------------- no n x n allocation
def test_200k_samples_update_within_a_memory_cap():
    """One full CPU update at n = 200 000 with 3 GiB of address space beyond what the imports
    mapped (an n x n float64 array would need 298 GiB; the dense path dies at once under the
    cap). The cap is set after the imports: a CUDA build of torch maps far more than a CPU one."""
    script = textwrap.dedent("""
        import resource, sys
        import numpy as np, torch
        torch.set_num_threads(1)
        import nopg
        with open("/proc/self/status") as f:
            mapped = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
        cap = mapped + 3 * 2**30
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        n = 200_000
        rng = np.random.default_rng(0)
        s = rng.uniform(-1, 1, (n, 3)); a = rng.uniform(-1, 1, (n, 1))
        data = nopg.TransitionDataset(s, a, -(s ** 2).sum(1), np.clip(s + 0.05 * a, -1, 1),
                                      np.zeros(n, bool))
        cfg = nopg.NOPGConfig(model=nopg.ModelConfig(top_k=10, solver_tol=1e-6,
                                                     neighbors=sys.argv[1], device="cpu"))
        algo = nopg.NOPG(nopg.DeterministicMLPPolicy(3, 1, action_max=1.0), cfg)
        algo.setup(data, nopg.Bandwidths([0.05] * 3, [1.0]), s[:5])
        m = algo.step()
        assert np.isfinite(m["J_hat"]) and m["residual_q"] < 1e-5, m
        print("ok", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
    """)
    ok = subprocess.run([sys.executable, "-c", script, "candidates"], capture_output=True, text=True,
                        timeout=300)
    assert ok.returncode == 0 and ok.stdout.startswith("ok"), ok.stderr[-2000:]
    # The same cap kills the dense top-k path: the test can fail.
    dense = subprocess.run([sys.executable, "-c", script, "dense"], capture_output=True, text=True,
                           timeout=300)
    assert dense.returncode != 0


# ------------------------------------------------- the top_k / n_candidates picking tool
def test_neighbor_report(data):
    from nopg.train.tuning import neighbor_report
    rep = neighbor_report(data, BW, _policy(), S0, gamma=0.95, top_k_values=(3, 5, N),
                          n_candidates_values=(8, N), top_k=K, policy_step=0.3, mass_rows=50)
    masses = [r["mass_mean"] for r in rep.k_rows]
    assert masses == sorted(masses) and rep.k_rows[-1]["mass_min"] == pytest.approx(1.0)
    # k = n is the dense P: no error against it; smaller k: an error that shrinks with k.
    assert rep.k_rows[-1]["J_rel_err"] < 1e-12 and rep.k_rows[-1]["grad_cos"] == pytest.approx(1.0)
    assert rep.k_rows[0]["J_rel_err"] >= rep.k_rows[1]["J_rel_err"] > 0
    few, every = rep.candidate_rows
    assert every["certified"] == 1.0 and every["approx_J_rel_err"] < 1e-12
    assert few["certified"] < 1.0 and few["approx_J_rel_err"] > 0
    assert "grad cos" in rep.to_text()


def test_cli_tune_k(tmp_path, capsys):
    from nopg.cli import main
    _data(n=120).save(tmp_path / "d.npz")
    assert main(["tune-k", str(tmp_path / "d.npz"), "--k", "3", "6", "--candidates", "8",
                 "--top-k", "5"]) == 0
    out = capsys.readouterr().out
    assert "against the dense P" in out and "certified" in out


@pytest.mark.parametrize("d", [1, 3])
def test_squared_norm_matches_sum_and_its_gradient(d: int) -> None:
    from nopg.model.kernels import squared_norm

    x = torch.randn(7, 2, 5, d, dtype=torch.float64, requires_grad=True)
    out = squared_norm(x)
    assert out.shape == (7, 2, 5)
    torch.testing.assert_close(out, (x * x).sum(-1), rtol=1e-14, atol=0)
    (g,) = torch.autograd.grad(out.sum(), x)
    torch.testing.assert_close(g, 2 * x.detach(), rtol=1e-14, atol=0)


@pytest.mark.parametrize("d", [1, 3, 6])
def test_gathered_squared_distances_match_the_direct_formula(d: int) -> None:
    from nopg.model.kernels import gathered_squared_distances

    gen = torch.Generator().manual_seed(d)
    points = torch.randn(50, d, dtype=torch.float64, generator=gen)
    queries = torch.randn(9, d, dtype=torch.float64, generator=gen)
    index = torch.randint(0, 50, (9, 7), generator=gen)
    got = gathered_squared_distances(queries, points.T.contiguous(), index)
    want = ((queries[:, None, :] - points[index]) ** 2).sum(-1)
    torch.testing.assert_close(got, want, rtol=1e-14, atol=0)


@pytest.mark.parametrize("width", [1, 10])
def test_softmax_log_mass_matches_torch_values_and_gradients(width: int) -> None:
    from nopg.model.kernels import softmax_log_mass

    gen = torch.Generator().manual_seed(width)
    logits = (40 * torch.randn(6, 3, width, dtype=torch.float64, generator=gen)).requires_grad_(True)
    up = torch.randn(6, 3, width, dtype=torch.float64, generator=gen)
    down = torch.randn(6, 3, dtype=torch.float64, generator=gen)
    weights, log_mass = softmax_log_mass(logits)
    grad = torch.autograd.grad((weights * up).sum() + (log_mass * down).sum(), logits)[0]
    want_w, want_m = torch.softmax(logits, -1), torch.logsumexp(logits, -1)
    want_grad = torch.autograd.grad((want_w * up).sum() + (want_m * down).sum(), logits)[0]
    torch.testing.assert_close(weights, want_w, rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(log_mass, want_m, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(grad, want_grad, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("k", [3, 10])
def test_smallest_is_the_top_k_set_and_its_kth_value(k: int) -> None:
    from nopg.model.candidates import smallest

    gen = torch.Generator().manual_seed(0)
    values = torch.rand(50, 2, 40, dtype=torch.float64, generator=gen)
    values[0, 0, :5] = 0.25                                   # ties inside the block
    pos, kth = smallest(values, k)
    ref_vals, ref_pos = torch.topk(values, k, dim=-1, largest=False)
    torch.testing.assert_close(kth, ref_vals[..., -1], rtol=0, atol=0)
    chosen = values.gather(-1, pos)
    # the same multiset of values (ties may pick other positions), every one <= the k-th
    torch.testing.assert_close(chosen.sort(-1).values, ref_vals, rtol=0, atol=0)
    assert bool((chosen <= kth[..., None]).all())
    assert all(len(set(row.tolist())) == k for row in pos.reshape(-1, k))


def test_kdtree_answers_large_batches_in_z_order_without_changing_them() -> None:
    from scipy.spatial import cKDTree

    from nopg.model.neighbors import NeighborIndex, z_order

    rng = np.random.default_rng(5)
    points = rng.normal(size=(2000, 4))
    queries = rng.normal(size=(6000, 4))                      # above the batch size that is sorted
    idx = NeighborIndex(torch.from_numpy(points)).query_index(torch.from_numpy(queries), 7)
    _, ref = cKDTree(points).query(queries, k=7)
    np.testing.assert_array_equal(idx.numpy(), ref)
    order = z_order(queries)
    np.testing.assert_array_equal(np.sort(order), np.arange(len(queries)))
    # a 4 x 4 grid in Z-order: each 2 x 2 quadrant is visited as a block of four
    grid = np.array([[x, y] for x in range(4) for y in range(4)], dtype=float)
    quads = [tuple((grid[i] // 2).astype(int)) for i in z_order(grid, bits=2)]
    assert [len(set(quads[i:i + 4])) for i in range(0, 16, 4)] == [1, 1, 1, 1]
    assert len(set(quads)) == 4
