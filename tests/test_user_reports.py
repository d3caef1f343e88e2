"""Defects a new user reported: progress output, solver warnings, checkpoints across devices,
data validation messages, save errors, ``nopg tune-k`` and figure labels."""

from __future__ import annotations

import io
import json
import logging
import sys
import time
import warnings

import numpy as np
import pytest
import torch

import nopg
from nopg.cli import main

# ---------------------------------------------------------------------------- shared helpers
S0 = np.array([[-0.5], [0.0], [0.5]])


def target_data(n: int = 60, seed: int = 0) -> nopg.TransitionDataset:
    """1-D problem whose reward depends on the action only: r = -(a - 0.5)^2."""
    rng = np.random.default_rng(seed)
    s = rng.uniform(-1, 1, size=(n, 1))
    a = rng.uniform(-1, 1, size=(n, 1))
    s1 = rng.uniform(-1, 1, size=(n, 1))
    term = np.zeros(n, dtype=bool)
    term[[10, 40]] = True
    return nopg.TransitionDataset(s, a, -(a[:, 0] - 0.5) ** 2, s1, term)


BW = nopg.Bandwidths(state=0.3, action=0.25)


def small_det(seed: int = 0) -> nopg.DeterministicMLPPolicy:
    torch.manual_seed(seed)
    return nopg.DeterministicMLPPolicy(1, 1, action_max=1.0, hidden=(8,), activation="tanh")


class _Stream(io.StringIO):
    """A text stream that claims (or not) to be a terminal."""

    def __init__(self, tty: bool) -> None:
        super().__init__()
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


def _fit_with_console_log(monkeypatch: pytest.MonkeyPatch, tty: bool, n_updates: int = 50) -> str:
    """Fit with progress=True while stderr (and a console log handler) is ``_Stream(tty)``."""
    stream = _Stream(tty)
    monkeypatch.setattr(sys, "stderr", stream)
    handler = logging.StreamHandler(stream)        # as logging.basicConfig would attach
    handler.setFormatter(logging.Formatter("LOG %(message)s"))
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        def slow(algo: nopg.NOPG, metrics: dict) -> None:
            time.sleep(0.02)                       # several tqdm refresh intervals per run

        algo = nopg.NOPG(small_det(), nopg.NOPGConfig(optimizer=nopg.GradientAscent(learning_rate=1e-2)))
        algo.fit(target_data(), BW, S0, n_updates=n_updates, progress=True,
                 callbacks=[slow, nopg.EvalCallback(lambda p: 1.0, every=10)])
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
    return stream.getvalue()


# ---------------------------------------------------------------------------- 1. progress bar
def test_fit_progress_writes_no_redraws_to_a_non_terminal(monkeypatch):
    out = _fit_with_console_log(monkeypatch, tty=False)
    assert "\r" not in out                                   # no bar redraws
    lines = out.splitlines()
    assert len(lines) <= 8 and len(out) < 2000
    assert sum("eval return" in line for line in lines) == 5   # the log records still appear
    assert all(line.startswith("LOG ") for line in lines)


def test_fit_progress_keeps_log_lines_out_of_the_bar_on_a_terminal(monkeypatch):
    out = _fit_with_console_log(monkeypatch, tty=True)
    assert "NOPG" in out                                     # the bar is shown on a terminal
    eval_lines = [line for line in out.split("\n") if "eval return" in line]
    assert len(eval_lines) == 5
    # tqdm.write clears the bar first: after the last carriage return the line is the log record.
    for line in eval_lines:
        assert line.split("\r")[-1].startswith("LOG update")


