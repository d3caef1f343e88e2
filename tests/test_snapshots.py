"""Policy snapshots along a fit and the judge's choice among them (:mod:`nopg.select.snapshots`).

- the callback keeps copies (not views) of the policy at the updates asked for, and a snapshot
  loaded back gives the ``J_hat`` the fit logged for that policy;
- the judge keeps the final policy unless a snapshot's forecast (the true return on linear
  dynamics) is clearly higher, and loads the kept one into the fit;
- in the runner: the choice is recorded, the kept policy is the one evaluated and saved, and
  bad settings are refused.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from test_anchored import START, _linear_data
from test_recipes import BOUND, _true_episode
from test_terminal_bounds import BW, _pushing

import nopg
from nopg import NOPG, GradientAscent, ModelConfig, NOPGConfig
from nopg.experiments import get_task, run_seed
from nopg.select.policy_selection import judge_model, score_policy
from nopg.select.snapshots import PolicySnapshots, Snapshot, choose_snapshot, policy_state

CONFIG = NOPGConfig(gamma=0.9,
                    model=ModelConfig(top_k=None, n_mc_next=None, terminal_bounds=BOUND, state_circles=None))


def test_snapshots_are_copies_at_the_asked_updates_and_give_the_logged_j_hat():
    torch.manual_seed(0)
    algo = NOPG(nopg.DeterministicMLPPolicy(2, 1, hidden=(8,)),
                NOPGConfig(gamma=0.9, optimizer=GradientAscent(learning_rate=0.05),
                           model=ModelConfig(top_k=None, n_mc_next=None)))
    snaps = PolicySnapshots(every=2, start=3)
    algo.fit(_linear_data(200), BW, START, 7, callbacks=[snaps], progress=False)
    assert [s.update for s in snaps.snapshots] == [4, 6]
    final = policy_state(algo.policy)
    assert not all(torch.equal(final[k], v) for k, v in snaps.snapshots[0].state.items())
    for snap in snaps.snapshots:
        algo.load_policy_state(snap.state)
        # the metrics of update k + 1 hold J_hat of the policy after k updates
        assert algo.J_hat() == pytest.approx(algo.history_[snap.update]["J_hat"], rel=1e-9)
    algo.load_policy_state(final)
    assert algo.J_hat() == pytest.approx(algo.solution().J) and algo.update_ == 7
    for bad in ({"every": 0}, {"every": 2, "start": -1}, {"every": 1.5}, {"every": True}):
        with pytest.raises(ValueError, match="'(every|start)' parameter"):
            PolicySnapshots(**bad)


def _fitted(final_force: float) -> NOPG:
    algo = NOPG(_pushing(final_force), CONFIG)
    algo.setup(_linear_data(), BW, START)
    return algo


@pytest.mark.parametrize("final_force, kept_update", [(0.5, 30), (0.0, 0)])
def test_the_judge_keeps_a_snapshot_only_where_it_forecasts_clearly_more(final_force, kept_update):
    """Pushing towards ``x = 1`` ends the episode early; standing still earns more (the judge's
    forecast is the true return here): a worse final policy gives way to the better snapshot,
    a better one stays."""
    judge = judge_model(_linear_data(), BW, CONFIG)
    algo = _fitted(final_force)
    other = 0.5 if final_force == 0.0 else 0.0
    snaps = [Snapshot(10, policy_state(_pushing(final_force))),
             Snapshot(30, policy_state(_pushing(other)))]
    choice = choose_snapshot(judge, algo, snaps, START, 60, seed=0)
    assert choice.updates == [0, 30, 10] and choice.update == kept_update
    assert choice.kept_final == (kept_update == 0)
    truths = {f: np.mean([_true_episode(s, f, 60)[0] for s in START]) for f in (0.0, 0.5)}
    assert truths[0.0] > 1.05 * truths[0.5]
    forecasts = [s.episode_return_mean for s in choice.scores]
    assert forecasts[0] == pytest.approx(truths[final_force], rel=1e-6)
    assert forecasts[1] == pytest.approx(truths[other], rel=1e-6)
    kept = algo.policy.linear.bias.item()
    assert kept == (0.0 if kept_update == 30 or final_force == 0.0 else 0.5)
    direct = score_policy(judge, algo.policy, START, 60, seed=0)
    assert direct.episode_return_mean == pytest.approx(truths[0.0], rel=1e-6)
    json.dumps(choice.to_dict())


def _runner_config(**changes):
    task = get_task("pendulum-grid")
    config = task.default_config().replace(
        n_updates=6, eval_every=100, snapshot_every=2,
        task={"n_theta": 5, "n_theta_dot": 5, "n_action": 2, "eval_steps": 50,
              "portrait_resolution": 10}, **changes)
    return task, config


def test_the_runner_records_the_choice_and_evaluates_the_kept_policy(tmp_path):
    task, config = _runner_config(snapshot_from=0.5)
    res = run_seed(task, config, 0, tmp_path / "on", progress=False).to_dict()
    choice = res["snapshot"]
    assert choice["updates"] == [6, 4] and choice["update"] in (6, 4)    # from update 3 on
    algo = NOPG.load(tmp_path / "on" / "checkpoint")
    expected = float(np.mean(task.evaluate(algo.policy, config, 0, config.final_eval_episodes)))
    assert res["return_mean"] == pytest.approx(expected, rel=1e-12)
    assert res["J_hat"] == pytest.approx(algo.J_hat(), rel=1e-9)
    off = run_seed(task, config.replace(snapshot_every=None), 0, tmp_path / "off", progress=False).to_dict()
    assert "snapshot" not in off
    if choice["kept_final"]:
        assert res["J_hat"] == pytest.approx(off["J_hat"], rel=1e-12)
    none = run_seed(task, config.replace(snapshot_every=10), 0, tmp_path / "none", progress=False).to_dict()
    assert "snapshot" not in none and none["J_hat"] == pytest.approx(off["J_hat"], rel=1e-12)
    json.dumps(res["snapshot"])


def test_bad_snapshot_settings_are_refused():
    task = get_task("pendulum-grid")
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="'snapshot_every' parameter"):
            task.default_config().replace(snapshot_every=bad)
    for bad in (-0.1, 1.5, "half", True):
        with pytest.raises(ValueError, match="'snapshot_from' parameter"):
            task.default_config().replace(snapshot_from=bad)


def test_within_the_margin_the_later_policy_stays():
    """Along one fit a tie keeps the later policy; among recipes the judge's ``J_hat`` breaks it."""
    from test_recipes import _forecast

    from nopg.select.policy_selection import best_score

    final, earlier = _forecast(-400.0, 0.0), _forecast(-397.0, 9.0)       # 3 < 1% of 400
    assert best_score([final, earlier], tie_break=False) == 0
    assert best_score([final, earlier]) == 1
    assert best_score([final, _forecast(-390.0, 0.0)], tie_break=False) == 1


