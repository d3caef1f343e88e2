"""The ``auto`` model settings of NOPGConfig: the size rule, explicit settings, the experiments' pins."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import nopg
from nopg.experiments import TASKS
from nopg.model.bellman import NonparametricBellman
from nopg.model.defaults import (
    AUTO_MC_NEXT,
    AUTO_TOP_K,
    DENSE_P_SOLVE_MAX_N,
    MC_NEXT_MAX_N,
    SPARSE_MIN_N,
    SPARSE_P_SOLVE_MAX_N,
    resolve_settings,
)

SMALL = (1, 40, SPARSE_MIN_N - 1)
LARGE = (SPARSE_MIN_N, 2000, 10_000, 100_000)


def test_crossovers_are_ordered():
    assert SPARSE_P_SOLVE_MAX_N < SPARSE_MIN_N <= DENSE_P_SOLVE_MAX_N


@pytest.mark.parametrize("n", SMALL)
def test_default_is_dense_below_sparse_min_n(n):
    r = nopg.NOPGConfig().resolved(n).model
    assert r.top_k is None and r.solver == "dense" and r.dense_max_n == DENSE_P_SOLVE_MAX_N


@pytest.mark.parametrize("n", LARGE)
def test_default_is_sparse_bicgstab_from_sparse_min_n(n):
    r = nopg.NOPGConfig().resolved(n).model
    assert r.top_k == AUTO_TOP_K and r.solver == "bicgstab"


def test_resolved_keeps_every_other_field():
    c = nopg.NOPGConfig(gamma=0.9, seed=3, optimizer=nopg.GradientAscent(learning_rate=0.05),
                        model=nopg.ModelConfig(solver_tol=1e-8))
    r = c.resolved(5000)
    assert {k for k, v in r.to_dict().items() if c.to_dict()[k] != v} == {"model"}
    changed = {k for k, v in r.to_dict()["model"].items() if c.to_dict()["model"][k] != v}
    assert changed == {"top_k", "solver", "dense_max_n", "n_mc_next"}
    assert r.resolved(5000) == r                          # resolving twice changes nothing


@pytest.mark.parametrize("n, expected", [(1, AUTO_MC_NEXT), (5000, AUTO_MC_NEXT),
                                         (MC_NEXT_MAX_N - 1, AUTO_MC_NEXT), (MC_NEXT_MAX_N, None)])
def test_auto_monte_carlo_next_states(n, expected):
    assert nopg.NOPGConfig().model.n_mc_next == "auto"
    assert nopg.NOPGConfig().resolved(n).model.n_mc_next == expected
    for explicit in (None, 1, 7):                          # explicit settings are kept
        config = nopg.NOPGConfig(model=nopg.ModelConfig(n_mc_next=explicit))
        assert config.resolved(n).model.n_mc_next == explicit


def test_behaviour_term_uses_its_own_next_state_count():
    c = nopg.NOPGConfig()
    assert c.resolved(5000, behaviour_term=True).model.n_mc_next is None        # kernel mean
    assert c.resolved(5000).model.n_mc_next == AUTO_MC_NEXT
    r = nopg.NOPGConfig(model=nopg.ModelConfig(n_mc_next=7),
                        behaviour=nopg.Behaviour(n_mc_next=2)).resolved(5000, behaviour_term=True)
    assert r.model.n_mc_next == 2 and r.resolved(5000, behaviour_term=True) == r


@pytest.mark.parametrize("weight, behaviour_n, expected", [(0.0, None, AUTO_MC_NEXT),
                                                           (1.0, None, None), (1.0, 2, 2)])
def test_fit_picks_next_states_by_behaviour_term(dataset, bandwidths, initial_states, weight,
                                                 behaviour_n, expected):
    """The model the fit builds draws ``n_mc_next`` states without the behaviour term and
    ``behaviour_n_mc_next`` with it; that model gives the fit's ``J_hat``."""
    torch.manual_seed(0)
    policy = nopg.DeterministicMLPPolicy(dataset.state_dim, dataset.action_dim, hidden=(4,))
    config = nopg.NOPGConfig(optimizer=nopg.GradientAscent("sgd", learning_rate=1e-12),
                             behaviour=nopg.Behaviour(weight=weight, n_mc_next=behaviour_n, pretrain=0))
    algo = nopg.NOPG(policy, config).fit(dataset, bandwidths, initial_states, n_updates=1,
                                         progress=False)
    assert algo.model_.n_mc_next == expected
    if expected is None:
        kernel_config = nopg.NOPGConfig(model=nopg.ModelConfig(n_mc_next=None))
        kernel_mean = kernel_config.resolved(dataset.n).model_config()
        reference = nopg.bellman_model(dataset, bandwidths, config.gamma, kernel_mean)
        J = reference.solution(policy, initial_states).J
        assert algo.history_[0]["J_hat"] == pytest.approx(J, rel=1e-8)


