"""The support-aware model (``unsupported="absorb"``), the penalty model (``"penalty"``) and the
``support_gap`` diagnostic.

The gradient with the absorbing state or the penalty is checked against finite differences of
``J_hat`` on the dense, dense top-k, sparse candidate and k-NN paths, for NOPG-D and NOPG-S (same
noise seed). The closed forms check that ``J_hat`` equals ``eps0 . q + c * thin0`` with ``q``
solving the Bellman equation whose rewards carry ``c`` per unit of thinness (``c = v_abs``, or
``-lambda`` with the paper's rows for the penalty).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_gradient import GAMMA, check_against_fd

import nopg
from nopg.model.bellman import pessimistic_value

CASES = [dict(), dict(top_k=6, neighbors="dense"), dict(top_k=6, neighbors="candidates"),
         dict(top_k=6, neighbors="knn")]


@pytest.mark.parametrize("unsupported", ["absorb", "penalty"])
@pytest.mark.parametrize("kw", CASES, ids=["dense", "dense-topk", "candidates", "knn"])
def test_support_models_gradient_matches_finite_differences(dataset, bandwidths, initial_states,
                                                             det_policy, kw, unsupported):
    # Narrow bandwidths so that the thinness is far from 0 and 1 (its gradient matters).
    narrow = bandwidths.scaled(0.5, 0.5)
    check_against_fd(dataset, det_policy, bandwidths=narrow, gamma=GAMMA,
                     initial_states=initial_states, unsupported=unsupported, **kw)


@pytest.mark.parametrize("unsupported", ["absorb", "penalty"])
def test_support_models_gradient_stochastic(dataset, bandwidths, initial_states, gauss_policy,
                                            unsupported):
    check_against_fd(dataset, gauss_policy, bandwidths=bandwidths.scaled(0.5, 0.5), gamma=GAMMA,
                     initial_states=initial_states, unsupported=unsupported, stochastic=True,
                     n_mc_policy=3, seed=4)


def test_penalty_gradient_with_drawn_next_states(dataset, bandwidths, initial_states, det_policy):
    check_against_fd(dataset, det_policy, bandwidths=bandwidths.scaled(0.5, 0.5), gamma=GAMMA,
                     initial_states=initial_states, unsupported="penalty", top_k=6,
                     neighbors="knn", n_mc_next=3, seed=2)


def _support_and_paper_models(dataset, bandwidths, initial_states, policy, unsupported):
    """One solve of the ``unsupported`` model (``v_abs = -7``) and the paper's ``P``, ``eps0`` and
    thinness at the next and initial states, on narrow bandwidths."""
    bw = bandwidths.scaled(0.5, 0.5)
    model = nopg.bellman_model(dataset, bw, GAMMA, unsupported=unsupported, absorbing_value=-7.0)
    plain = nopg.bellman_model(dataset, bw, GAMMA)
    with torch.no_grad():
        sol = model.solution(policy, initial_states)
        P = plain.transition_matrix(policy).to_dense().numpy()
        eps0 = plain.initial_vector(policy, initial_states).numpy()
    thin_next = plain.thinness(policy, dataset.next_states)
    thin0 = plain.thinness(policy, initial_states)
    assert thin_next.max() > 0.05 and thin_next.min() < 0.95     # the tests are not vacuous
    assert sol.J < plain.solution(policy, initial_states).J      # pessimism lowers J_hat
    return model, plain, sol, P, eps0, thin_next, thin0


def test_absorb_closed_form(dataset, bandwidths, initial_states, det_policy):
    _, plain, sol, P_full, eps0_full, thin_next, thin0 = _support_and_paper_models(
        dataset, bandwidths, initial_states, det_policy, "absorb")
    disc = dataset.discounts(GAMMA)
    # Row i of the support-aware P is (1 - thin_i) times the paper's row; the rest is absorbed.
    P = P_full * (1 - thin_next)[:, None]
    np.testing.assert_allclose(sol.P.to_dense().numpy(), P, atol=1e-12)
    r = dataset.rewards + -7.0 * disc * thin_next
    q = np.linalg.solve(np.eye(dataset.n) - P, r)
    eps0 = ((1 - thin0)[:, None] * plain.responsibilities(det_policy, initial_states).to_dense()
            .detach().numpy()).mean(0)
    np.testing.assert_allclose(sol.eps0.detach().numpy(), eps0, atol=1e-12)
    J = eps0 @ q + -7.0 * thin0.mean()
    assert sol.J == pytest.approx(J, rel=1e-10)
    np.testing.assert_allclose(eps0_full.sum(), 1.0)


def test_penalty_closed_form(dataset, bandwidths, initial_states, det_policy):
    model, _, sol, P, eps0, thin_next, thin0 = _support_and_paper_models(
        dataset, bandwidths, initial_states, det_policy, "penalty")
    lam = dataset.rewards.max() - (1 - GAMMA) * -7.0
    assert model.unsupported_value == pytest.approx(-lam)
    # The rows are the paper's; every query pays lambda times its thinness in reward.
    np.testing.assert_allclose(sol.P.to_dense().numpy(), P, atol=1e-12)
    np.testing.assert_allclose(sol.eps0.numpy(), eps0, atol=1e-12)
    r = dataset.rewards - lam * dataset.discounts(GAMMA) * thin_next
    q = np.linalg.solve(np.eye(dataset.n) - P, r)
    assert sol.J == pytest.approx(eps0 @ q - lam * thin0.mean(), rel=1e-10)
    np.testing.assert_allclose(sol.q.numpy(), q, rtol=1e-8, atol=1e-8)
    # V(s) at the initial states carries the same penalty, and averages to J_hat.
    values = model.value(det_policy, initial_states, sol.q)
    assert values.mean() == pytest.approx(sol.J, rel=1e-10)


def test_penalty_is_zero_on_the_data_pairs(dataset, bandwidths):
    # Q at the data's own pairs (where the thinness is ~0) is the paper's.
    model = nopg.bellman_model(dataset, bandwidths, GAMMA, unsupported="penalty")
    plain = nopg.bellman_model(dataset, bandwidths, GAMMA)
    q = torch.as_tensor(np.linspace(-1.0, 1.0, dataset.n))
    np.testing.assert_allclose(model.logged_q_value(q), plain.logged_q_value(q), atol=1e-3)


def test_unknown_unsupported_option_is_rejected(dataset, bandwidths):
    with pytest.raises(ValueError, match="unsupported"):
        nopg.bellman_model(dataset, bandwidths, GAMMA, unsupported="halt")


def test_thinness_zero_on_data_one_far_away(dataset, bandwidths):
    model = nopg.bellman_model(dataset, bandwidths, GAMMA)

    class Replay(torch.nn.Module):
        """Plays the data's own action at the data's states, a far-away action elsewhere."""

        def __init__(self):
            super().__init__()
            self.dummy = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))

        def forward(self, s):
            table = torch.tensor(dataset.states)
            match = (s[:, None, :] - table[None]).abs().sum(-1).argmin(1)
            near = (s[:, None, :] - table[None]).abs().sum(-1).min(1).values < 1e-12
            far = torch.full((s.shape[0], 1), 50.0, dtype=s.dtype)
            return torch.where(near[:, None], torch.tensor(dataset.actions)[match], far)

    on_data = model.thinness(Replay(), dataset.states)
    assert on_data.max() < 1e-3
    far_states = dataset.states + 100.0
    assert model.thinness(Replay(), far_states).min() > 1 - 1e-12


def test_support_gap_in_unit_interval_and_tracks_extrapolation(dataset, bandwidths, initial_states,
                                                              det_policy):
    near = nopg.policy_gradient(dataset, det_policy, bandwidths=bandwidths, gamma=GAMMA,
                                initial_states=initial_states)
    far = nopg.policy_gradient(dataset, det_policy, bandwidths=bandwidths.scaled(0.05, 0.05),
                               gamma=GAMMA, initial_states=initial_states)
    assert 0.0 <= near.support_gap < 0.2
    assert far.support_gap > 0.9 >= near.support_gap


def test_pessimistic_value(dataset, dataset_no_terminals):
    assert pessimistic_value(dataset_no_terminals, 0.9) == pytest.approx(
        dataset_no_terminals.rewards.min() / 0.1)
    positive = nopg.TransitionDataset(dataset.states, dataset.actions, np.ones(dataset.n),
                                      dataset.next_states, dataset.terminals)
    assert pessimistic_value(positive, 0.9) == 0.0          # a terminal is reachable: worth 0


def test_fit_logs_support_gap_and_warns(dataset, bandwidths, initial_states, det_policy, tmp_path):
    algo = nopg.NOPG(det_policy, nopg.NOPGConfig(gamma=GAMMA, support_warning=0.0))
    with pytest.warns(nopg.SupportWarning, match="support gap") as record:
        algo.fit(dataset, bandwidths.scaled(0.05, 0.05), initial_states, 2, progress=False,
                 log_path=tmp_path / "log.csv")
    # the warning names the user's line (this file), not a line inside nopg
    assert {w.filename for w in record if w.category is nopg.SupportWarning} == {__file__}
    text = (tmp_path / "log.csv").read_text().splitlines()
    assert text[0].split(",")[2] == "support_gap"
    assert all(0.0 <= float(line.split(",")[2]) <= 1.0 for line in text[1:])
    assert 0.0 <= algo.support_gap_ <= 1.0


def test_initial_gap_is_the_thinness_at_the_initial_states(dataset, bandwidths, det_policy):
    # The support gap weighs the initial queries 1 against a discounted visitation of about
    # 1 / (1 - gamma); the initial gap reports them alone. Initial states far from the data give
    # an initial gap of 1 while the support gap stays small.
    model = nopg.bellman_model(dataset, bandwidths, 0.99)
    far = dataset.states[:4] + 50.0
    with torch.no_grad():
        sol_far = model.solution(det_policy, far)
        sol_near = model.solution(det_policy, dataset.states[:4])
    assert sol_far.initial_gap == pytest.approx(float(model.thinness(det_policy, far).mean()))
    assert sol_far.initial_gap > 1 - 1e-9
    assert sol_far.support_gap < 0.5 < sol_far.initial_gap
    assert sol_near.initial_gap == pytest.approx(
        float(model.thinness(det_policy, dataset.states[:4]).mean()))
    assert sol_near.initial_gap < 0.5


def test_fit_warns_when_the_initial_states_are_off_the_data(dataset, bandwidths, det_policy,
                                                            tmp_path):
    algo = nopg.NOPG(det_policy, nopg.NOPGConfig(gamma=0.99, support_warning=0.5))
    with pytest.warns(nopg.SupportWarning, match="initial states lie where the data are thin"):
        algo.fit(dataset, bandwidths, dataset.states[:4] + 50.0, 2, progress=False,
                 log_path=tmp_path / "log.csv")
    header = (tmp_path / "log.csv").read_text().splitlines()[0].split(",")
    assert header[3] == "initial_gap"
    assert algo.initial_gap_ > 0.99 and algo.support_gap_ < 0.5


def test_csv_logger_keeps_an_older_files_columns(tmp_path):
    from nopg.train.loggers import CSVLogger

    path = tmp_path / "log.csv"
    path.write_text("update,J_hat,support_gap\n1,2.0,0.1\n")
    sink = CSVLogger(path)
    sink.on_update({"update": 2, "J_hat": 3.0, "support_gap": 0.2, "initial_gap": 0.9})
    sink.close()
    assert path.read_text().splitlines() == ["update,J_hat,support_gap", "1,2.0,0.1", "2,3.0,0.2"]


@pytest.mark.parametrize("bad, match", [
    (dict(unsupported="ignore"), "unsupported"),
    (dict(support_radius=0.0), "support_radius"),
    (dict(absorbing_value=float("nan")), "absorbing_value"),
])
def test_bad_support_options(dataset, bandwidths, bad, match):
    with pytest.raises(ValueError, match=match):
        nopg.bellman_model(dataset, bandwidths, GAMMA, **bad)
    with pytest.raises(ValueError, match=match):
        nopg.NOPGConfig(model=nopg.ModelConfig(**bad))
