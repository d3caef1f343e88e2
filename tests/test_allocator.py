"""The process-wide malloc setting that NOPG applies at setup (``NOPGConfig.reuse_memory``)."""

from __future__ import annotations

import platform

import numpy as np
import pytest
import torch
from conftest import make_arrays

import nopg
from nopg.train import allocator

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not GLIBC, reason="needs glibc: mallopt is a glibc function, and "
                    "without it the setting is skipped (tested below)")
def test_reuse_freed_memory_raises_the_thresholds_once():
    assert allocator.reuse_freed_memory() is True
    assert allocator.reuse_freed_memory() is True      # idempotent, applied once
    assert allocator._mallopt_thresholds() is True     # glibc accepted every value


def test_setup_applies_the_setting_only_when_asked(monkeypatch, bandwidths, initial_states):
    calls = []
    monkeypatch.setattr("nopg.train.algorithm.reuse_freed_memory", lambda: calls.append(1) or True)
    data = nopg.TransitionDataset(**make_arrays(n=60, seed=1))
    for reuse in (False, True):
        torch.manual_seed(0)
        policy = nopg.DeterministicMLPPolicy(2, 1, action_max=1.0, hidden=(4,)).double()
        nopg.NOPG(policy, nopg.NOPGConfig(reuse_memory=reuse)).setup(data, bandwidths,
                                                                      initial_states)
        assert len(calls) == int(reuse)


def test_without_glibc_nothing_is_called(monkeypatch):
    monkeypatch.setattr(allocator.platform, "libc_ver", lambda: ("", ""))
    assert allocator._mallopt_thresholds() is False


@pytest.mark.parametrize("value", [1, "yes", None, np.float64(1.0)])
def test_reuse_memory_must_be_a_bool(value):
    with pytest.raises(ValueError, match="reuse_memory"):
        nopg.NOPGConfig(reuse_memory=value)
