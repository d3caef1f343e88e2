"""Bandwidth continuation in ``NOPG.fit``: wide kernels first, the given bandwidths at the end."""

from __future__ import annotations

import numpy as np
import pytest

import nopg


def test_schedule_shrinks_geometrically_to_the_given_bandwidths(dataset, bandwidths, initial_states,
                                                                 det_policy):
    config = nopg.NOPGConfig(gamma=0.9, continuation=nopg.Continuation(factor=8.0, updates=6, stages=4))
    algo = nopg.NOPG(det_policy, config)
    stages = algo._continuation(10)
    assert [at for at, _ in stages] == [0, 2, 4, 6]
    np.testing.assert_allclose([f for _, f in stages], [8.0, 4.0, 2.0, 1.0])
    seen = []
    algo.fit(dataset, bandwidths, initial_states, 10, progress=False,
             callbacks=[lambda a, m: seen.append(float(a.model_.bandwidths.state[0]))])
    h = float(bandwidths.state[0])
    np.testing.assert_allclose(seen, [8 * h] * 2 + [4 * h] * 2 + [2 * h] * 2 + [h] * 4)
    assert algo.model_.bandwidths == bandwidths.broadcast(dataset.state_dim, dataset.action_dim)


def test_default_length_is_half_the_fit(dataset, bandwidths, det_policy):
    config = nopg.NOPGConfig(continuation=nopg.Continuation(factor=2.0, stages=2))
    algo = nopg.NOPG(det_policy, config)
    assert algo._continuation(100) == [(0, 2.0), (50, 1.0)]
    assert nopg.NOPG(det_policy, nopg.NOPGConfig())._continuation(100) == []


@pytest.mark.parametrize("kwargs, name", [(dict(factor=0.0), "factor"),
                                          (dict(factor=2.0, stages=1), "stages"),
                                          (dict(factor=2.0, updates=0), "updates")])
def test_bad_continuation_settings(kwargs, name):
    with pytest.raises(ValueError, match=f"'{name}' parameter of Continuation"):
        nopg.NOPGConfig(continuation=kwargs)
