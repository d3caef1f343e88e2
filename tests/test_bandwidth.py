"""Tests for nopg.bandwidth.selection."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from scipy.stats import norm

from nopg.bandwidth.rules import _heldout_loglik
from nopg.bandwidth.selection import (
    Bandwidths,
    DuplicatedDataWarning,
    cross_validated_bandwidth,
    is_grid_like,
    knn_bandwidths,
    knn_selection,
    scott_bandwidth,
    select_bandwidths,
    silverman_bandwidth,
    support_widening,
    thinness_at,
)
from nopg.data.dataset import TransitionDataset


def make_dataset(n: int = 300, seed: int = 0, actions: np.ndarray | None = None):
    rng = np.random.default_rng(seed)
    states = rng.normal(size=(n, 2)) * [1.0, 3.0]
    acts = rng.normal(size=(n, 1)) if actions is None else actions
    return TransitionDataset(states, acts, rng.normal(size=n), states + 0.1, np.zeros(n))


# ------------------------------------------------------------------- Bandwidths
def test_bandwidths_conversion_and_next_state():
    bw = Bandwidths([0.1, 0.2], 0.5)
    assert bw.state.dtype == np.float64 and bw.action.shape == (1,)
    assert bw.next_state is None
    np.testing.assert_array_equal(bw.next_state_or_state, [0.1, 0.2])
    bw2 = Bandwidths([0.1, 0.2], [0.5], next_state=np.array([1.0, 2.0]))
    np.testing.assert_array_equal(bw2.next_state_or_state, [1.0, 2.0])
    assert bw == Bandwidths(np.array([0.1, 0.2]), [0.5])
    assert bw != bw2
    assert hash(bw) == hash(Bandwidths([0.1, 0.2], [0.5]))


@pytest.mark.parametrize("bad", [0.0, -1.0, np.nan, np.inf])
def test_bandwidths_reject_invalid_values(bad):
    with pytest.raises(
        ValueError, match=r"bandwidth for state dimension 2 must be positive and finite"
    ):
        Bandwidths([1.0, 1.0, bad], [1.0])
    with pytest.raises(ValueError, match=r"bandwidth for action dimension 0"):
        Bandwidths([1.0], bad)
    with pytest.raises(ValueError, match=r"bandwidth for next_state dimension 0"):
        Bandwidths([1.0], [1.0], [bad])


def test_bandwidths_reject_bad_shapes():
    with pytest.raises(ValueError, match="non-empty 1-D"):
        Bandwidths(np.ones((2, 2)), 1.0)
    with pytest.raises(ValueError, match="non-empty 1-D"):
        Bandwidths([], 1.0)


def test_broadcast():
    bw = Bandwidths(0.3, [0.1, 0.2]).broadcast(state_dim=3, action_dim=2)
    np.testing.assert_array_equal(bw.state, [0.3, 0.3, 0.3])
    np.testing.assert_array_equal(bw.action, [0.1, 0.2])
    with pytest.raises(ValueError, match="action bandwidth has 2 entries but the action dim"):
        Bandwidths(0.3, [0.1, 0.2]).broadcast(3, 3)


def test_dict_round_trip_is_json_friendly():
    for bw in (Bandwidths([0.1, 0.2], 0.5), Bandwidths([0.1], [0.5, 1.0], [0.3])):
        d = json.loads(json.dumps(bw.to_dict()))
        assert Bandwidths.from_dict(d) == bw
    with pytest.raises(ValueError, match="missing the key 'action'"):
        Bandwidths.from_dict({"state": [1.0]})


def test_scaled():
    bw = Bandwidths([1.0, 2.0], [0.5])
    s = bw.scaled(2.0, [3.0])
    np.testing.assert_allclose(s.state, [2.0, 4.0])
    np.testing.assert_allclose(s.action, [1.5])
    assert s.next_state is None
    s2 = bw.scaled([1.0, 10.0], 1.0, next_state_factor=0.5)
    np.testing.assert_allclose(s2.state, [1.0, 20.0])
    np.testing.assert_allclose(s2.next_state, [0.5, 1.0])
    s3 = Bandwidths([1.0], [1.0], [4.0]).scaled(2.0, 1.0)
    np.testing.assert_allclose(s3.next_state, [8.0])
    for bad in (0.0, -1.0, np.nan, [1.0, 2.0, 3.0]):
        with pytest.raises(ValueError, match="'state_factor' parameter"):
            bw.scaled(bad, 1.0)


# --------------------------------------------------------------- rules of thumb
def test_silverman_and_scott_match_hand_computation():
    x = np.array([[0.0, 1.0], [1.0, 3.0], [2.0, 2.0], [4.0, 7.0]])
    n = 4
    std = np.array([np.sqrt(np.sum((c - c.mean()) ** 2) / (n - 1)) for c in x.T])
    np.testing.assert_allclose(silverman_bandwidth(x), std * (4 / (3 * n)) ** 0.2)
    np.testing.assert_allclose(scott_bandwidth(x), std * n ** (-0.2))
    assert silverman_bandwidth(x[:, 0]).shape == (1,)


def test_silverman_two_point_actions_example():
    actions = np.repeat([-2.0, 2.0], 225)
    h = silverman_bandwidth(actions)[0]
    assert h == pytest.approx(2.0022 * (4 / 1350) ** 0.2, rel=1e-4)
    assert h == pytest.approx(0.625, abs=1e-3)
    assert 3 * h == pytest.approx(1.876, abs=2e-3)


@pytest.mark.parametrize("rule", [silverman_bandwidth, scott_bandwidth])
def test_rules_reject_constant_and_tiny_inputs(rule):
    x = np.column_stack([np.arange(5.0), np.full(5, 0.5)])
    with pytest.raises(ValueError, match=r"dimension 1 is constant \(all values 0.5\)"):
        rule(x)
    with pytest.raises(ValueError, match="at least 2 samples"):
        rule([[1.0, 2.0]])
    with pytest.raises(ValueError, match="contains NaN or inf"):
        rule([0.0, np.nan, 1.0])


def test_is_grid_like():
    rng = np.random.default_rng(0)
    x = np.column_stack(
        [rng.normal(size=200), rng.integers(0, 5, 200), np.round(rng.normal(size=200), 1)]
    )
    np.testing.assert_array_equal(is_grid_like(x), [False, True, True])
    assert not is_grid_like(rng.normal(size=5))[0]


# ----------------------------------------------------------------- cross-validation
def test_heldout_loglik_matches_direct_formula():
    rng = np.random.default_rng(1)
    train, test = rng.normal(size=200), rng.normal(size=30)
    grid = np.array([0.2, 0.5, 1.5])
    direct = [np.log(norm.pdf(test[:, None], train[None, :], h).mean(axis=1)).sum() for h in grid]
    np.testing.assert_allclose(_heldout_loglik(train, test, grid), direct, rtol=1e-10)


def test_cv_recovers_gaussian_scale():
    x = np.random.default_rng(0).normal(size=2000)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DuplicatedDataWarning)
        h_cv = cross_validated_bandwidth(x)[0]
    h_silverman = silverman_bandwidth(x)[0]
    assert h_silverman / 2 < h_cv < 2 * h_silverman


def test_cv_prefers_small_bandwidth_for_bimodal_data():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(-5, 0.5, 500), rng.normal(5, 0.5, 500)])
    assert cross_validated_bandwidth(x, seed=1)[0] < 0.5 * silverman_bandwidth(x)[0]


def test_cv_multi_column_and_custom_grid():
    x = np.random.default_rng(2).normal(size=(400, 2)) * [1.0, 10.0]
    h = cross_validated_bandwidth(x, n_folds=3, grid=[0.5, 1.0, 2.0])
    assert h.shape == (2,)
    ratios = h / silverman_bandwidth(x)
    assert all(np.isclose(r, [0.5, 1.0, 2.0]).any() for r in ratios)
    assert 5 < h[1] / h[0] < 20


def test_cv_warns_on_grid_data():
    x = np.random.default_rng(0).integers(0, 4, size=300).astype(float)
    with pytest.warns(DuplicatedDataWarning, match="Silverman"):
        cross_validated_bandwidth(x)


def test_cv_subsampling_is_reproducible():
    x = np.random.default_rng(3).normal(size=(1200, 1))
    a = cross_validated_bandwidth(x, max_samples=300, seed=7)
    b = cross_validated_bandwidth(x, max_samples=300, seed=np.random.default_rng(7))
    c = cross_validated_bandwidth(x, max_samples=300)
    d = cross_validated_bandwidth(x, max_samples=300)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(c, d)
    assert 0.05 < a[0] < 1.0


def test_cv_invalid_inputs():
    x = np.column_stack([np.arange(20.0), np.full(20, 0.5)])
    with pytest.raises(ValueError, match=r"dimension 1 is constant"):
        cross_validated_bandwidth(x)
    y = np.arange(20.0)
    with pytest.raises(ValueError, match="'n_folds' parameter"):
        cross_validated_bandwidth(y, n_folds=1)
    with pytest.raises(ValueError, match="'max_samples' parameter"):
        cross_validated_bandwidth(y, max_samples=1)
    with pytest.raises(ValueError, match="'grid' parameter"):
        cross_validated_bandwidth(y, grid=[1.0, -1.0])
    with pytest.raises(ValueError, match="seed must be"):
        cross_validated_bandwidth(y, seed="seed")
    with pytest.raises(ValueError, match="n_folds=30 is larger"):
        cross_validated_bandwidth(y, n_folds=30)


# ------------------------------------------------------------------ select_bandwidths
def test_select_silverman_scott_and_factors():
    ds = make_dataset()
    bw = select_bandwidths(ds, "silverman")
    np.testing.assert_allclose(bw.state, silverman_bandwidth(ds.states))
    np.testing.assert_allclose(bw.action, silverman_bandwidth(ds.actions))
    assert bw.next_state is None
    bw = select_bandwidths(ds, "scott", state_factor=[1.0, 2.0], action_factor=3.0,
                           next_state_factor=0.5)
    np.testing.assert_allclose(bw.state, scott_bandwidth(ds.states) * [1.0, 2.0])
    np.testing.assert_allclose(bw.action, 3.0 * scott_bandwidth(ds.actions))
    np.testing.assert_allclose(bw.next_state, 0.5 * scott_bandwidth(ds.states))


def test_select_two_point_actions_times_three():
    actions = np.repeat([-2.0, 2.0], 225)
    bw = select_bandwidths(make_dataset(450, actions=actions), "silverman", action_factor=3.0)
    assert bw.action[0] == pytest.approx(1.876, abs=2e-3)


def test_select_cv_warns_on_grid_data():
    ds = make_dataset(400)
    assert select_bandwidths(ds, "cv", seed=0) == select_bandwidths(ds, "cv", seed=0)
    grid_ds = make_dataset(400, actions=np.tile([-1.0, 0.0, 1.0, 1.0], 100))
    with pytest.warns(DuplicatedDataWarning):
        select_bandwidths(grid_ds, "cv")


def test_auto_is_the_knn_rule_and_deterministic():
    ds = make_dataset(400)
    auto = select_bandwidths(ds)
    assert auto == select_bandwidths(ds, "knn") == knn_bandwidths(ds)
    assert auto == select_bandwidths(ds, "auto", seed=3)   # no subsampling below max_queries
    big = knn_bandwidths(ds, max_queries=50, seed=1)
    assert big == knn_bandwidths(ds, max_queries=50, seed=1)
    assert big != knn_bandwidths(ds, max_queries=50, seed=2)
    scaled = select_bandwidths(ds, state_factor=2.0, action_factor=0.5)
    np.testing.assert_allclose(scaled.state, 2 * auto.state)
    np.testing.assert_allclose(scaled.action, 0.5 * auto.action)


def test_knn_rule_follows_local_spacing_not_the_marginal_spread():
    """Two distant clusters of trajectories: Silverman sees the spread between the clusters,
    the k-NN rule the spacing within them."""
    rng = np.random.default_rng(0)
    n = 400
    centres = np.where(rng.random(n) < 0.5, -10.0, 10.0)
    states = np.column_stack([centres + 0.1 * rng.normal(size=n), 0.1 * rng.normal(size=n)])
    actions = rng.uniform(-1, 1, size=(n, 1))
    next_states = states + 0.01 * rng.normal(size=(n, 2))
    ds = TransitionDataset(states, actions, np.zeros(n), next_states, np.zeros(n, bool))
    knn = knn_bandwidths(ds)
    sil = select_bandwidths(ds, "silverman")
    assert knn.state[0] < 0.1 < sil.state[0]          # within-cluster spacing, not 10
    np.testing.assert_allclose(knn.action, actions.std(ddof=1))
    # Next states that coincide with data states (a trajectory) still get a positive bandwidth.
    traj = TransitionDataset(states[:-1], actions[:-1], np.zeros(n - 1), states[1:],
                             np.zeros(n - 1, bool))
    assert np.all(knn_bandwidths(traj, k=1).state > 0)


def test_knn_rule_bad_arguments():
    ds = make_dataset(50)
    with pytest.raises(ValueError, match="'k' parameter"):
        knn_bandwidths(ds, k=0)
    with pytest.raises(ValueError, match="'max_queries' parameter"):
        knn_bandwidths(ds, max_queries=0)


def test_select_invalid_inputs():
    ds = make_dataset()
    with pytest.raises(ValueError, match="'method' parameter must be one of 'auto', 'knn', 'sil"):
        select_bandwidths(ds, "median")
    with pytest.raises(ValueError, match="'action_factor' parameter must be positive"):
        select_bandwidths(ds, action_factor=0.0)
    with pytest.raises(ValueError, match="'state_factor' parameter must be a scalar or have"):
        select_bandwidths(ds, state_factor=[1.0, 1.0, 1.0])
    const = make_dataset(actions=np.full(300, 0.5))
    for method in ("silverman", "cv", "auto", "knn"):
        with pytest.raises(ValueError, match=r"actions: dimension 0 is constant"):
            select_bandwidths(const, method)
    with pytest.raises(TypeError, match="must be a TransitionDataset"):
        select_bandwidths(np.zeros((3, 2)))


def test_knn_replay_guard_widens_bandwidths_on_clustered_data():
    """Most samples sit at one point (a controller holding a set point), a few trajectories
    lead there: the median spacing is the cluster's, and without the guard a next state outside
    the cluster has no data state but its successor within many bandwidths."""
    rng = np.random.default_rng(0)
    cluster = 0.001 * rng.normal(size=(900, 2))
    path = np.cumsum(np.full((100, 2), 0.05), axis=0) + 0.02 * rng.normal(size=(100, 2))
    states = np.concatenate([cluster, path])
    next_states = np.concatenate([cluster + 0.0005 * rng.normal(size=(900, 2)),
                                  np.concatenate([path[1:], path[-1:] + 0.05])])
    actions = rng.uniform(-1, 1, size=(1000, 1))
    ds = TransitionDataset(states, actions, np.zeros(1000), next_states, np.zeros(1000, bool))
    plain = knn_bandwidths(ds, reach=float("inf"))
    guarded = knn_bandwidths(ds)
    ratio = guarded.state / plain.state
    assert ratio[0] == pytest.approx(ratio[1]) and ratio[0] > 3     # one common widening factor
    from scipy.spatial import cKDTree

    fifth, _ = cKDTree(states / guarded.state).query(next_states / guarded.state, k=[5])
    assert np.quantile(fifth, 0.9) == pytest.approx(8.0, rel=1e-6)
    # Data without a dense cluster are left alone.
    spread = make_dataset(400)
    assert knn_bandwidths(spread) == knn_bandwidths(spread, reach=float("inf"))
    with pytest.raises(ValueError, match="'coverage' parameter"):
        knn_bandwidths(ds, coverage=0.0)


def test_thinness_at_is_the_models_thinness():
    import torch

    from nopg.model.kernels import thinness

    sq = np.random.default_rng(0).uniform(0, 30, size=(5, 8))
    log_mass = torch.logsumexp(torch.tensor(-0.5 * sq), dim=1)
    for radius in (1.0, 2.0, 3.0):
        np.testing.assert_allclose(thinness_at(sq, radius), thinness(log_mass, radius).numpy(),
                                   rtol=1e-12)
    # One data pair at the query: 1 - w = exp(-e^{r^2/2}); at r bandwidths: 1/e.
    np.testing.assert_allclose(thinness_at(np.array([[0.0], [4.0]])), [np.exp(-np.exp(2.0)), np.exp(-1)])


def _walks(dim: int, n: int, seed: int = 0, action_dim: int = 1) -> TransitionDataset:
    """Random-walk trajectories (next state = the following state) in ``dim`` dimensions."""
    rng = np.random.default_rng(seed)
    walks = np.cumsum(0.1 * rng.normal(size=(n // 20, 21, dim)), axis=1) \
        + rng.normal(size=(n // 20, 1, dim))
    states = walks[:, :-1].reshape(-1, dim)
    m = states.shape[0]
    return TransitionDataset(states, rng.uniform(-1, 1, size=(m, action_dim)), np.zeros(m),
                             walks[:, 1:].reshape(-1, dim), np.zeros(m, bool))


def test_support_widening_finds_the_smallest_factor():
    """Exact thinness (every data pair, k = n): at the factor returned the median thinness of the
    moved queries is at most the bound, 5% below it above the bound."""
    ds = _walks(11, 600)
    rng = np.random.default_rng(1)
    h_s, h_a = knn_bandwidths(ds, max_thinness=None).state, np.array([0.6])
    q, noise = ds.next_states[:200], rng.normal(size=(200, 11))
    acts = ds.actions[rng.integers(0, ds.n, 200)]

    def median_thinness(f: float) -> float:
        qs = np.hstack([q / (h_s * f) + noise, acts / h_a])
        xs = np.hstack([ds.states / (h_s * f), ds.actions / h_a])
        sq = ((qs[:, None, :] - xs[None]) ** 2).sum(-1)
        return float(np.median(thinness_at(sq)))

    f = support_widening(ds.states, ds.actions, q, noise, acts, h_s, h_a, 0.5, k=ds.n)
    assert f > 1.5
    assert median_thinness(f) <= 0.5 < median_thinness(f / 1.05)
    assert median_thinness(1.0) > 0.5
    # Already supported: no widening.
    assert support_widening(ds.states, ds.actions, q, 0 * noise, ds.actions[:200] * 0 + acts,
                            h_s * 50, h_a, 0.5) == 1.0


def test_auto_support_guard_and_action_dimension():
    """The support guard widens the state bandwidths of thin high-dimensional trajectories by
    one common factor and leaves dense low-dimensional data alone; the action bandwidth is the
    actions' spread times sqrt(d_a)."""
    high = _walks(11, 2000, action_dim=3)
    plain = knn_bandwidths(high, max_thinness=None)
    guarded = knn_bandwidths(high)
    ratio = guarded.state / plain.state
    assert np.allclose(ratio, ratio[0]) and ratio[0] > 1.5
    np.testing.assert_allclose(guarded.action, high.actions.std(axis=0, ddof=1) * np.sqrt(3))
    assert guarded == knn_bandwidths(high) == select_bandwidths(high, "auto")   # deterministic
    selection = knn_selection(high)
    assert selection.bandwidths == guarded and selection.replay_widening == 1.0
    assert selection.support_widening == pytest.approx(ratio[0])
    low = _walks(2, 2000)
    assert knn_bandwidths(low) == knn_bandwidths(low, max_thinness=None)
    np.testing.assert_allclose(knn_bandwidths(low).action, low.actions.std(ddof=1))
    with pytest.raises(ValueError, match="'max_thinness' parameter must be in"):
        knn_bandwidths(low, max_thinness=1.0)
    with pytest.raises(ValueError, match="'support_radius' parameter must be positive"):
        knn_bandwidths(low, support_radius=0.0)