# ---------------------------------------------------------------------------- 2. solver warning
def _system(n: int = 60, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    R = torch.randn(n, n, generator=gen, dtype=torch.float64)
    R.fill_diagonal_(0.0)
    A = R + torch.diag(R.abs().sum(1) * 1.05 + 0.1)
    return A, torch.randn(n, generator=gen, dtype=torch.float64)


def test_bicgstab_rounding_drift_above_tol_does_not_warn():
    """The recurrence reaches tol, but the true residual is ~30 tol (as a matvec with rounding
    noise, e.g. GPU atomics, gives): converged for any practical purpose, so no warning."""
    A, b = _system()
    gen = torch.Generator().manual_seed(1)
    noise = 3e-9 * float(torch.linalg.vector_norm(b)) / 60 ** 0.5

    def noisy(v: torch.Tensor) -> torch.Tensor:
        return A @ v + noise * torch.randn(60, generator=gen, dtype=torch.float64)

    with warnings.catch_warnings():
        warnings.simplefilter("error", nopg.SolverWarning)
        x, info = nopg.bicgstab(noisy, b, tol=1e-10)
    assert 1e-9 < info.residual < 1e-7 and info.converged
    # The iteration cap stopping at a few 1e-8 (tol 1e-10) is accepted the same way.
    with warnings.catch_warnings():
        warnings.simplefilter("error", nopg.SolverWarning)
        _, capped = nopg.bicgstab(lambda v: A @ v, b, tol=1e-10, max_iter=5)
    assert 1e-9 < capped.residual < 1e-7 and capped.converged


def test_bicgstab_genuine_failure_still_warns():
    A, b = _system(seed=2)
    with pytest.warns(nopg.SolverWarning, match=r"max_iter.*1000 x tol") as record:
        _, info = nopg.bicgstab(lambda v: A @ v, b, tol=1e-10, max_iter=1)
    assert not info.converged and info.residual > 1e-3
    assert "hit max_iter = 1" in str(record[0].message)


def test_model_with_solver_max_iter_1_still_warns():
    data = target_data(n=300)
    model = nopg.NonparametricBellman(data, nopg.Bandwidths(state=0.05, action=0.05), 0.99,
                                      solver="bicgstab", solver_max_iter=1, preconditioner="none")
    with pytest.warns(nopg.SolverWarning):
        sol = model.solution(small_det().double(), S0)
    assert not sol.info_q.converged


# ---------------------------------------------------------------------------- 3. checkpoints
def _checkpoint(tmp_path):
    algo = nopg.NOPG(small_det(), nopg.NOPGConfig(optimizer=nopg.GradientAscent(learning_rate=1e-2)))
    algo.fit(target_data(), BW, S0, n_updates=3, progress=False)
    return algo, algo.save(tmp_path / "ckpt")


def _as_if_saved_on_cuda(path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rewrite a checkpoint as a GPU machine writes it: config device "cuda" and tensor files
    whose storages are tagged "cuda:0" (torch refuses them on a CPU machine without map_location)."""
    import torch.serialization
    config = json.loads((path / "config.json").read_text())
    config["model"]["device"] = "cuda"
    (path / "config.json").write_text(json.dumps(config))
    for name in ("policy.pt", "optimizer.pt", "state.pt"):
        obj = torch.load(path / name, map_location="cpu", weights_only=True)
        with monkeypatch.context() as m:
            m.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
            torch.save(obj, path / name)


def test_load_cuda_checkpoint_on_cpu_with_device(tmp_path, monkeypatch):
    algo, path = _checkpoint(tmp_path)
    _as_if_saved_on_cuda(path, monkeypatch)
    if not torch.cuda.is_available():           # the files really are CUDA files
        with pytest.raises(RuntimeError, match="CUDA"):
            torch.load(path / "policy.pt", weights_only=True)
    loaded = nopg.NOPG.load(path, device="cpu")
    assert loaded.config.model.device == "cpu" and loaded.device == torch.device("cpu")
    assert all(p.device.type == "cpu" for p in loaded.policy.parameters())
    assert loaded.update_ == 3 and loaded.J_hat() == pytest.approx(algo.J_hat(), rel=1e-12)
    loaded.fit(target_data(), BW, S0, n_updates=1, progress=False)   # it resumes
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device='cpu'"):
            nopg.NOPG.load(path)


@pytest.mark.parametrize("version", [999, 0, "1"])
def test_load_refuses_unknown_format_version(tmp_path, version):
    _, path = _checkpoint(tmp_path)
    meta = json.loads((path / "meta.json").read_text())
    meta["format_version"] = version
    (path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=f"format_version {version!r}"):
        nopg.NOPG.load(path)


# ---------------------------------------------------------------------------- 4. data validation
@pytest.mark.parametrize("name", ["states", "rewards", "next_states", "actions"])
def test_non_finite_values_name_the_first_row_and_the_count(name):
    arrays = {"states": np.zeros((30, 2)), "actions": np.zeros((30, 1)), "rewards": np.zeros(30),
              "next_states": np.zeros((30, 2)), "terminals": np.zeros(30, dtype=bool)}
    bad = arrays[name]
    bad[17] = np.nan                              # a whole row: 2 values in a 2-D array
    bad[25] = np.inf
    count = 2 * bad[0].size
    with pytest.raises(ValueError, match=rf"^{name} contains NaN or inf values: {count} non-finite "
                                         rf"values?; first at row 17$"):
        nopg.TransitionDataset(**arrays)


# ---------------------------------------------------------------------------- 5. save errors
def test_existing_output_hint_names_both_the_argument_and_the_flag(tmp_path):
    from nopg.data.formats import save_dataset
    data = target_data()
    save_dataset(data, tmp_path / "d.npz")
    with pytest.raises(ValueError, match=r"overwrite=True, or --overwrite on the command line"):
        save_dataset(data, tmp_path / "d.npz")


@pytest.mark.parametrize("suffix", ["hdf5", "npz"])
def test_convert_into_missing_folder_is_one_line_exit_2(tmp_path, capsys, suffix):
    src = tmp_path / "in.npz"
    target_data().save(src)
    missing = tmp_path / "nodir"
    assert main(["data", "convert", str(src), str(missing / f"x.{suffix}")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert err.startswith("nopg: error:") and str(missing) in err and "does not exist" in err


def test_save_functions_name_the_missing_folder(tmp_path):
    from nopg.data.formats import save_hdf5
    data = target_data()
    for save in (data.save, lambda p: save_hdf5(data, p)):
        with pytest.raises(ValueError, match="folder .*nodir.* does not exist"):
            save(tmp_path / "nodir" / "x.bin")


# ---------------------------------------------------------------------------- 6. tune-k
def _k_row(k: int, j_err: float, cos: float, ratio: float = 1.0) -> dict[str, float]:
    return {"k": k, "mass_min": 0.5, "mass_p5": 0.5, "mass_mean": 0.5, "J_rel_err": j_err,
            "grad_cos": cos, "grad_norm": ratio * 2.0, "grad_norm_ratio": ratio}


def test_tune_recommends_the_smallest_k_meeting_the_thresholds():
    from nopg.train.tuning import NeighborReport
    rows = [_k_row(5, 0.2, 0.5), _k_row(10, 0.005, 0.995, ratio=1e-9),   # tiny gradient: no
            _k_row(20, 0.005, 0.995), _k_row(40, 0.001, 0.9999)]
    report = NeighborReport(n=100, reference="the dense P (every entry)", k_rows=rows,
                            reference_grad_norm=2.0)
    assert report.recommended_k == 20
    assert report.to_dict()["recommended_k"] == 20
    text = report.to_text()
    assert "recommended k = 20" in text and "grad cos" in text and "|grad|" in text
    none = NeighborReport(n=100, reference="the dense P (every entry)", k_rows=rows[:2],
                          reference_grad_norm=2.0)
    assert none.recommended_k is None and "no k" in none.to_text()


def test_tune_reports_gradient_norms_and_recommends(tmp_path):
    from nopg.train.tuning import neighbor_report
    data = target_data(n=120)
    policy = small_det()
    rep = neighbor_report(data, BW, policy, S0, gamma=0.95, top_k_values=(3, 10, 120),
                          n_candidates_values=(16,), top_k=5, mass_rows=50)
    assert rep.reference_grad_norm > 0
    assert all(r["grad_norm"] > 0 and r["grad_norm_ratio"] > 0 for r in rep.k_rows)
    assert rep.k_rows[-1]["grad_norm_ratio"] == pytest.approx(1.0)
    assert rep.recommended_k is not None and rep.recommended_k <= 120
    json.dumps(rep.to_dict())                     # JSON-friendly


def test_tune_k_uses_the_checkpoint_bandwidths(tmp_path, capsys, monkeypatch):
    import nopg.train.tuning
    data = target_data(n=120)
    data.save(tmp_path / "d.npz")
    ckpt_bw = nopg.Bandwidths(state=0.41, action=0.37)
    algo = nopg.NOPG(small_det(), nopg.NOPGConfig(gamma=0.9))
    algo.fit(data, ckpt_bw, S0, n_updates=2, progress=False)
    algo.save(tmp_path / "ckpt")
    seen = {}
    real = nopg.train.tuning.neighbor_report

    def spy(dataset, bandwidths, policy, s0, **kw):
        seen["bw"], seen["gamma"] = bandwidths.to_dict(), kw["gamma"]
        return real(dataset, bandwidths, policy, s0, **kw)

    monkeypatch.setattr(nopg.train.tuning, "neighbor_report", spy)
    assert main(["tune-k", str(tmp_path / "d.npz"), "--checkpoint", str(tmp_path / "ckpt"),
                 "--k", "3", "6", "--candidates", "8", "--top-k", "5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    expected = algo.model_.bandwidths.to_dict()
    assert seen["bw"] == expected and out["bandwidths"] == expected
    assert seen["gamma"] == 0.9 and out["gamma"] == 0.9
    assert "recommended_k" in out and out["thresholds"]["grad_cos_min"] > 0


def test_tune_k_text_describes_the_columns(tmp_path, capsys):
    target_data(n=120).save(tmp_path / "d.npz")
    assert main(["tune-k", str(tmp_path / "d.npz"), "--k", "3", "6", "--candidates", "8",
                 "--top-k", "5"]) == 0
    out = capsys.readouterr().out
    for words in ("mass", "J rel err", "grad cos", "|grad|", "recommended", "certified"):
        assert words in out
    assert "bandwidths" in out


# ---------------------------------------------------------------------------- 7. figures
def _log(with_eval: bool = True, with_gap: bool = False) -> dict:
    updates = list(range(20))
    log = {"update": updates, "J_hat": [-100.0 + 4 * u for u in updates]}
    if with_eval:
        log["eval_return"] = [(-3000.0 + 100 * u) if u % 5 == 0 else None for u in updates]
    if with_gap:
        log["support_gap"] = [0.5 - 0.01 * u for u in updates]
    return log


@pytest.mark.parametrize("with_gap", [False, True])
def test_learning_curve_stacks_panels_with_separate_labelled_axes(with_gap):
    from nopg.viz.plots import learning_curve_figure
    fig = learning_curve_figure(_log(with_gap=with_gap))
    axes = fig.axes
    assert len(axes) == (3 if with_gap else 2)           # no twin axis
    top, ev = axes[0], axes[1]
    assert "J" in top.get_ylabel()
    assert ev.get_ylabel() == "evaluation return (undiscounted)"
    assert top.get_shared_x_axes().joined(top, ev)
    assert axes[-1].get_xlabel() == "update"
    assert top.get_position().y0 > ev.get_position().y0   # stacked, J_hat on top
    custom = learning_curve_figure(_log(), eval_label="return over 200 steps (undiscounted)")
    assert custom.axes[1].get_ylabel() == "return over 200 steps (undiscounted)"
    assert len(learning_curve_figure(_log(with_eval=False)).axes) == 1


def test_learning_curve_file_is_still_written(tmp_path):
    from nopg.viz.plots import plot_learning_curve
    out = plot_learning_curve(_log(), tmp_path / "lc.png", eval_label="x")
    assert out.is_file() and out.stat().st_size > 1000


def test_phase_portrait_marks_the_trajectory_start():
    from nopg.viz.pendulum_plots import phase_portraits_figure
    t = np.linspace(0.5, 4 * np.pi, 50)
    trajectory = np.stack([np.cos(t), np.sin(t), np.full_like(t, 2.0)], axis=1)
    fig = phase_portraits_figure(lambda o: o[:, 0], lambda o: o[:, 1] ** 2, resolution=6,
                                 trajectory=trajectory)
    for ax in fig.axes[:2]:
        labels = [text.get_text() for text in ax.get_legend().get_texts()]
        assert "trajectory" in labels and "start" in labels
        start = [line for line in ax.get_lines() if line.get_label() == "start"][0]
        assert start.get_xdata()[0] == pytest.approx(0.5) and start.get_ydata()[0] == 2.0


def test_trust_region_figure_calls_the_angle_theta():
    from nopg.viz.pendulum_plots import trust_region_figure
    rng = np.random.default_rng(0)
    th = rng.uniform(-np.pi, np.pi, 20)
    states = np.stack([np.cos(th), np.sin(th), rng.uniform(-2, 2, 20)], axis=1)
    fig = trust_region_figure(states, rng.uniform(-1, 1, 20), np.arange(5.0), np.arange(5.0),
                              np.arange(5.0), np.linspace(-np.pi, np.pi, 4), np.linspace(-2, 2, 3),
                              rng.uniform(0.1, 1, (3, 2)))
    text = " ".join(ax.get_xlabel() + ax.get_ylabel() for ax in fig.axes)
    assert r"\omega" not in text
    assert r"$\theta$" in fig.axes[0].get_xlabel() and r"\dot\theta" in fig.axes[0].get_ylabel()
