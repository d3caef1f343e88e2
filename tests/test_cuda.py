"""CPU and CUDA give the same numbers (runs only where CUDA exists)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import nopg
from nopg.model.bellman_solver import auto_error

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA GPU; the CPU suite covers the same math")


def _flat(grads):
    return torch.cat([g.detach().cpu().reshape(-1) for g in grads])


@pytest.mark.parametrize("top_k", [None, 8])
@pytest.mark.parametrize("kind", ["deterministic", "stochastic", "mc_next"])
def test_policy_gradient_cuda_equals_cpu(dataset, bandwidths, initial_states, det_policy,
                                         top_k, kind):
    torch.manual_seed(0)
    policy = (nopg.GaussianMLPPolicy(2, 1, hidden=(8,)).double() if kind == "stochastic"
              else det_policy)
    kw = dict(bandwidths=bandwidths, gamma=0.95, initial_states=initial_states, top_k=top_k,
              stochastic=kind == "stochastic", n_mc_policy=4,
              n_mc_next=3 if kind == "mc_next" else None, seed=7)
    cpu = nopg.policy_gradient(dataset, policy, **kw)
    gpu = nopg.policy_gradient(dataset, copy.deepcopy(policy).cuda(), **kw)
    assert gpu.grads[0].is_cuda
    assert gpu.J == pytest.approx(cpu.J, rel=1e-10)
    np.testing.assert_allclose(gpu.q, cpu.q, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(gpu.mu, cpu.mu, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(_flat(gpu.grads), _flat(cpu.grads), rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("solver", ["dense", "bicgstab"])
def test_fit_on_cuda_follows_the_cpu_run(dataset, bandwidths, initial_states, solver):
    """Update by update to 1e-8. BiCGSTAB solves tightly here: the CPU preconditions with an ILU
    and the GPU does not, so under ``solver_tol="auto"`` their iterates stop at different points
    inside the 1e-3 bound (the next test)."""
    runs = []
    for device in ("cpu", "cuda"):
        torch.manual_seed(0)
        policy = nopg.GaussianMLPPolicy(2, 1, hidden=(8,))
        cfg = nopg.NOPGConfig(gamma=0.9,
                              model=nopg.ModelConfig(n_mc_policy=3, n_mc_next=2, solver=solver, device=device,
                                                     solver_tol=1e-12 if solver == "bicgstab" else "auto"))
        algo = nopg.NOPG(policy, cfg).fit(dataset, bandwidths, initial_states, 5, progress=False)
        runs.append(algo)
    cpu, gpu = runs
    assert next(gpu.policy.parameters()).is_cuda
    np.testing.assert_allclose([m["J_hat"] for m in gpu.history_],
                               [m["J_hat"] for m in cpu.history_], rtol=1e-8)
    s = dataset.states[:7]
    np.testing.assert_allclose(gpu.value(s), cpu.value(s), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(gpu.predict(s), cpu.predict(s), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("solver_error", [None, 1e-3])
def test_auto_tolerance_on_cuda_stays_within_its_bound(dataset, bandwidths, initial_states,
                                                       solver_error):
    """Under the default ``solver_tol="auto"`` (unpreconditioned on the GPU, ILU on the CPU)
    each device's first ``J_hat`` is within the proven bound ``error * osc(q)`` of the tightly
    solved one; ``error`` is the target (``None``: 1e-2 with the drawn next states here)."""
    def first_update(device: str, **kw) -> nopg.NOPG:
        torch.manual_seed(0)
        policy = nopg.DeterministicMLPPolicy(2, 1, action_max=1.0, hidden=(8,))
        cfg = nopg.NOPGConfig(gamma=0.9, seed=0, model=nopg.ModelConfig(
            n_mc_next=2, solver="bicgstab", device=device, **kw))
        return nopg.NOPG(policy, cfg).fit(dataset, bandwidths, initial_states, 1, progress=False)

    exact = first_update("cpu", solver_tol=1e-12)
    q = exact.model_.solution(exact.policy, exact.initial_states_).q
    spread = float(q.max() - q.min())
    error = auto_error(solver_error, len(dataset), drawn=True)
    for device in ("cpu", "cuda"):
        j_hat = first_update(device, solver_error=solver_error).history_[0]["J_hat"]
        assert abs(j_hat - exact.history_[0]["J_hat"]) <= error * spread


def test_float32_on_cuda_stays_close_to_float64(dataset, bandwidths, initial_states, det_policy):
    kw = dict(bandwidths=bandwidths, gamma=0.95, initial_states=initial_states, seed=1)
    ref = nopg.policy_gradient(dataset, det_policy, **kw)
    low = nopg.policy_gradient(dataset, copy.deepcopy(det_policy).float().cuda(), **kw)
    assert low.grads[0].dtype == torch.float32
    assert low.J == pytest.approx(ref.J, rel=1e-4)
    cos = torch.nn.functional.cosine_similarity(_flat(low.grads).double(), _flat(ref.grads), dim=0)
    assert cos > 0.9999


@pytest.mark.parametrize("neighbors", ["candidates", "knn"])
def test_sparse_fit_on_cuda_follows_the_cpu_run(neighbors):
    """The sparse path (tiled torch k-NN, unpreconditioned BiCGSTAB) on the GPU follows the CPU
    run (KD-tree, ILU) update by update on 2000 samples."""
    rng = np.random.default_rng(0)
    n = 2000
    s = rng.uniform(-1, 1, (n, 3))
    a = rng.uniform(-1, 1, (n, 1))
    data = nopg.TransitionDataset(s, a, -(s ** 2).sum(1), np.clip(s + 0.1 * a, -1, 1),
                                  np.zeros(n, bool))
    bw = nopg.Bandwidths([0.2, 0.2, 0.2], [0.3])
    runs = []
    for device in ("cpu", "cuda"):
        torch.manual_seed(0)
        policy = nopg.DeterministicMLPPolicy(3, 1, action_max=1.0, hidden=(16,))
        cfg = nopg.NOPGConfig(seed=0,
                              model=nopg.ModelConfig(top_k=10, neighbors=neighbors, n_candidates=16,
                                                     solver="bicgstab", solver_tol=1e-12, device=device))
        algo = nopg.NOPG(policy, cfg).fit(data, bw, s[:4], 5, progress=False)
        runs.append([m["J_hat"] for m in algo.history_])
    np.testing.assert_allclose(runs[1], runs[0], rtol=1e-8)


def _moved_successor_fit(dataset, bandwidths, initial_states, device: str, successors: str,
                         optimizer: str, **extra):
    torch.manual_seed(0)
    policy = (nopg.LinearPolicy(2, 1).double() if optimizer == "cma-es"
              else nopg.DeterministicMLPPolicy(2, 1, action_max=1.0, hidden=(8,)).double())
    cfg = nopg.NOPGConfig(gamma=0.9, seed=2, optimizer=optimizer).replace(**{
        "model.top_k": 6, "model.neighbors": "knn", "model.successors": successors,
        "model.solver": "dense", "model.device": device,
        "model.terminal_bounds": [[None, None], [0.5, None]],
        **({"optimizer.sigma": 0.3} if optimizer == "cma-es" else {}), **extra})
    return nopg.NOPG(policy, cfg).fit(dataset, bandwidths, initial_states, 3, progress=False)


@pytest.mark.parametrize("successors,optimizer,extra", [
    ("local-linear", "adam", {}),
    ("local-linear", "adam", {"model.unsupported": "penalty"}),
    ("anchored", "adam", {"model.anchor_horizon": 6}),
    ("anchored", "cma-es", {"model.anchor_horizon": 6}),
    ("anchored", "cma-es", {"model.anchor_horizon": 6, "optimizer.horizon": 20}),
])
def test_moved_successors_on_cuda_follow_the_cpu_run(dataset, bandwidths, initial_states,
                                                     successors, optimizer, extra):
    """The models whose successors move (local-linear, anchored; k-d-tree interpolation on the
    CPU, the products on the GPU), with terminal bounds, under Adam and CMA-ES (and the search
    horizon's episode lengths), give the CPU's numbers update by update."""
    cpu, gpu = (_moved_successor_fit(dataset, bandwidths, initial_states, device, successors,
                                     optimizer, **extra) for device in ("cpu", "cuda"))
    assert next(gpu.policy.parameters()).is_cuda
    for key in ("J_hat", "search_alive"):
        if key in cpu.history_[0]:
            np.testing.assert_allclose([m[key] for m in gpu.history_],
                                       [m[key] for m in cpu.history_], rtol=1e-8)
    s = dataset.states[:7]
    np.testing.assert_allclose(gpu.predict(s), cpu.predict(s), rtol=1e-8, atol=1e-10)
