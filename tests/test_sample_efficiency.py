"""The sample-efficiency sweep: rows, identical data, CSV, bootstrap summary, parallel runs, CLI."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from nopg.analysis.parallel import parallel_map
from nopg.baselines.d3rlpy_bridge import dataset_sha256, isolated_python
from nopg.cli import main
from nopg.experiments import get_task
from nopg.experiments.sample_efficiency import SampleEfficiencyConfig
from nopg.experiments.sample_efficiency_jobs import run_job
from nopg.experiments.sample_efficiency_report import (
    check_identical_data,
    format_table,
    merge_rows,
    read_rows,
    summarize,
    write_rows,
)
from nopg.experiments.sample_efficiency_sweep import plan


def _has_d3rlpy() -> bool:
    try:
        isolated_python()
        return True
    except ValueError:
        if os.environ.get("NOPG_REQUIRE_D3RLPY") == "1":
            raise
        return False


TINY = {"settings": {"task.eval_steps": 40}, "seeds": (0,), "offline_steps": 3,
        "pwis_updates": 2, "nopg_updates": 2}


def test_cli_sweep_writes_rows_on_identical_data(tmp_path, capsys):
    algorithms = ["NOPG-D", "PWIS", "TD3"] + (["BC"] if _has_d3rlpy() else [])
    argv = ["reproduce", "sample-efficiency", "--task", "pendulum-random", "--out", str(tmp_path),
            "--name", "run", "--workers", "1", "--no-progress",
            "--set", f"algorithms={algorithms}".replace("'", '"'),
            "--set", "sizes=[60, 120]", "--set", "online_budgets=[130, 140]",
            "--set", "seeds=[0]", "--set", "offline_steps=3", "--set", "pwis_updates=2",
            "--set", "nopg_updates=2", "--set", 'settings={"task.eval_steps": 40}']
    assert main(argv) == 0
    assert "results in" in capsys.readouterr().out
    run = tmp_path / "run"
    for name in ("runs.csv", "summary.csv", "table.md", "sample_efficiency.png", "config.json",
                 "summary.json", "run.log"):
        assert (run / name).is_file(), name
    rows = read_rows(run / "runs.csv")
    offline = [r for r in rows if r["kind"] == "offline"]
    assert len(offline) == (len(algorithms) - 1) * 2
    task = get_task("pendulum-random")
    config = task.default_config()
    for size in (60, 120):
        data = task.make_dataset(config.replace(**{"task.n_samples": size}), 0)
        assert {r["data_sha256"] for r in offline if r["size"] == size} == {dataset_sha256(data)}
    online = [r for r in rows if r["kind"] == "online"]
    assert sorted((r["seed"], r["env_steps"]) for r in online) == [(0, 130), (0, 140)]
    assert all(r["data_sha256"] is None and r["size_unit"] == "env steps" for r in online)
    assert all(math.isfinite(r["return"]) and r["return"] < 0 for r in rows)
    assert all(r["J_hat"] is not None for r in rows if r["algorithm"] in ("NOPG-D", "PWIS"))


def test_rows_csv_round_trip(tmp_path):
    rows = [{"task": "t", "algorithm": "TD3+BC", "kind": "offline", "size": 10,
             "size_unit": "transitions", "n_transitions": 10, "seed": 3, "return": -1 / 3,
             "J_hat": None, "wall_time_s": 1e-7, "train_steps": 5, "env_steps": None,
             "data_sha256": "1234e5", "error": None}]
    assert read_rows(write_rows(rows, tmp_path / "r.csv")) == rows
    with pytest.raises(ValueError, match="unknown row fields"):
        write_rows([{**rows[0], "extra": 1}], tmp_path / "x.csv")
    with pytest.raises(ValueError, match="does not exist"):
        read_rows(tmp_path / "missing.csv")


def _rows(values, algorithm="A", size=10):
    return [{"task": "t", "algorithm": algorithm, "kind": "offline", "size": size,
             "size_unit": "transitions", "seed": i, "return": v, "J_hat": None,
             "wall_time_s": 1.0} for i, v in enumerate(values)]


def test_bootstrap_summary_against_closed_forms():
    # Two seeds a < b: the bootstrap means are a, (a+b)/2, b with probabilities 1/4, 1/2, 1/4,
    # so the 2.5% and 97.5% percentiles are a and b exactly.
    (two,) = summarize(_rows([-10.0, 4.0]))
    assert two["mean"] == -3.0 and (two["ci_lo"], two["ci_hi"]) == (-10.0, 4.0)
    assert two["n"] == 2 and two["std"] == 7.0
    (same,) = summarize(_rows([2.5, 2.5, 2.5]))
    assert (same["ci_lo"], same["ci_hi"]) == (2.5, 2.5)
    # Many seeds: the percentile interval approaches mean +- 1.96 s / sqrt(n).
    values = np.random.default_rng(0).normal(size=400)
    (many,) = summarize(_rows(values.tolist()))
    half = 1.959964 * values.std() / math.sqrt(values.size)
    assert many["ci_lo"] == pytest.approx(values.mean() - half, abs=0.1 * half)
    assert many["ci_hi"] == pytest.approx(values.mean() + half, abs=0.1 * half)
    (dropped,) = summarize(_rows([1.0, math.nan, 3.0]))
    assert dropped["n"] == 2 and dropped["mean"] == 2.0


def test_serial_process_and_local_ray_runs_give_the_same_rows(tmp_path):
    cfg = SampleEfficiencyConfig(task="cartpole-random", algorithms=("NOPG-D", "PWIS"),
                                 sizes=(40,), seeds=(0, 1),
                                 # worker processes do not see conftest's patch of auto's limits
                                 settings={"task.eval_steps": 30, "recipes": ("given",)},
                                 pwis_updates=2, nopg_updates=2)
    jobs, skipped = plan(cfg, tmp_path)
    assert len(jobs) == 4 and skipped == []

    def strip(results):
        return [{k: v for k, v in r.items() if k != "wall_time_s"} for rs in results for r in rs]

    serial = strip(parallel_map(run_job, jobs, workers=1, progress=False))
    processes = strip(parallel_map(run_job, jobs, workers=2, progress=False))
    assert serial == processes
    check_identical_data(serial)
    pytest.importorskip("ray")
    on_ray = strip(parallel_map(run_job, jobs, workers=2, ray_address="local", progress=False))
    assert on_ray == serial


def test_a_failing_run_is_a_row_with_its_error(tmp_path, monkeypatch):
    from nopg.experiments import sample_efficiency_jobs

    def broken(*args):
        raise FloatingPointError("diverged")

    monkeypatch.setattr(sample_efficiency_jobs, "_pwis_run", broken)
    cfg = SampleEfficiencyConfig(task="cartpole-random", algorithms=("PWIS",), sizes=(40,))
    (row,) = run_job(plan(cfg, tmp_path)[0][0])
    assert row["return"] is None and row["error"] == "FloatingPointError: diverged"
    (summary,) = summarize([row, {**row, "seed": 1, "return": -5.0, "wall_time_s": 2.0,
                                  "error": None}])
    assert summary["n"] == 1 and summary["mean"] == -5.0 and summary["wall_time_mean_s"] == 2.0


def test_table_has_a_line_per_algorithm_and_a_column_per_size():
    rows = _rows([-1.0, -3.0]) + _rows([-2.0], algorithm="B", size=20) + \
        [{**r, "algorithm": "C", "kind": "online", "size_unit": "env steps"} for r in _rows([-4.0])]
    offline, online = format_table(summarize(rows)).split("\n\n")
    assert offline.splitlines()[0] == "| offline (transitions) | 10 | 20 | time per run |"
    assert offline.splitlines()[2] == "| A | -2.0 [-3.0, -1.0] |  | 1.0 s-1.0 s |"
    assert offline.splitlines()[3] == "| B |  | -2.0 [-2.0, -2.0] | 1.0 s-1.0 s |"
    assert online.splitlines()[2] == "| C | -4.0 [-4.0, -4.0] | 1.0 s-1.0 s |"


def test_identical_data_check_catches_a_mismatch():
    rows = [{"kind": "offline", "size": 1, "seed": 0, "algorithm": a, "data_sha256": h}
            for a, h in (("NOPG-D", "aa"), ("BC", "bb"))]
    with pytest.raises(RuntimeError, match="BC trained on other transitions than NOPG-D"):
        check_identical_data(rows)


def test_bad_settings_are_refused_clearly(tmp_path):
    with pytest.raises(ValueError, match="'task' parameter must be one of"):
        SampleEfficiencyConfig(task="hopper")
    with pytest.raises(ValueError, match="'algorithms' parameter"):
        SampleEfficiencyConfig(algorithms=("NOPG-D", "BRAC"))
    with pytest.raises(ValueError, match="'sizes' parameter"):
        SampleEfficiencyConfig(sizes=(0,))
    with pytest.raises(ValueError, match="unknown sample-efficiency setting 'size'"):
        SampleEfficiencyConfig().replace(size=[3])
    with pytest.raises(ValueError, match="pendulum-grid sizes are 2 k"):
        plan(SampleEfficiencyConfig(task="pendulum-grid", sizes=(201,), algorithms=("NOPG-D",)),
             tmp_path)
    with pytest.raises(ValueError, match="multiples of the 200-step episodes"):
        plan(SampleEfficiencyConfig(task="pendulum-uniform", sizes=(300,), algorithms=("NOPG-D",)),
             tmp_path)
    jobs, skipped = plan(SampleEfficiencyConfig(task="mountaincar-human",
                                                algorithms=("NOPG-D", "PWIS", "SAC")), tmp_path)
    assert {j["algorithm"] for j in jobs} == {"NOPG-D"}
    assert any(s.startswith("PWIS") for s in skipped) and any(s.startswith("SAC") for s in skipped)
    assert main(["reproduce", "pendulum-grid", "--task", "x"]) == 2
    paper = SampleEfficiencyConfig.paper_size("cartpole-random")
    assert len(paper.seeds) == 10 and paper.data_sizes()[-1] == 10_000


def _full_rows(algorithm, returns, sha="aa", task="pendulum-random", kind="offline"):
    return [{"task": task, "algorithm": algorithm, "kind": kind, "size": 10,
             "size_unit": "transitions" if kind == "offline" else "env steps", "n_transitions": 10,
             "seed": seed, "return": value, "J_hat": None, "wall_time_s": 1.0, "train_steps": 5,
             "env_steps": None, "data_sha256": sha if kind == "offline" else None, "error": None}
            for seed, value in enumerate(returns)]


def test_merge_replaces_a_rerun_and_keeps_the_other_algorithms():
    old = _full_rows("NOPG-D", [-900.0, -800.0]) + _full_rows("BC", [-4000.0, -4100.0])
    new = _full_rows("NOPG-D", [-400.0, -390.0])
    merged = merge_rows([old, new])
    assert sorted((r["algorithm"], r["seed"], r["return"]) for r in merged) == [
        ("BC", 0, -4000.0), ("BC", 1, -4100.0), ("NOPG-D", 0, -400.0), ("NOPG-D", 1, -390.0)]
    assert {r["return"] for r in merge_rows([new, old]) if r["algorithm"] == "NOPG-D"} == \
        {-900.0, -800.0}                                   # the later file wins


@pytest.mark.parametrize("runs, match", [
    ([[]], "nothing to merge"),
    ([_full_rows("BC", [-1.0], task="cartpole-random"), _full_rows("NOPG-D", [-2.0])],
     "several tasks"),
    ([_full_rows("BC", [-1.0], sha="aa"), _full_rows("NOPG-D", [-2.0], sha="bb")],
     "did not train on the same data"),
])
def test_merge_refuses_runs_that_do_not_compare(runs, match):
    with pytest.raises(ValueError, match=match):
        merge_rows(runs)


def test_cli_sweep_report_merges_and_plots(tmp_path, capsys):
    first = write_rows(_full_rows("NOPG-D", [-900.0, -800.0]) + _full_rows("BC", [-4000.0, -4100.0])
                       + _full_rows("TD3", [-2000.0, -2200.0], kind="online"), tmp_path / "a.csv")
    second = write_rows(_full_rows("NOPG-D", [-400.0, -390.0]), tmp_path / "b.csv")
    out = tmp_path / "report"
    assert main(["sweep-report", str(first), str(second), "--out", str(out)]) == 0
    assert "6 runs of pendulum-random from 2 file(s)" in capsys.readouterr().out
    for name in ("runs.csv", "summary.csv", "table.md", "sample_efficiency.png"):
        assert (out / name).is_file(), name
    by_algorithm = {r["algorithm"]: r for r in summarize(read_rows(out / "runs.csv"))}
    assert by_algorithm["NOPG-D"]["mean"] == -395.0 and by_algorithm["BC"]["mean"] == -4050.0
    assert by_algorithm["TD3"]["kind"] == "online"
    assert main(["sweep-report", str(second), "--out", str(out)]) == 2      # nothing overwritten
    assert "already holds a report" in capsys.readouterr().err
    assert len(read_rows(out / "runs.csv")) == 6
    assert main(["sweep-report", str(second), "--out", str(out), "--overwrite"]) == 0
    assert len(read_rows(out / "runs.csv")) == 2
    assert main(["sweep-report", str(tmp_path / "none.csv"), "--out", str(tmp_path / "x")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["sweep-report", str(second), "--out", str(tmp_path / "c"), "--confidence",
                 "1.5"]) == 2
    assert "'confidence' must lie in the open interval" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()                               # refused before writing


def test_every_algorithm_of_the_sweep_gets_its_own_colour_in_every_figure():
    from nopg.experiments.sample_efficiency import ALGORITHMS
    from nopg.experiments.sample_efficiency_report import algorithm_colors

    colors = algorithm_colors(ALGORITHMS)
    assert len(set(colors.values())) == len(ALGORITHMS)
    # the same algorithm keeps its colour whatever else is plotted beside it
    assert algorithm_colors(["SAC", "NOPG-S"]) == {"SAC": colors["SAC"], "NOPG-S": colors["NOPG-S"]}
    extra = algorithm_colors([*ALGORITHMS, "BRAC"])
    assert extra["BRAC"] not in colors.values()


def test_title_counts_seeds_per_point():
    from nopg.experiments.sample_efficiency_report import seeds_phrase

    assert seeds_phrase([{"n": 3}, {"n": 3}]) == "3 seeds"
    assert seeds_phrase([{"n": 1}]) == "1 seed"
    assert seeds_phrase([{"n": 3}, {"n": 10}, {"n": 5}]) == "3-10 seeds per point"


def test_reduced_sizes_leave_out_the_runs_that_break_the_budget_and_full_keeps_them():
    for task, dropped in (("cartpole-random", 2500), ("mountaincar-human", 10)):
        assert dropped not in SampleEfficiencyConfig(task=task).data_sizes()
        assert dropped in SampleEfficiencyConfig.paper_size(task).data_sizes()


def test_cli_sweep_device_and_dtype_set_the_nopg_runs(tmp_path, capsys):
    import json

    argv = ["reproduce", "sample-efficiency", "--task", "pendulum-random", "--out", str(tmp_path),
            "--name", "run", "--workers", "1", "--no-progress", "--device", "cpu",
            "--dtype", "float32", "--set", 'algorithms=["NOPG-D"]', "--set", "sizes=[60]",
            "--set", "seeds=[0]", "--set", "nopg_updates=2",
            "--set", 'settings={"task.eval_steps": 40}']
    assert main(argv) == 0
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["settings"] == {"task.eval_steps": 40, "nopg.model.device": "cpu",
                                 "nopg.model.dtype": "float32"}
    assert math.isfinite(read_rows(tmp_path / "run" / "runs.csv")[0]["J_hat"])
    capsys.readouterr()
    assert main(argv[:-2] + ["--lr", "0.1"]) == 2
    assert "does not take --lr" in capsys.readouterr().err


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_cli_sweep_refuses_a_missing_device_before_writing(tmp_path, capsys):
    argv = ["reproduce", "sample-efficiency", "--task", "pendulum-random", "--out", str(tmp_path),
            "--name", "run", "--workers", "1", "--no-progress", "--device", "cuda",
            "--set", 'algorithms=["NOPG-D"]', "--set", "sizes=[60]", "--set", "seeds=[0]"]
    assert main(argv) == 2
    assert "CUDA is not available" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_report_of_failed_runs_keeps_rows_and_skips_the_figure(tmp_path):
    from nopg.experiments.sample_efficiency_report import write_report

    row = {"task": "pendulum-random", "algorithm": "NOPG-D", "kind": "offline", "size": 60,
           "size_unit": "transitions", "n_transitions": None, "seed": 0, "return": None,
           "J_hat": None, "wall_time_s": None, "train_steps": None, "env_steps": None,
           "data_sha256": None, "error": "ValueError: boom"}
    summary = write_report([row], tmp_path, n_boot=100)
    assert summary[0]["n"] == 0 and math.isnan(summary[0]["mean"])
    assert read_rows(tmp_path / "runs.csv")[0]["error"] == "ValueError: boom"
    assert (tmp_path / "summary.csv").is_file() and not (tmp_path / "sample_efficiency.png").exists()