def test_evaluated_candidates_give_the_judges_rank_correlation_and_regret(tmp_path):
    """With ``evaluate_candidates`` every policy the judge scores is also evaluated (for the
    record): the kept one's return is the seed's, the regret@1 is the best scored return less
    it, and the run's summary pools the candidates into a rank correlation; the choice is the
    one made without the evaluations."""
    from nopg.experiments.runner import selection_report

    task, config = _runner_config(snapshot_from=0.0)
    res = run_seed(task, config.replace(evaluate_candidates=True), 0, tmp_path / "on",
                   progress=False).to_dict()
    plain = run_seed(task, config, 0, tmp_path / "off", progress=False).to_dict()
    rows = res["fit_report"]["scored"]
    assert [r["update"] for r in rows] == [6, 4, 2] and sum(r["kept"] for r in rows) == 1
    kept = next(r for r in rows if r["kept"])
    assert kept["update"] == res["snapshot"]["update"] == plain["snapshot"]["update"]
    assert kept["return"] == pytest.approx(res["return_mean"], rel=1e-12)
    assert res["fit_report"]["regret_at_1"] == pytest.approx(
        max(r["return"] for r in rows) - kept["return"], abs=1e-12)
    assert [r["return"] for r in plain["fit_report"]["scored"]] == [plain["return_mean"]]
    report = selection_report([res, res])
    assert report["scored"] == 6 and report["regret_at_1"] == [res["fit_report"]["regret_at_1"]] * 2
    assert -1.0 <= report["spearman"] <= 1.0
    assert selection_report([{"seed": 0}]) is None
