"""The model factory: ``bellman_model`` builds the class a configuration's ``successors`` names,
the kernel class refuses to stand in for the others, and ``rollout_model`` gives the anchored
model's rollout protocol and nothing else's."""

import pytest

import nopg
from nopg.model.factory import MODELS, bellman_model, rollout_model


def test_the_factory_builds_the_class_each_successors_value_names(dataset, bandwidths):
    for successors, cls in (("kernel", nopg.NonparametricBellman),
                            ("local-linear", nopg.LocalLinearBellman),
                            ("anchored", nopg.AnchoredBellman)):
        by_keyword = bellman_model(dataset, bandwidths, 0.9, successors=successors, top_k=6)
        by_config = bellman_model(dataset, bandwidths, 0.9,
                                  nopg.ModelConfig(successors=successors, top_k=6))
        assert type(by_keyword) is cls and type(by_config) is cls
        assert by_keyword.config.successors == successors == MODELS[successors].SUCCESSORS
        # Only the model that rolls the policy out answers for its own episodes.
        assert (rollout_model(by_config) is by_config) == (successors == "anchored")
    assert rollout_model(None) is None


def test_a_subclass_models_its_own_successors_and_the_kernel_class_refuses_others(
        dataset, bandwidths):
    model = nopg.AnchoredBellman(dataset, bandwidths, 0.9, top_k=6)
    assert model.config.successors == "anchored"
    with pytest.raises(ValueError, match="NonparametricBellman is the kernel model; "
                                         "successors='anchored' is built by nopg.bellman_model"):
        nopg.NonparametricBellman(dataset, bandwidths, 0.9, successors="anchored", top_k=6)
    with pytest.raises(ValueError, match="'successors' parameter must be one of kernel, "
                                         "local-linear, anchored. Got 'moved' instead"):
        bellman_model(dataset, bandwidths, 0.9, successors="moved")