# ------------------------------------------------------------------- action guard
def _linear_system(n: int = 2000, gain: float = 1.0, seed: int = 0, terminal_every: int = 0):
    """``s' = A s + b a`` with known ``b``: the action moves the next state by ``gain`` per unit."""
    rng = np.random.default_rng(seed)
    states = rng.uniform(-1, 1, size=(n, 2))
    actions = rng.uniform(-2, 2, size=(n, 1))
    b = gain * np.array([0.6, 0.8])                    # ||b|| = gain
    next_states = states @ np.array([[0.9, 0.1], [0.0, 0.95]]) + actions * b
    terminals = np.zeros(n, bool)
    if terminal_every:
        terminals[::terminal_every] = True
        next_states[terminals] = 1e3 * rng.normal(size=(terminals.sum(), 2))   # ignored rows
    return TransitionDataset(states, actions, np.zeros(n), next_states, terminals), b


def test_action_effect_is_the_slope_in_state_bandwidths():
    """Noise-free linear dynamics: the fit recovers b exactly, so the effect is
    ||b / h_s|| h_a; terminal transitions (whose next states are arbitrary) do not enter."""
    from nopg.bandwidth.selection import action_effect

    data, b = _linear_system(terminal_every=7)
    h_s, h_a = np.array([0.05, 0.2]), np.array([0.7])
    expected = np.linalg.norm(b / h_s) * h_a
    np.testing.assert_allclose(action_effect(data, h_s, h_a), expected, rtol=1e-9)
    # A subsample of the rows gives the same slope on noise-free data.
    np.testing.assert_allclose(action_effect(data, h_s, h_a, max_rows=100, seed=1), expected,
                               rtol=1e-9)
    # Fewer non-terminal rows than coefficients: no effect measured.
    tiny = TransitionDataset(data.states[:3], data.actions[:3], np.zeros(3), data.next_states[:3],
                             np.zeros(3, bool))
    np.testing.assert_array_equal(action_effect(tiny, h_s, h_a), [0.0])
    with pytest.raises(ValueError, match="h_state and h_action must have shapes"):
        action_effect(data, h_s[:1], h_a)