def test_fit_draws_fresh_next_states_every_update(dataset, bandwidths, initial_states):
    """``auto`` gives the model ``AUTO_MC_NEXT`` draws per transition, new ones at each update
    (two updates of a fixed policy see different ``J_hat``), the same ones for the same seed."""
    def j_hats(config: nopg.NOPGConfig) -> list[float]:
        policy = nopg.DeterministicMLPPolicy(dataset.state_dim, dataset.action_dim, hidden=(4,))
        algo = nopg.NOPG(policy, config).fit(dataset, bandwidths, initial_states, n_updates=2,
                                             progress=False)
        assert algo.model_.n_mc_next == config.resolved(dataset.n).model.n_mc_next
        return [m["J_hat"] for m in algo.history_]

    frozen = nopg.NOPGConfig(optimizer=nopg.GradientAscent("sgd", learning_rate=1e-12),
                             behaviour=nopg.Behaviour(weight=0.0))
    torch.manual_seed(0)
    auto = j_hats(frozen)
    torch.manual_seed(0)
    assert j_hats(frozen) == auto                                      # same seed, same draws
    assert auto[0] != pytest.approx(auto[1], rel=1e-9)                 # fresh draws per update
    torch.manual_seed(0)
    mean = j_hats(frozen.replace(**{"model.n_mc_next": None}))
    assert mean[0] == pytest.approx(mean[1], rel=1e-9)                 # kernel mean: fixed


def test_sparse_min_n_moves_the_switch():
    c = nopg.NOPGConfig(model=nopg.ModelConfig(sparse_min_n=50))
    assert c.resolved(49).model.top_k is None and c.resolved(50).model.top_k == AUTO_TOP_K
    one = nopg.NOPGConfig(model=nopg.ModelConfig(sparse_min_n=1))
    assert one.resolved(4).model.top_k == 4                               # never more than n


@pytest.mark.parametrize("neighbors", ["candidates", "knn"])
def test_sparse_neighbour_mode_makes_auto_sparse(neighbors):
    config = nopg.NOPGConfig(model=nopg.ModelConfig(neighbors=neighbors))
    assert config.resolved(40).model.top_k == AUTO_TOP_K


def test_auto_solver_limit_depends_on_the_kind_of_p():
    dense_p = nopg.NOPGConfig(model=nopg.ModelConfig(top_k=None))
    sparse_p = nopg.NOPGConfig(model=nopg.ModelConfig(top_k=10))
    assert dense_p.resolved(DENSE_P_SOLVE_MAX_N).model.solver == "dense"
    assert dense_p.resolved(DENSE_P_SOLVE_MAX_N + 1).model.solver == "bicgstab"
    assert sparse_p.resolved(SPARSE_P_SOLVE_MAX_N).model.solver == "dense"
    assert sparse_p.resolved(SPARSE_P_SOLVE_MAX_N + 1).model.solver == "bicgstab"


@pytest.mark.parametrize("top_k", [None, 8])
@pytest.mark.parametrize("n", [100, 2000, 2001, 10_000])
def test_explicit_dense_max_n_is_the_old_rule(top_k, n):
    r = nopg.NOPGConfig(model=nopg.ModelConfig(top_k=top_k, dense_max_n=2000)).resolved(n).model
    assert r.top_k == top_k and r.dense_max_n == 2000
    assert r.solver == ("dense" if n <= 2000 else "bicgstab")


