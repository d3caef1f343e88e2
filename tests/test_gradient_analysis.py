"""The gradient-analysis experiment: configuration, end-to-end run, CLI, back-end determinism."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from nopg.analysis.statistics import read_csv
from nopg.cli import main
from nopg.experiments.gradient_analysis import GradientAnalysisConfig, run_gradient_analysis

TINY = dict(n_seeds=3, sample_sizes=(100,), alphas=(0.0, 1.0), bandwidths=(0.3,), sample_size=100,
            n_boot=100, n_mc_policy=3)


def _estimates(run_dir) -> list[dict[str, str]]:
    with open(run_dir / "estimates.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def test_tiny_run_writes_every_output(tmp_path):
    summary = run_gradient_analysis(GradientAnalysisConfig(**TINY), out=tmp_path, progress=False,
                                    run_name="run", workers=1)
    run = tmp_path / "run"
    for name in ("config.json", "run.log", "estimates.csv", "summary.csv", "summary.json",
                 "samples.png", "alpha.png", "bandwidth.png"):
        assert (run / name).is_file() and (run / name).stat().st_size > 0, name
    # 1 + 2 + 1 points x 3 data sets; every estimator on samples/alpha, NOPG only on bandwidth
    assert summary["n_data_sets"] == 12
    rows = _estimates(run)
    assert len(rows) == 3 * 3 * 5 + 3 * 2
    assert {r["estimator"] for r in rows if r["sweep"] == "bandwidth"} == {"NOPG-D", "NOPG-S"}
    truth = {r["estimator"]: (float(r["truth0"]), float(r["truth1"])) for r in rows}
    assert truth["NOPG-D"] == truth["DPG+Q"] != truth["NOPG-S"] == truth["G(PO)MDP+N"]
    table = read_csv(run / "summary.csv")
    assert len(table) == 5 + 2 * 5 + 2
    for row in table:
        assert row["mse"] == pytest.approx(row["bias2"] + row["variance"], rel=1e-9)
    saved = json.loads((run / "summary.json").read_text())
    assert "samples=100" in saved["headline"]
    assert "mse_ratio G(PO)MDP+BN / NOPG-S" in saved["headline"]["samples=100"]


def test_the_same_seed_gives_the_same_data_sets_serially_and_in_processes(tmp_path):
    config = GradientAnalysisConfig(**{**TINY, "sweeps": ("alpha",), "alphas": (0.5,)})
    run_gradient_analysis(config, out=tmp_path, progress=False, run_name="serial", workers=1)
    run_gradient_analysis(config, out=tmp_path, progress=False, run_name="pool", workers=2)
    serial, pool = _estimates(tmp_path / "serial"), _estimates(tmp_path / "pool")
    key = ("estimator", "replicate", "data_seed", "g0", "g1")
    assert [tuple(r[k] for k in key) for r in serial] == [tuple(r[k] for k in key) for r in pool]
    assert len({r["data_seed"] for r in serial}) == 3          # independent data sets


def test_another_linear_gaussian_system(tmp_path):
    system = {"A": [[0.9]], "B": [[1.0]], "Q": [[1.0]], "R": [[0.1]], "s0": [1.0]}
    config = GradientAnalysisConfig(**{**TINY, "sweeps": ("samples",), "sample_sizes": (40,),
                                       "sample_size": 40}, system=system, theta=(-0.4,),
                                    behaviour_theta=(-0.2,), horizon=20, gamma=0.8)
    summary = run_gradient_analysis(config, out=tmp_path, progress=False, run_name="1d", workers=1)
    assert len(summary["truth"]["NOPG-D"]) == 1
    rows = _estimates(tmp_path / "1d")
    assert all(np.isfinite(float(r["g0"])) for r in rows)


def test_configuration_errors_name_the_problem():
    with pytest.raises(ValueError, match="multiples of the horizon"):
        GradientAnalysisConfig(sample_sizes=(120,))
    with pytest.raises(ValueError, match="unknown: \\['PPO'\\]"):
        GradientAnalysisConfig(estimators=("NOPG-D", "PPO"))
    with pytest.raises(ValueError, match="alpha values"):
        GradientAnalysisConfig(alphas=(1.5,))
    with pytest.raises(ValueError, match="bandwidth sweep needs NOPG"):
        GradientAnalysisConfig(estimators=("DPG+Q",))
    with pytest.raises(ValueError, match="spectral radius"):
        GradientAnalysisConfig(theta=(0.5, 0.5))
    with pytest.raises(ValueError, match="gradient-analysis setting 'n_seed'; did you mean 'n_seeds'"):
        GradientAnalysisConfig().replace(n_seed=5)
    full = GradientAnalysisConfig.paper_size()
    assert full.n_seeds == 1000 and max(full.sample_sizes) == 5000


def test_cli_runs_the_analysis_and_refuses_training_flags(tmp_path, capsys):
    args = ["reproduce", "gradient-analysis", "--out", str(tmp_path), "--name", "cli", "--workers", "1",
            "--no-progress", "--set", "sweeps=[\"bandwidth\"]", "--set", "n_seeds=2",
            "--set", "sample_size=50", "--set", "bandwidths=[0.5]", "--set", "n_boot=50",
            "--set", "estimators=[\"NOPG-D\"]"]
    assert main(args) == 0
    assert (tmp_path / "cli" / "bandwidth.png").is_file()
    assert "gradient-analysis: 2 data sets" in capsys.readouterr().out
    assert main(["reproduce", "gradient-analysis", "--lr", "0.1"]) == 2
    assert "does not take --lr" in capsys.readouterr().err
    assert main(["reproduce", "pendulum-grid", "--ray-address", "auto"]) == 2
    assert "gradient-analysis only" in capsys.readouterr().err
    assert main(["list"]) == 0
    listed = capsys.readouterr().out
    assert "gradient-analysis" in listed and "trust-region" in listed


def test_the_model_settings_are_nested_and_keep_their_former_names():
    """``model`` holds NOPG's model settings; ``n_mc_policy``/``top_k`` (as in config files written
    before) and ``model.<name>`` keys (``--set``) reach it."""
    from nopg import ModelConfig
    from nopg.model.bellman import keyword_config

    config = GradientAnalysisConfig(**TINY)
    assert config.model == keyword_config(n_mc_policy=3)
    assert config.n_mc_policy == 3 and config.top_k is None
    assert config.replace(**{"model.top_k": 10}).model.top_k == 10
    assert config.replace(top_k=10) == config.replace(model={"top_k": 10})
    assert config.replace(model={"top_k": 10}).model.n_mc_policy == 3    # changes to this model
    saved = json.loads(json.dumps(config.to_dict()))
    assert GradientAnalysisConfig(**saved) == config
    assert saved["model"]["n_mc_policy"] == 3 and "n_mc_policy" not in saved
    assert GradientAnalysisConfig(model=ModelConfig(n_mc_policy=3)).model.top_k == "auto"
    with pytest.raises(ValueError, match="'model.topk'; did you mean 'model.top_k'"):
        config.replace(**{"model.topk": 5})
    with pytest.raises(ValueError, match="n_mc_policy"):
        GradientAnalysisConfig(n_mc_policy=0)