def test_action_guard_narrows_only_strong_actions_to_the_geometric_compromise():
    from nopg.bandwidth.selection import ACTION_EFFECT_MAX, action_effect

    weak, _ = _linear_system(gain=0.001)
    strong, _ = _linear_system(gain=1.0)
    for data in (weak, strong):
        off = knn_selection(data, max_action_effect=None)
        on = knn_selection(data)
        np.testing.assert_allclose(off.bandwidths.action, data.actions.std(ddof=1))
        np.testing.assert_array_equal(on.bandwidths.state, off.bandwidths.state)
        e = action_effect(data, off.bandwidths.state, off.bandwidths.action)
        np.testing.assert_allclose(on.action_effect, e)
        if e[0] <= ACTION_EFFECT_MAX:
            assert data is weak
            assert on.bandwidths == off.bandwidths and on.action_narrowing == (1.0,)
        else:
            assert data is strong
            shrink = np.sqrt(ACTION_EFFECT_MAX / e[0])
            np.testing.assert_allclose(on.action_narrowing, [shrink])
            np.testing.assert_allclose(on.bandwidths.action, shrink * off.bandwidths.action)
            # The narrowed kernel moves the next state by sqrt(max * e) state bandwidths.
            np.testing.assert_allclose(
                action_effect(data, on.bandwidths.state, on.bandwidths.action),
                np.sqrt(ACTION_EFFECT_MAX * e))
    assert knn_selection(strong, max_action_effect=None).action_narrowing == ()
    assert select_bandwidths(strong) == knn_selection(strong).bandwidths
    for bad in (0.0, -1.0, np.inf, np.nan):
        with pytest.raises(ValueError, match="'max_action_effect' parameter must be positive"):
            knn_bandwidths(strong, max_action_effect=bad)
