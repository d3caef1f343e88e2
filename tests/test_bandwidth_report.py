"""`nopg.select.bandwidth_report` (bandwidths chosen, distances in bandwidths, support) and
`nopg bandwidth`."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

import nopg
import nopg.select.bandwidth_report as br
from nopg.bandwidth.selection import knn_selection, select_bandwidths
from nopg.cli import main
from nopg.select.bandwidth_report import BandwidthReport, bandwidth_report


def _trajectories(n_episodes: int = 3, length: int = 25, seed: int = 0) -> nopg.TransitionDataset:
    """Episodes of a noisy 2-D linear system: next_states[i] == states[i + 1] within an episode."""
    rng = np.random.default_rng(seed)
    episodes = []
    for _ in range(n_episodes):
        s = np.empty((length + 1, 2))
        s[0] = rng.normal(size=2)
        a = rng.uniform(-1.0, 1.0, size=(length, 1))
        for t in range(length):
            s[t + 1] = 0.9 * s[t] + 0.3 * a[t] + 0.05 * rng.normal(size=2)
        episodes.append({"states": s[:-1], "actions": a, "rewards": -(s[:-1] ** 2).sum(1),
                         "next_states": s[1:], "terminals": np.zeros(length, dtype=bool)})
    return nopg.TransitionDataset.from_episodes(episodes)


@pytest.fixture
def trajectory() -> nopg.TransitionDataset:
    return _trajectories()


@pytest.mark.parametrize("method, state_factor, action_factor", [
    ("silverman", 1.0, 1.0), ("scott", [0.5, 2.0], 3.0), ("knn", 1.0, 0.5), ("cv", 2.0, 1.0)])
def test_bandwidths_are_select_bandwidths(dataset, method, state_factor, action_factor):
    report = bandwidth_report(dataset, method, state_factor, action_factor, seed=3)
    expected = select_bandwidths(dataset, method=method, state_factor=state_factor,
                                 action_factor=action_factor, seed=3)
    assert report.bandwidths == expected.broadcast(dataset.state_dim, dataset.action_dim)
    assert report.method == method and report.method_used.split(":")[0] == method
    assert report.seconds >= 0.0
    np.testing.assert_allclose(report.state_silverman, nopg.silverman_bandwidth(dataset.states))
    np.testing.assert_allclose(report.action_std, dataset.actions.std(0, ddof=1))
    np.testing.assert_allclose(report.state_ratio, expected.state / report.state_silverman)
    rows = report.dimensions()
    assert [(r["kind"], r["index"]) for r in rows] == [("state", 0), ("state", 1), ("action", 0)]
    assert rows[2]["chosen"] == pytest.approx(float(expected.action[0]))


def test_auto_reports_the_rule_and_leaves_logging_alone(dataset):
    logger = logging.getLogger("nopg.bandwidth.selection")
    level = logger.level
    report = bandwidth_report(dataset, "auto", seed=1)
    assert report.method == "auto" and report.method_used == "knn"
    assert report.bandwidths == select_bandwidths(dataset, method="auto", seed=1)
    assert logger.level == level and not logger.filters
    guards = knn_selection(dataset, seed=1)
    assert (report.replay_widening, report.support_widening) == \
        (guards.replay_widening, guards.support_widening)
    assert report.to_dict()["guards"] == {"replay_widening": guards.replay_widening,
                                          "support_widening": guards.support_widening,
                                          "action_effect": list(guards.action_effect),
                                          "action_narrowing": list(guards.action_narrowing)}
    assert report.action_effect == guards.action_effect and len(report.action_effect) == 1
    assert "(support guard: median thinness" in report.to_text()
    other = bandwidth_report(dataset, "silverman")
    assert other.support_widening is None and other.to_dict()["guards"] is None
    assert "guards" not in other.to_text()


def test_distances_are_in_bandwidth_units(dataset):
    one = bandwidth_report(dataset, "silverman", n_action_probes=2)
    two = bandwidth_report(dataset, "silverman", state_factor=2.0, n_action_probes=2)
    np.testing.assert_allclose(two.nearest_distance, one.nearest_distance / 2, rtol=1e-12)
    np.testing.assert_allclose(two.kth_distance, one.kth_distance / 2, rtol=1e-12)
    # Direct check of the nearest distance of one next state.
    h = one.bandwidths.state
    d = np.sqrt((((dataset.next_states[7] - dataset.states) / h) ** 2).sum(1))
    assert one.nearest_distance[7] == pytest.approx(d.min(), rel=1e-12)
    assert one.kth_distance[7] == pytest.approx(np.sort(d)[4], rel=1e-12)
    assert one.neighbor_k == 5 and np.all(one.kth_distance >= one.nearest_distance)


def test_support_own_actions_and_narrow_action_bandwidth(trajectory):
    wide = bandwidth_report(trajectory, "silverman")
    assert wide.own_available == 3 * 24                    # each step but the last of an episode
    assert wide.thinness_own.shape == (72,)
    assert wide.thinness_own.max() < 1e-3                  # (s'_i, a_{i+1}) is the data pair i+1
    assert wide.to_dict()["distances"]["share_coinciding"] == pytest.approx(72 / 75)
    assert "96.0 % of the next states are data states" in wide.to_text()
    narrow = bandwidth_report(trajectory, "silverman", action_factor=0.01)
    assert narrow.thinness_own.max() < 1e-3
    assert narrow.thinness_uniform.shape == (trajectory.n * 16,)
    assert narrow.thinness_uniform.mean() > wide.thinness_uniform.mean() + 0.3
    summary = narrow.to_dict()["support"]["uniform_actions"]
    assert summary["share_above_half"] > 0.5 and summary["n_states"] == trajectory.n


def test_no_own_actions_for_independent_transitions(dataset):
    report = bandwidth_report(dataset, "silverman", n_action_probes=3)
    assert report.own_available == 0 and report.thinness_own.size == 0
    own = report.to_dict()["support"]["own_actions"]
    assert own["mean"] is None and own["n_queries"] == 0
    assert "n/a" in report.to_text()


def test_large_data_paths(trajectory, monkeypatch):
    """Above DENSE_MAX_N the model keeps top_k entries; probes are subsampled."""
    dense = bandwidth_report(trajectory, "silverman", seed=5)
    monkeypatch.setattr(br, "DENSE_MAX_N", 10)
    monkeypatch.setattr(br, "MAX_PROBE_STATES", 20)
    monkeypatch.setattr(br, "MAX_OWN_QUERIES", 30)
    sparse = bandwidth_report(trajectory, "silverman", seed=5)
    assert sparse.support_model == "top_k=10" and dense.support_model == "dense"
    assert sparse.n_probe_states == 20 and sparse.thinness_uniform.shape == (20 * 16,)
    assert sparse.own_available == 72 and sparse.thinness_own.shape == (30,)
    assert sparse.thinness_own.max() < 1e-3
    assert "(of 72)" in sparse.to_text()


def test_to_dict_is_json_and_text_lists_bandwidths(trajectory):
    report = bandwidth_report(trajectory, "knn", state_factor=[1.0, 2.0], n_action_probes=4)
    assert isinstance(report, BandwidthReport)
    d = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    assert d["bandwidths"]["state"] == [float(v) for v in report.bandwidths.state]
    assert d["state_factor"] == [1.0, 2.0] and d["method_used"].startswith("knn")
    assert len(d["distances"]["nearest"]) == 3
    text = report.to_text()
    for v in (*report.bandwidths.state, *report.bandwidths.action):
        assert f"{v:.4g}" in text


def test_report_gives_the_action_predictability_and_auto_behaviour_weight(trajectory):
    from nopg.train.behaviour import AUTO_SCALE, action_predictability

    random_actions = bandwidth_report(trajectory, n_action_probes=2)
    assert random_actions.action_predictability == 0.0 == random_actions.behaviour_weight
    rng = np.random.default_rng(5)
    s = rng.normal(size=(300, 2))
    a = np.tanh(s[:, :1])                                   # a logged controller
    controller = nopg.TransitionDataset(states=s, actions=a, rewards=np.zeros(300),
                                        next_states=s + 0.1 * a, terminals=np.zeros(300, bool))
    report = bandwidth_report(controller, n_action_probes=2)
    assert report.action_predictability == action_predictability(controller) > 0.8
    d = report.to_dict()
    assert d["behaviour_weight"] == pytest.approx(AUTO_SCALE * d["action_predictability"])
    assert f"behaviour.weight='auto' = {report.behaviour_weight:.3g}" in report.to_text()


@pytest.mark.parametrize("kwargs, message", [
    ({"method": "nope"}, "method"), ({"state_factor": 0.0}, "state_factor"),
    ({"n_action_probes": 0}, "n_action_probes"), ({"seed": "x"}, "seed")])
def test_bad_arguments(dataset, kwargs, message):
    with pytest.raises(ValueError, match=message):
        bandwidth_report(dataset, **kwargs)


def test_plot_needs_existing_folder(dataset, tmp_path):
    from nopg.viz.bandwidth_plots import plot_bandwidth_report

    report = bandwidth_report(dataset, "silverman", n_action_probes=2)
    with pytest.raises(ValueError, match="missing"):
        plot_bandwidth_report(report, tmp_path / "missing" / "bw.png")
    out = plot_bandwidth_report(report, tmp_path / "bw.png")
    assert out.read_bytes()[:4] == b"\x89PNG"


# ---------------------------------------------------------------------------- CLI
@pytest.fixture
def data_file(tmp_path):
    path = tmp_path / "traj.npz"
    _trajectories().save(path)
    return path


def test_cli_prints_bandwidths_and_writes_png(data_file, tmp_path, capsys):
    png = tmp_path / "bw.png"
    assert main(["bandwidth", str(data_file), "--method", "silverman", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    bw = select_bandwidths(nopg.TransitionDataset.load(data_file), method="silverman")
    for v in (*bw.state, *bw.action):
        assert f"{v:.4g}" in out
    assert "silverman" in out and str(png) in out
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_cli_json(data_file, tmp_path, capsys):
    png = tmp_path / "bw.png"
    argv = ["bandwidth", str(data_file), "--method", "knn", "--state-factor", "1", "2",
            "--action-factor", "0.5", "--seed", "1", "--plot", str(png), "--json"]
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    bw = select_bandwidths(nopg.TransitionDataset.load(data_file), method="knn",
                           state_factor=np.array([1.0, 2.0]), action_factor=0.5)
    assert d["bandwidths"]["state"] == pytest.approx(list(bw.state), rel=1e-12)
    assert d["plot"] == str(png) and png.is_file()


def test_cli_default_plot_in_current_folder(data_file, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["bandwidth", str(data_file), "--method", "scott"]) == 0
    assert (tmp_path / "bandwidth_report.png").is_file()


@pytest.mark.parametrize("extra, message", [
    (["--method", "bogus"], "--method"),
    (["--state-factor", "0"], "--state-factor"),
    (["--action-factor", "1", "-2"], "--action-factor"),
    (["--plot", "no_such_folder/bw.png"], "no_such_folder"),
    (["--max-action-effect", "0"], "--max-action-effect"),
    (["--max-action-effect", "off"], "--max-action-effect"),
])
def test_cli_errors(data_file, tmp_path, monkeypatch, capsys, extra, message):
    def fail(*args, **kwargs):
        raise AssertionError("computed before checking the arguments")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(br, "bandwidth_report", fail)
    assert main(["bandwidth", str(data_file), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("nopg: error:") and message in err[0]


def test_cli_missing_file(tmp_path, capsys):
    assert main(["bandwidth", str(tmp_path / "none.npz"), "--plot", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("nopg: error:") and "does not exist" in err[0]
    assert not (tmp_path / "x.png").exists()


def test_report_shows_the_action_guard_where_it_narrows():
    """Noise-free dynamics whose action moves the next state by far more than a state
    bandwidth: the report names the guard's factor and the measured effect."""
    rng = np.random.default_rng(0)
    states = rng.uniform(-1, 1, size=(600, 2))
    actions = rng.uniform(-1, 1, size=(600, 1))
    data = nopg.TransitionDataset(states, actions, np.zeros(600), 0.9 * states + actions,
                                  np.zeros(600, bool))
    report = bandwidth_report(data, "auto")
    guards = knn_selection(data)
    assert guards.action_narrowing[0] < 1.0
    assert report.action_narrowing == guards.action_narrowing
    assert "(action guard: one action bandwidth of the spread moved the next state by" in \
        report.to_text()
    assert report.to_dict()["guards"]["action_narrowing"] == list(guards.action_narrowing)


def test_cli_turns_the_action_guard_off(tmp_path, capsys):
    """``--max-action-effect none`` reports the rule without its action guard."""
    rng = np.random.default_rng(0)
    states = rng.uniform(-1, 1, size=(400, 2))
    actions = rng.uniform(-1, 1, size=(400, 1))
    path = tmp_path / "strong.npz"
    nopg.TransitionDataset(states, actions, np.zeros(400), 0.9 * states + actions,
                           np.zeros(400, bool)).save(path)
    png = str(tmp_path / "bw.png")
    assert main(["bandwidth", str(path), "--json", "--plot", png]) == 0
    on = json.loads(capsys.readouterr().out)
    assert main(["bandwidth", str(path), "--json", "--plot", png, "--max-action-effect", "none"]) == 0
    off = json.loads(capsys.readouterr().out)
    assert on["guards"]["action_narrowing"][0] < 1.0 and off["guards"]["action_narrowing"] == []
    assert off["bandwidths"]["action"][0] == pytest.approx(actions.std(ddof=1))
    assert on["bandwidths"]["action"][0] == pytest.approx(
        off["bandwidths"]["action"][0] * on["guards"]["action_narrowing"][0])