@pytest.mark.parametrize("solver", ["dense", "bicgstab"])
@pytest.mark.parametrize("n", [40, 100_000])
def test_explicit_solver_and_top_k_are_kept(solver, n):
    for top_k in (None, 10):
        r = nopg.NOPGConfig(model=nopg.ModelConfig(top_k=top_k, solver=solver)).resolved(n).model
        assert (r.top_k, r.solver) == (top_k, solver)


def test_bellman_shares_the_rule(dataset, bandwidths):
    old = nopg.bellman_model(dataset, bandwidths, 0.9)       # low-level defaults: unchanged
    assert old.top_k is None and old.dense_max_n == 2000 and old.linear_solver.dense
    auto = nopg.bellman_model(dataset, bandwidths, 0.9, top_k="auto", dense_max_n=None,
                                sparse_min_n=30)
    expected = resolve_settings(dataset.n, "auto", "auto", None, 30)
    assert auto.top_k == expected.top_k == AUTO_TOP_K and auto.neighbors == "candidates"
    assert auto.dense_max_n == expected.dense_max_n == SPARSE_P_SOLVE_MAX_N
    assert auto.linear_solver.dense and expected.solver == "dense"            # 40 samples: dense LU
    small = nopg.bellman_model(dataset, bandwidths, 0.9, top_k="auto", dense_max_n=None)
    assert small.top_k is None and small.neighbors == "dense" and small.linear_solver.dense


@pytest.mark.parametrize("config", [
    nopg.NOPGConfig(), nopg.NOPGConfig(model=nopg.ModelConfig(top_k="auto", sparse_min_n=7)),
    nopg.NOPGConfig(model=nopg.ModelConfig(top_k=None, dense_max_n=2000))])
def test_dict_round_trip(config):
    d = json.loads(json.dumps(config.to_dict()))
    assert nopg.NOPGConfig.from_dict(d) == config


def test_old_config_dict_loads_with_its_old_settings():
    d = nopg.NOPGConfig(model=nopg.ModelConfig(top_k=None, dense_max_n=2000)).to_dict()
    del d["model"]["sparse_min_n"]                             # written before the field existed
    c = nopg.NOPGConfig.from_dict(d)
    assert c.model.top_k is None and c.resolved(3000).model.solver == "bicgstab"


@pytest.mark.parametrize("kw, match", [
    (dict(top_k="dense"), "'top_k' parameter"),
    (dict(top_k=0), "'top_k' parameter"),
    (dict(top_k=True), "'top_k' parameter"),
    (dict(top_k=2.5), "'top_k' parameter"),
    (dict(dense_max_n=0), "'dense_max_n' parameter"),
    (dict(dense_max_n="auto"), "'dense_max_n' parameter"),
    (dict(sparse_min_n=0), "'sparse_min_n' parameter"),
    (dict(sparse_min_n=None), "'sparse_min_n' parameter"),
    (dict(n_mc_next=0), "'n_mc_next' parameter"),
    (dict(n_mc_next="many"), "'n_mc_next' parameter"),
    (dict(n_mc_next=True), "'n_mc_next' parameter"),
    (dict(behaviour=dict(n_mc_next=0)), "'n_mc_next' parameter of Behaviour"),
    (dict(behaviour=dict(n_mc_next="auto")), "'n_mc_next' parameter of Behaviour"),
])
def test_config_validation(kw, match):
    with pytest.raises(ValueError, match=match):
        nopg.NOPGConfig(**kw) if "behaviour" in kw else nopg.NOPGConfig(model=kw)


@pytest.mark.parametrize("n", [0, -3, 2.0, True])
def test_resolved_rejects_bad_n(n):
    with pytest.raises(ValueError, match="n must be a positive int"):
        nopg.NOPGConfig().resolved(n)


@pytest.mark.parametrize("kw, match", [(dict(top_k="many"), "'top_k' parameter"),
                                       (dict(dense_max_n=-1), "'dense_max_n' parameter"),
                                       (dict(sparse_min_n=0), "'sparse_min_n' parameter")])
