"""The NOPG estimator: optimisation, logs, callbacks, checkpoints, determinism, config validation."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
import torch
from torch import nn

import nopg
from nopg.train.algorithm import LOG_COLUMNS

TARGET = 0.5


@pytest.fixture
def target_data() -> nopg.TransitionDataset:
    """1-D problem where the reward only depends on the action: r = -(a - 0.5)^2.

    Next states are independent of the action, so the optimal policy plays 0.5 everywhere and any
    policy starting near 0 must raise J_hat by moving its actions towards 0.5.
    """
    rng = np.random.default_rng(0)
    n = 60
    s = rng.uniform(-1, 1, size=(n, 1))
    a = rng.uniform(-1, 1, size=(n, 1))
    s1 = rng.uniform(-1, 1, size=(n, 1))
    r = -(a[:, 0] - TARGET) ** 2
    term = np.zeros(n, dtype=bool)
    term[[10, 40]] = True
    return nopg.TransitionDataset(s, a, r, s1, term)


@pytest.fixture
def target_bw() -> nopg.Bandwidths:
    return nopg.Bandwidths(state=0.3, action=0.25)


S0 = np.array([[-0.5], [0.0], [0.5]])


def small_det(seed: int = 0) -> nopg.DeterministicMLPPolicy:
    torch.manual_seed(seed)
    return nopg.DeterministicMLPPolicy(1, 1, action_max=1.0, hidden=(8,), activation="tanh")


def small_gauss(seed: int = 0) -> nopg.GaussianMLPPolicy:
    torch.manual_seed(seed)
    return nopg.GaussianMLPPolicy(1, 1, action_max=1.0, sigma_max=0.5, hidden=(8,),
                                  activation="tanh")


def params(algo: nopg.NOPG) -> list[torch.Tensor]:
    return [p.detach().clone() for p in algo.policy.parameters()]


def assert_same_params(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert torch.equal(x, y)


# ---------------------------------------------------------------------------- optimisation
@pytest.mark.parametrize("make, stochastic", [(small_det, False), (small_gauss, True)])
def test_updates_increase_J_hat(target_data, target_bw, make, stochastic):
    config = nopg.NOPGConfig(gamma=0.8, seed=0, optimizer=nopg.GradientAscent(learning_rate=1e-2),
                             model=nopg.ModelConfig(n_mc_policy=5))
    algo = nopg.NOPG(make(), config)
    assert algo.stochastic is stochastic
    algo.setup(target_data, target_bw, S0)
    j_start = algo.J_hat()
    a_start = algo.predict(S0)
    algo.fit(target_data, target_bw, S0, n_updates=20, progress=False)
    j_end = algo.J_hat()
    assert j_end > j_start + 0.3 * abs(j_start), (j_start, j_end)
    # The actions moved towards the target.
    assert np.abs(algo.predict(S0) - TARGET).mean() < np.abs(a_start - TARGET).mean()
    js = [h["J_hat"] for h in algo.history_]
    assert len(js) == 20 and js[-1] > js[0]


def test_linear_policy_sgd_moves_towards_target(target_data, target_bw):
    config = nopg.NOPGConfig(gamma=0.5, optimizer=nopg.GradientAscent("sgd", learning_rate=0.05))
    algo = nopg.NOPG(nopg.LinearPolicy(1, 1), config)
    algo.fit(target_data, target_bw, S0, n_updates=10, progress=False)
    bias = float(algo.policy.linear.bias.detach())
    assert 0 < bias < 1.0
    assert algo.history_[-1]["J_hat"] > algo.history_[0]["J_hat"]


@pytest.mark.parametrize("n_mc_next", ["auto", None])
def test_step_gradient_is_the_policy_gradient(dataset, bandwidths, initial_states, det_policy,
                                              n_mc_next):
    """One SGD step with lr 1 moves the parameters by exactly grad J_hat (ascent), with the
    default Monte-Carlo next states (the same draws for the same seed) and the kernel mean."""
    before = [p.detach().clone() for p in det_policy.parameters()]
    res = nopg.policy_gradient(dataset, det_policy, bandwidths=bandwidths, gamma=0.9,
                               initial_states=initial_states, top_k=8, n_mc_next=n_mc_next)
    algo = nopg.NOPG(det_policy,
                     nopg.NOPGConfig(gamma=0.9, optimizer=nopg.GradientAscent("sgd", learning_rate=1.0),
                                     model=nopg.ModelConfig(top_k=8, n_mc_next=n_mc_next)))
    algo.fit(dataset, bandwidths, initial_states, n_updates=1, progress=False)
    assert algo.history_[0]["J_hat"] == pytest.approx(res.J, abs=1e-12)
    norm = math.sqrt(sum(float((g * g).sum()) for g in res.grads))
    assert algo.history_[0]["grad_norm"] == pytest.approx(norm, rel=1e-10)
    for p0, p1, g in zip(before, algo.policy.parameters(), res.grads):
        torch.testing.assert_close(p1.detach() - p0, g, rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------------------- logs, callbacks
def test_csv_log_one_row_per_update(tmp_path, target_data, target_bw):
    log = tmp_path / "logs" / "train.csv"
    algo = nopg.NOPG(small_det(), nopg.NOPGConfig(gamma=0.8))
    algo.fit(target_data, target_bw, S0, n_updates=4, log_path=log, progress=False)
    algo.fit(target_data, target_bw, S0, n_updates=3, log_path=log, progress=False)
    with open(log, newline="") as fh:
        reader = csv.DictReader(fh)
        assert tuple(reader.fieldnames) == LOG_COLUMNS
        rows = list(reader)
    assert len(rows) == 7
    assert [int(r["update"]) for r in rows] == list(range(1, 8))
    np.testing.assert_array_equal([float(r["J_hat"]) for r in rows],
                                  [h["J_hat"] for h in algo.history_])
    not_applicable = {"eval_return", "behaviour_loss", "behaviour_kept", "behaviour_ess",
                      "evaluations", "search_sigma", "search_restarts",
                      "search_alive"}   # optimizer="cma-es"
    for r in rows:
        for col in LOG_COLUMNS:          # no behaviour term on exploration data: empty cells
            if col in not_applicable:
                assert r[col] == "", col
            else:
                assert math.isfinite(float(r[col])), col
    assert set(LOG_COLUMNS) >= {"update", "J_hat", "grad_norm", "sigma_scale", "eval_return"}


def test_eval_callback_records_every_n(tmp_path, target_data, target_bw):
    calls = []

    def eval_fn(policy):
        calls.append(policy)
        return float(len(calls)) * 10.0

    cb = nopg.EvalCallback(eval_fn, every=2)
    log = tmp_path / "log.csv"
    algo = nopg.NOPG(small_det(), nopg.NOPGConfig(gamma=0.8))
    algo.fit(target_data, target_bw, S0, n_updates=5, callbacks=[cb], log_path=log,
             progress=False)
    assert cb.results == [(2, 10.0), (4, 20.0)]
    assert all(p is algo.policy for p in calls)
    with open(log, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["eval_return"] for r in rows] == ["", "10.0", "", "20.0", ""]
    assert [h.get("eval_return") for h in algo.history_] == [None, 10.0, None, 20.0, None]
    with pytest.raises(ValueError, match="every"):
        nopg.EvalCallback(eval_fn, every=0)


def test_callback_returning_false_stops_fit(target_data, target_bw):
    seen = []

    def stopper(algo, metrics):
        seen.append(metrics["update"])
        return False if metrics["update"] == 3 else None

    algo = nopg.NOPG(small_det(), nopg.NOPGConfig(gamma=0.8))
    algo.fit(target_data, target_bw, S0, n_updates=10, callbacks=[stopper], progress=False)
    assert seen == [1, 2, 3]
    assert algo.update_ == 3 and len(algo.history_) == 3


def test_checkpoint_callback_writes_loadable_folder(tmp_path, target_data, target_bw):
    algo = nopg.NOPG(small_det(), nopg.NOPGConfig(gamma=0.8))
    algo.fit(target_data, target_bw, S0, n_updates=4, progress=False,
             callbacks=[nopg.CheckpointCallback(tmp_path / "ckpt", every=2)])
    loaded = nopg.NOPG.load(tmp_path / "ckpt")
    assert loaded.update_ == 4
    assert_same_params(params(loaded), params(algo))


# ---------------------------------------------------------------------------- checkpoints
@pytest.mark.parametrize("solver, preconditioner", [("dense", "auto"), ("bicgstab", "ilu"),
                                                    ("bicgstab", "aggregation")])
def test_checkpoint_resume_is_exact(tmp_path, target_data, target_bw, solver, preconditioner):
    config = nopg.NOPGConfig(gamma=0.9, seed=5, optimizer=nopg.GradientAscent(learning_rate=2e-2),
                             model=nopg.ModelConfig(n_mc_policy=3, n_mc_next=2, solver=solver,
                                                    solver_tol=1e-9, top_k=10, preconditioner=preconditioner),
                             sigma_decay=nopg.SigmaDecay(to=0.3, updates=6))
    full = nopg.NOPG(small_gauss(), config)
    full.fit(target_data, target_bw, S0, n_updates=6, progress=False)

    first = nopg.NOPG(small_gauss(), config)
    first.fit(target_data, target_bw, S0, n_updates=3, progress=False)
    first.save(tmp_path / "ckpt")
    del first
    torch.manual_seed(12345)  # the global RNG state must not matter
    resumed = nopg.NOPG.load(tmp_path / "ckpt")
    assert resumed.update_ == 3 and resumed.stochastic
    resumed.fit(target_data, target_bw, S0, n_updates=3, progress=False)

    assert resumed.update_ == full.update_ == 6
    assert_same_params(params(resumed), params(full))
    assert [h["J_hat"] for h in resumed.history_] == [h["J_hat"] for h in full.history_]
    assert [h["sigma_scale"] for h in resumed.history_] == [h["sigma_scale"] for h in full.history_]
    assert float(resumed.policy.sigma_scale) == float(full.policy.sigma_scale)
    assert resumed.J_hat() == full.J_hat()


def test_checkpoint_round_trip_queries(tmp_path, target_data, target_bw):
    algo = nopg.NOPG(small_det(), nopg.NOPGConfig(gamma=0.8, model=nopg.ModelConfig(top_k=8)))
    algo.fit(target_data, target_bw, S0, n_updates=2, progress=False)
    algo.save(tmp_path / "c")
    meta = json.loads((tmp_path / "c" / "meta.json").read_text())
    assert meta["update"] == 2
    loaded = nopg.NOPG.load(tmp_path / "c")  # data set, bandwidths and s0 come from the folder
    assert loaded.config == algo.config
    assert loaded.J_hat() == algo.J_hat()
    s = np.linspace(-1, 1, 7)[:, None]
    np.testing.assert_array_equal(loaded.value(s), algo.value(s))


def test_load_custom_policy_needs_policy(tmp_path, target_data, target_bw):
    torch.manual_seed(0)
    policy = nn.Sequential(nn.Linear(1, 4), nn.Tanh(), nn.Linear(4, 1))
    algo = nopg.NOPG(policy, nopg.NOPGConfig(gamma=0.8))
    algo.fit(target_data, target_bw, S0, n_updates=2, progress=False)
    algo.save(tmp_path / "c")
    with pytest.raises(ValueError, match="custom policy"):
        nopg.NOPG.load(tmp_path / "c")
    fresh = nn.Sequential(nn.Linear(1, 4), nn.Tanh(), nn.Linear(4, 1))
    loaded = nopg.NOPG.load(tmp_path / "c", policy=fresh)
    assert_same_params(params(loaded), params(algo))


@pytest.mark.parametrize("missing", ["config.json", "meta.json", "policy.pt", "optimizer.pt",
                                     "state.pt"])
def test_load_incomplete_folder_raises(tmp_path, target_data, target_bw, missing):
    algo = nopg.NOPG(small_det(), nopg.NOPGConfig(gamma=0.8))
    algo.fit(target_data, target_bw, S0, n_updates=1, progress=False)
    algo.save(tmp_path / "c")
    (tmp_path / "c" / missing).unlink()
    with pytest.raises(ValueError, match=missing.replace(".", r"\.")):
        nopg.NOPG.load(tmp_path / "c")


def test_load_empty_folder_raises(tmp_path):
    with pytest.raises(ValueError, match="not a NOPG checkpoint"):
        nopg.NOPG.load(tmp_path)


# ---------------------------------------------------------------------------- determinism
def test_same_seed_same_parameters(target_data, target_bw):
    config = nopg.NOPGConfig(gamma=0.9, seed=3, model=nopg.ModelConfig(n_mc_policy=3, n_mc_next=2))
    runs = []
    for _ in range(2):
        algo = nopg.NOPG(small_gauss(seed=7), config)
        algo.fit(target_data, target_bw, S0, n_updates=4, progress=False)
        runs.append(algo)
    assert_same_params(params(runs[0]), params(runs[1]))
    assert [h["J_hat"] for h in runs[0].history_] == [h["J_hat"] for h in runs[1].history_]
    other = nopg.NOPG(small_gauss(seed=7),
                      nopg.NOPGConfig(gamma=0.9, seed=4, model=nopg.ModelConfig(n_mc_policy=3, n_mc_next=2)))
    other.fit(target_data, target_bw, S0, n_updates=4, progress=False)
    assert other.history_[0]["J_hat"] != runs[0].history_[0]["J_hat"]


# ---------------------------------------------------------------------------- estimates
def test_query_shapes(target_data, target_bw):
    algo = nopg.NOPG(small_gauss(), nopg.NOPGConfig(gamma=0.8, model=nopg.ModelConfig(n_mc_policy=3)))
    algo.fit(target_data, target_bw, S0, n_updates=2, progress=False)
    s = np.linspace(-2, 2, 11)[:, None]
    a = np.linspace(-1, 1, 11)[:, None]
    v, qv, vis, act = algo.value(s), algo.q_value(s, a), algo.visitation(s), algo.predict(s)
    assert v.shape == qv.shape == vis.shape == (11,)
    assert act.shape == (11, 1)
    for arr in (v, qv, vis, act):
        assert isinstance(arr, np.ndarray) and np.all(np.isfinite(arr))
    assert np.all(vis >= -1e-12)
    bound = np.abs(target_data.rewards).max() / (1 - 0.8)
    assert np.all(np.abs(v) <= bound) and np.all(np.abs(qv) <= bound)
    # predict is the Gaussian's mean.
    with torch.no_grad():
        mean = algo.policy.mean_std(torch.tensor(s))[0].numpy()
    np.testing.assert_array_equal(act, mean)
    assert algo.predict(np.array([0.3])).shape == (1, 1)


def test_sigma_decay_schedule(target_data, target_bw):
    config = nopg.NOPGConfig(gamma=0.8, model=nopg.ModelConfig(n_mc_policy=2),
                             sigma_decay=nopg.SigmaDecay(to=0.2, updates=5))
    algo = nopg.NOPG(small_gauss(), config)
    algo.fit(target_data, target_bw, S0, n_updates=5, progress=False)
    scales = [h["sigma_scale"] for h in algo.history_]
    np.testing.assert_allclose(scales, [1.0, 0.8, 0.6, 0.4, 0.2], rtol=0, atol=1e-12)
    assert scales[-1] == pytest.approx(0.2, abs=1e-15)
    assert float(algo.policy.sigma_scale) == pytest.approx(0.2, abs=1e-15)
    algo.fit(target_data, target_bw, S0, n_updates=2, progress=False)
    assert [h["sigma_scale"] for h in algo.history_[5:]] == pytest.approx([0.2, 0.2])


def test_float32_config_runs_close_to_float64(target_data, target_bw):
    j = {}
    for dtype in ("float64", "float32"):
        algo = nopg.NOPG(small_det(), nopg.NOPGConfig(gamma=0.8, model=nopg.ModelConfig(dtype=dtype)))
        algo.setup(target_data, target_bw, S0)
        assert next(algo.policy.parameters()).dtype == getattr(torch, dtype)
        j[dtype] = algo.J_hat()
    assert j["float32"] == pytest.approx(j["float64"], rel=1e-4)


# ---------------------------------------------------------------------------- bad inputs
def test_nopg_bad_inputs(target_data, target_bw):
    with pytest.raises(ValueError, match="nn.Module"):
        nopg.NOPG(lambda s: s)
    with pytest.raises(ValueError, match="no parameters"):
        nopg.NOPG(nn.Tanh())
    algo = nopg.NOPG(small_det())
    with pytest.raises(ValueError, match="n_updates"):
        algo.fit(target_data, target_bw, S0, n_updates=-1, progress=False)
    with pytest.raises(ValueError, match="initial_states"):
        algo.fit(target_data, target_bw, np.zeros((2, 3)), n_updates=1, progress=False)
    with pytest.raises(RuntimeError):
        nopg.NOPG(small_det()).step()


def test_queries_before_fit_raise_runtime_error():
    """Like ``J_hat()``, the other estimates must say that fit()/setup() is needed."""
    algo = nopg.NOPG(small_det())
    s, a = np.zeros((2, 1)), np.zeros((2, 1))
    with pytest.raises(RuntimeError, match="fit"):
        _ = algo.J_hat()
    with pytest.raises(RuntimeError, match="fit"):
        algo.value(s)
    with pytest.raises(RuntimeError, match="fit"):
        algo.q_value(s, a)
    with pytest.raises(RuntimeError, match="fit"):
        algo.visitation(s)


def test_checkpoint_callback_rejects_non_positive_every(tmp_path):
    with pytest.raises(ValueError, match="every"):
        nopg.CheckpointCallback(tmp_path / "c", every=0)


@pytest.mark.parametrize("kw, match", [
    (dict(gamma=1.0), "gamma"),
    (dict(gamma=-0.01), "gamma"),
    (dict(gamma=True), "gamma"),
    ({"optimizer.learning_rate": 0.0}, "'learning_rate' parameter of GradientAscent"),
    (dict(optimizer="adagrad"), "optimizer"),
    (dict(optimizer=dict(name="adam", sigma=1.0)), "unknown setting optimizer.sigma"),
    (dict(model=dict(topk=3)), "unknown setting model.topk of ModelConfig; did you mean 'top_k'"),
    (dict(model="dense"), "'model' parameter of NOPGConfig"),
    ({"model.top_k": 0}, "top_k"),
    ({"model.n_mc_policy": 0}, "n_mc_policy"),
    ({"model.n_mc_next": 1.5}, "n_mc_next"),
    ({"model.solver": "lu"}, "solver"),
    ({"model.solver_tol": 0.0}, "solver_tol"),
    ({"model.dtype": "float16"}, "dtype"),
    ({"model.device": "gpu"}, "device"),
    ({"model.device": "tpu:0"}, "device"),
    ({"sigma_decay.to": 0.5}, "sigma_decay"),                     # its length is required
    (dict(sigma_decay=dict(to=0.0, updates=3)), "'to' parameter of SigmaDecay"),
    (dict(sigma_decay=dict(to=1.5, updates=3)), "'to' parameter of SigmaDecay"),
    (dict(seed=1.0), "seed"),
    ({"starts.draws": 0}, "'draws' parameter of Starts"),
    ({"starts.draws": 2.5}, "'draws' parameter of Starts"),
    ({"starts.draw_scale": 0.0}, "'draw_scale' parameter of Starts"),
    (dict(starts=3), "'starts' parameter of NOPGConfig"),
    ({"model.state_bounds": [[0.0], [1.0, 2.0]]}, "state_bounds"),
    ({"model.state_bounds": [[1.0], [0.0]]}, "state_bounds"),
    ({"model.state_bounds": [[math.nan], [1.0]]}, "state_bounds"),
    ({"model.state_bounds": "speed"}, "state_bounds"),
    ({"model.state_bounds": [[True], [2.0]]}, "state_bounds"),
])
def test_config_validation(kw, match):
    with pytest.raises(ValueError, match=match):
        nopg.NOPGConfig().replace(**kw)


def test_config_dict_round_trip():
    c = nopg.NOPGConfig(gamma=0.95,
                        model=nopg.ModelConfig(top_k=16, state_bounds=[[-1, -math.inf], [1, 8]]),
                        sigma_decay=nopg.SigmaDecay(to=0.1, updates=100),
                        optimizer=nopg.CMAES(population=6), continuation=nopg.Continuation(3.0))
    assert c.model.state_bounds == [[-1.0, None], [1.0, 8.0]]    # infinities stored as None
    # A gymnasium Box's float32 arrays are taken as they are, stored as plain floats.
    box = nopg.NOPGConfig(model=nopg.ModelConfig(state_bounds=[np.array([-1, -8], np.float32),
                                                               np.array([1, np.inf], np.float32)]))
    assert box.model.state_bounds == [[-1.0, -8.0], [1.0, None]]
    assert all(type(b) is float for b in box.model.state_bounds[0])
    d = json.loads(json.dumps(c.to_dict()))
    assert d["optimizer"]["name"] == "cma-es"
    assert nopg.NOPGConfig.from_dict(d) == c
    assert nopg.NOPGConfig.from_dict(json.loads(json.dumps(box.to_dict()))) == box
    with pytest.raises(ValueError, match="unknown NOPGConfig field 'gama'; did you mean 'gamma'"):
        nopg.NOPGConfig.from_dict({**d, "gama": 0.9})
    with pytest.raises(ValueError, match="unknown setting behaviour.wieght"):
        nopg.NOPGConfig.from_dict({**d, "behaviour": {"wieght": 0.0}})


def test_config_settings_by_path():
    """A setting is reached by its path; whole sections first, then their fields, checked
    together; a path that names no setting is refused with the closest one."""
    c = nopg.NOPGConfig().replace(**{"optimizer": "cma-es", "optimizer.horizon": 50,
                                     "model.successors": "anchored", "model.top_k": 8,
                                     "continuation.factor": 2.0, "starts.data": 3})
    assert c.optimizer == nopg.CMAES(horizon=50)
    assert (c.model.successors, c.model.top_k, c.starts.data) == ("anchored", 8, 3)
    assert c.continuation == nopg.Continuation(factor=2.0)
    assert c.replace(continuation=None).continuation is None
    assert c.replace(**{"optimizer": "sgd"}).optimizer == nopg.GradientAscent("sgd")
    assert "model.top_k" in c.setting_names() and "optimizer.sigma" in c.setting_names()
    with pytest.raises(ValueError, match="did you mean 'model.top_k'"):
        c.replace(top_k=10)
    with pytest.raises(ValueError, match="'optimizer.learning_rate' of the 'cma-es' optimiser"):
        c.replace(**{"optimizer.learning_rate": 0.1})
    with pytest.raises(ValueError, match="optimizer.horizon"):      # anchored successors only
        c.replace(**{"model.successors": "kernel"})
    with pytest.raises(ValueError, match="continuation"):           # the factor is required
        nopg.NOPGConfig().replace(**{"continuation.stages": 3})
    with pytest.raises(ValueError, match="model.stochastic"):       # the policy's, not a setting
        nopg.NOPGConfig(model=nopg.ModelConfig(stochastic=True))


def test_the_data_set_keyword_is_data_everywhere(dataset, bandwidths, initial_states, det_policy):
    """The API names a data set ``data``; the former keyword ``dataset`` (deprecated in 0.1 and
    removed) is refused by every entry point."""
    algo = nopg.NOPG(det_policy, nopg.NOPGConfig(gamma=0.9))
    algo.fit(data=dataset, bandwidths=bandwidths, initial_states=initial_states, n_updates=1,
             progress=False)
    assert algo.update_ == 1
    for call in (lambda: algo.fit(dataset=dataset, bandwidths=bandwidths,
                                  initial_states=initial_states, n_updates=1),
                 lambda: nopg.select_bandwidths(dataset=dataset),
                 lambda: nopg.NonparametricBellman(dataset=dataset, bandwidths=bandwidths,
                                                   gamma=0.9)):
        with pytest.raises(TypeError, match="unexpected keyword argument .dataset.|"
                                             "missing 1 required positional argument: .data."):
            call()


# ---------------------------------------------------------------------------- drawn starts
def test_drawn_starts_are_the_kernel_density_of_the_initial_states(target_data, target_bw):
    """``start_draws=k``: k starts per initial state, ``z + scale * h_s * xi``, the same for a
    seed and different across seeds; ``J_hat`` is the mean over them (the model's ``t0`` is the
    mean of the starts' rows, so it is the mean of each start's own ``J_hat``)."""
    config = nopg.NOPGConfig(gamma=0.8, seed=3, model=nopg.ModelConfig(top_k=8),
                             starts=nopg.Starts(draws=400, draw_scale=1.5))
    algo = nopg.NOPG(small_det(), config).setup(target_data, target_bw, S0)
    starts = algo.starts_.reshape(3, 400, 1)
    np.testing.assert_array_equal(algo.initial_states_, S0)       # what the user gave is kept
    dev = starts - S0[:, None, :]
    assert abs(dev.mean()) < 0.1 * 1.5 * 0.3                      # 3 sigma of the mean of 1200
    np.testing.assert_allclose(dev.std(), 1.5 * 0.3, rtol=0.06)
    again = nopg.NOPG(small_det(), config).setup(target_data, target_bw, S0)
    np.testing.assert_array_equal(again.starts_, algo.starts_)
    other = nopg.NOPG(small_det(), nopg.NOPGConfig(**{**config.to_dict(), "seed": 4}))
    assert not np.array_equal(other.setup(target_data, target_bw, S0).starts_, algo.starts_)

    few = nopg.NOPG(small_det(), nopg.NOPGConfig(
        gamma=0.8, seed=3, model=nopg.ModelConfig(top_k=8, n_mc_next=None, solver="dense"),
        starts=nopg.Starts(draws=3)))
    few.setup(target_data, target_bw, S0)
    assert few.starts_.shape == (9, 1)
    with torch.no_grad():
        each = [few.model_.solution(few.policy, z[None]).J for z in few.starts_]
    assert few.J_hat() == pytest.approx(float(np.mean(each)), rel=1e-10)
    plain = nopg.NOPG(small_det(),
                      nopg.NOPGConfig(gamma=0.8,
                                      model=nopg.ModelConfig(top_k=8, solver="dense", n_mc_next=None)))
    assert plain.setup(target_data, target_bw, S0).J_hat() != pytest.approx(few.J_hat(), rel=1e-6)


def test_drawn_starts_survive_a_checkpoint(tmp_path, target_data, target_bw):
    config = nopg.NOPGConfig(gamma=0.8, seed=2, model=nopg.ModelConfig(top_k=8), starts=nopg.Starts(draws=4))
    algo = nopg.NOPG(small_det(), config)
    algo.fit(target_data, target_bw, S0, n_updates=2, progress=False)
    algo.save(tmp_path / "c")
    loaded = nopg.NOPG.load(tmp_path / "c")
    np.testing.assert_array_equal(loaded.initial_states_, S0)
    np.testing.assert_array_equal(loaded.starts_, algo.starts_)
    assert loaded.J_hat() == algo.J_hat()
