"""ModelConfig: one home for the model's settings, defaults and checks."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import nopg
from nopg.model.bellman import KEYWORD_DEFAULTS
from nopg.model.config import ModelConfig

GAMMA = 0.9


def test_nopg_config_takes_the_model_defaults_and_builds_the_model_config():
    config = nopg.NOPGConfig()
    assert config.model == ModelConfig()
    custom = nopg.NOPGConfig(model=nopg.ModelConfig(top_k=7, n_mc_policy=3, solver_tol=1e-9,
                                                    dtype="float32"))
    model_config = custom.model_config(stochastic=True)
    assert model_config == ModelConfig(top_k=7, n_mc_policy=3, solver_tol=1e-9, dtype="float32",
                                       stochastic=True)
    assert custom.resolved(1000).model.top_k == model_config.resolved(1000).top_k == 7


@pytest.mark.parametrize("kw, match", [
    (dict(top_k=0), "'top_k' parameter must be a positive int, 'auto' or None"),
    (dict(neighbors="faiss"), "'neighbors' parameter must be one of"),
    (dict(top_k=None, neighbors="knn"), "needs top_k"),
    (dict(n_mc_policy=None), "'n_mc_policy' parameter must be a positive int"),
    (dict(stochastic="yes"), "'stochastic' parameter must be a bool"),
    (dict(solver_tol=-1.0), "'solver_tol' parameter must be a positive float or 'auto'"),
    (dict(solver_error=1.0), "'solver_error' parameter must be a float in \\(0, 1\\) or None"),
    (dict(solver_error="loose"), "'solver_error' parameter must be a float in \\(0, 1\\) or None"),
    (dict(dtype="float16"), "'dtype' parameter must be one of"),
    (dict(device="tpu"), "'device' parameter must be"),
    (dict(neighbor_backend="ball"), "'neighbor_backend' parameter must be one of"),
])
def test_model_config_rejects_bad_settings(kw, match):
    with pytest.raises(ValueError, match=match):
        ModelConfig(**kw)
    if "stochastic" not in kw:      # NOPGConfig's model section is a ModelConfig
        with pytest.raises(ValueError, match=match):
            nopg.NOPGConfig().replace(**{f"model.{k}": v for k, v in kw.items()})


def test_model_config_is_frozen_and_takes_torch_types():
    config = ModelConfig(dtype=torch.float32, device=torch.device("cpu"))
    assert config.dtype == "float32" and config.device == "cpu"
    assert config.torch_dtype == torch.float32 and config.torch_device == torch.device("cpu")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.top_k = 3  # type: ignore[misc]


def test_model_keywords_keep_their_defaults(dataset, bandwidths):
    model = nopg.bellman_model(dataset, bandwidths, GAMMA, stochastic=True)
    assert model.config == ModelConfig(**KEYWORD_DEFAULTS, stochastic=True)
    assert model.top_k is None and model.solver_tol == 1e-10 and model.dense_max_n == 2000
    assert model.n_mc_policy == 10
    assert nopg.bellman_model(dataset, bandwidths, GAMMA, stochastic=True,
                                n_mc_policy=None).n_mc_policy == 10
    with pytest.raises(TypeError, match="n_mc_polcy"):
        nopg.bellman_model(dataset, bandwidths, GAMMA, n_mc_polcy=3)
    with pytest.raises(ValueError, match="ModelConfig"):
        nopg.bellman_model(dataset, bandwidths, GAMMA, {"top_k": 3})


def test_model_from_a_config_equals_the_model_from_keywords(dataset, bandwidths, initial_states,
                                                            det_policy):
    config = ModelConfig(top_k=8, solver="bicgstab", solver_tol=1e-9, n_mc_next=None)
    from_config = nopg.bellman_model(dataset, bandwidths, GAMMA, config)
    from_keywords = nopg.bellman_model(dataset, bandwidths, GAMMA, top_k=8, solver="bicgstab",
                                         solver_tol=1e-9, n_mc_policy=15, dense_max_n=None)
    assert from_config.config == from_keywords.config
    a = from_config.solution(det_policy, initial_states)
    b = from_keywords.solution(det_policy, initial_states)
    assert a.J == b.J
    # keywords replace the fields of a given config
    assert nopg.bellman_model(dataset, bandwidths, GAMMA, config, top_k=5).top_k == 5