def test_bellman_validation(dataset, bandwidths, kw, match):
    with pytest.raises(ValueError, match=match):
        nopg.bellman_model(dataset, bandwidths, 0.9, **kw)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_experiments_pin_their_settings(name):
    """No experiment relies on the size rule: its numbers do not change with the defaults."""
    c = TASKS[name]().default_config().nopg
    assert c.model.top_k != "auto" and c.model.n_mc_next != "auto"
    assert c.model.solver != "auto" or c.model.dense_max_n == 2000


def test_default_fit_matches_explicit_sparse_bicgstab():
    n = SPARSE_MIN_N + 100
    rng = np.random.default_rng(4)
    states = rng.uniform(-1.0, 1.0, (n, 2))
    actions = rng.uniform(-1.0, 1.0, (n, 1))
    data = nopg.TransitionDataset(states, actions, -(states ** 2).sum(1) - 0.1 * actions[:, 0] ** 2,
                                  states + 0.2 * actions, np.zeros(n, bool))
    bw = nopg.Bandwidths(state=[0.3, 0.3], action=[0.3])
    s0 = np.array([[0.2, -0.1], [-0.3, 0.4]])

    def fit(config: nopg.NOPGConfig) -> tuple[NonparametricBellman, list[float]]:
        torch.manual_seed(0)
        policy = nopg.DeterministicMLPPolicy(2, 1, action_max=1.0, hidden=(8,))
        algo = nopg.NOPG(policy, config).fit(data, bw, s0, n_updates=4, progress=False)
        return algo.model_, [m["J_hat"] for m in algo.history_]

    model, J_auto = fit(nopg.NOPGConfig())
    assert model.top_k == AUTO_TOP_K and not model.linear_solver.dense
    _, J_explicit = fit(nopg.NOPGConfig(model=nopg.ModelConfig(top_k=10, solver="bicgstab")))
    _, J_resolved = fit(nopg.NOPGConfig().resolved(n))
    np.testing.assert_allclose(J_auto, J_explicit, rtol=1e-8)
    np.testing.assert_allclose(J_auto, J_resolved, rtol=1e-8)


def test_fit_uses_the_resolved_settings(dataset, bandwidths, initial_states, det_policy):
    """``NOPG.setup`` builds the model from ``config.resolved(n)``, so ``sparse_min_n`` counts."""
    n = dataset.n
    dense = nopg.NOPG(det_policy, nopg.NOPGConfig(model=nopg.ModelConfig(sparse_min_n=n + 1)))
    dense.setup(dataset, bandwidths, initial_states)
    sparse = nopg.NOPG(det_policy, nopg.NOPGConfig(model=nopg.ModelConfig(sparse_min_n=n)))
    sparse.setup(dataset, bandwidths, initial_states)
    assert dense.model_.top_k is None
    assert sparse.model_.top_k == min(AUTO_TOP_K, n)


@pytest.mark.parametrize("successors", ["local-linear", "anchored"])
@pytest.mark.parametrize("n", SMALL)
def test_moved_successors_keep_top_k_on_small_data(successors, n):
    # Moved successors are built from each row's neighbours: top_k="auto" must not resolve to
    # the dense None (which their models refuse) below sparse_min_n.
    r = nopg.NOPGConfig(model=nopg.ModelConfig(successors=successors)).resolved(n).model
    assert r.top_k == min(AUTO_TOP_K, n)
    config = nopg.NOPGConfig(model=nopg.ModelConfig(successors=successors, top_k=None))
    assert config.resolved(n).model.top_k is None


def test_anchored_solver_is_decided_by_the_system_size():
    # The anchored model's systems hold n samples plus its anchors: "auto" is not fixed to the
    # dense LU from n alone (a 7000-state dense LU per solve was the cost on 1000 samples).
    anchored = nopg.NOPGConfig(model=nopg.ModelConfig(successors="anchored", dense_max_n=2000))
    r = anchored.resolved(1000).model
    assert r.solver == "auto"
    config = nopg.NOPGConfig(model=nopg.ModelConfig(successors="anchored", solver="dense"))
    assert config.resolved(1000).model.solver == "dense"
