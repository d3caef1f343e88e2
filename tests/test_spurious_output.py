"""A normal run prints no spurious output: no torch warning about read-only arrays (a data set's
arrays are read-only) and no INFO log lines from an export."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import make_arrays

import nopg
from nopg.io.export import export_policy
from nopg.train import allocator

TESTS = Path(__file__).resolve().parent


def _run(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args],
                          capture_output=True, text=True, timeout=300, cwd=TESTS,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_fit_and_its_plots_on_read_only_arrays_warn_nothing():
    # In a fresh process: torch warns about a non-writable array only once per process, so an
    # earlier test's warning would hide this one's.
    out = _run("""
        import warnings
        import numpy as np, torch
        from conftest import make_arrays
        import nopg
        from nopg.envs.evaluation import policy_actions
        warnings.simplefilter("error")
        arrays = make_arrays(n=60, seed=1)
        for value in arrays.values():
            value.setflags(write=False)
        data = nopg.TransitionDataset(**arrays)
        assert not data.states.flags.writeable
        torch.manual_seed(0)
        policy = nopg.DeterministicMLPPolicy(2, 1, action_max=1.0, hidden=(4,)).double()
        algo = nopg.NOPG(policy, nopg.NOPGConfig(gamma=0.9))
        algo.fit(data, nopg.select_bandwidths(data), data.states[:3], n_updates=2,
                 progress=False)
        algo.predict(data.states)
        algo.value(data.states[:5])
        policy_actions(algo.policy, data.states)     # what a run's policy plot evaluates
        print("ok")
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok" and "not writable" not in out.stderr


def test_policy_actions_copy_read_only_states():
    from nopg.envs.evaluation import policy_actions
    states = np.random.default_rng(0).normal(size=(5, 2))
    states.setflags(write=False)
    torch.manual_seed(0)
    policy = nopg.DeterministicMLPPolicy(2, 1, hidden=(4,)).double()
    seen = []
    hook = policy.register_forward_pre_hook(lambda _m, inputs: seen.append(inputs[0]))
    try:
        policy_actions(policy, states)
    finally:
        hook.remove()
    assert seen[0].data_ptr() != states.__array_interface__["data"][0]   # a copy, not a view


def test_the_malloc_setting_logs_below_info(monkeypatch, caplog):
    monkeypatch.setattr(allocator, "_applied", None)
    with caplog.at_level(logging.DEBUG, logger="nopg"):
        allocator.reuse_freed_memory()
    assert not [r for r in caplog.records if r.levelno >= logging.INFO]


@pytest.fixture
def checkpoint(tmp_path, bandwidths, initial_states) -> Path:
    data = nopg.TransitionDataset(**make_arrays(n=60, seed=1))
    torch.manual_seed(0)
    policy = nopg.DeterministicMLPPolicy(2, 1, action_max=1.0, hidden=(4,)).double()
    algo = nopg.NOPG(policy, nopg.NOPGConfig(gamma=0.9))
    algo.fit(data, bandwidths, initial_states, n_updates=1, progress=False)
    return algo.save(tmp_path / "checkpoint")


def test_export_itself_logs_nothing(tmp_path, checkpoint, caplog, capfd):
    algo = nopg.NOPG.load(checkpoint)
    capfd.readouterr()
    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        export_policy(algo.policy, tmp_path / "policy.pt")
    assert not [r for r in caplog.records if r.levelno >= logging.INFO and r.name.startswith("nopg")]
    assert capfd.readouterr().err == ""


def test_the_export_command_prints_no_log_lines(tmp_path, checkpoint):
    out = _run("import sys; from nopg.cli import main; sys.exit(main(sys.argv[1:]))",
               "export", str(checkpoint), "--out", str(tmp_path / "policy.pt"))
    assert out.returncode == 0, out.stderr
    assert "wrote" in out.stdout
    assert out.stderr == ""
