"""Exporting policies as TorchScript and ONNX: outputs, verification, metadata and errors."""

import numpy as np
import pytest
import torch

import nopg
from nopg.io import export
from nopg.io.export import ExportVerificationError, export_policy, load_exported_policy

pytest.importorskip("onnxruntime")


def _policies() -> dict:
    torch.manual_seed(0)
    return {
        "deterministic": nopg.DeterministicMLPPolicy(
            3, 2, action_max=[2.0, 0.5], hidden=(8,), state_shift=[0.1, 0.0, -1.0],
            state_scale=[1.0, 2.0, 4.0]).double(),
        "gaussian": nopg.GaussianMLPPolicy(3, 2, action_max=2.0, sigma_max=0.5, hidden=(8,),
                                           activation="tanh").double(),
    }


def _reference(policy: torch.nn.Module, states: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        s = torch.as_tensor(states, dtype=torch.float64)
        out = policy.mean_std(s)[0] if nopg.policies.networks.is_stochastic(policy) else policy(s)
    return out.numpy()


@pytest.mark.parametrize("kind", ["deterministic", "gaussian"])
@pytest.mark.parametrize("name, exporter", [("p.pt", "auto"), ("p.onnx", "legacy"),
                                            ("p.onnx", "auto")])
def test_exported_actions_equal_the_policy(tmp_path, kind, name, exporter):
    if exporter == "auto" and name.endswith(".onnx"):
        pytest.importorskip("onnxscript")
    policy = _policies()[kind]
    path = export_policy(policy, tmp_path / name, onnx_exporter=exporter)
    run, meta = load_exported_policy(path)
    states = np.random.default_rng(1).normal(scale=3.0, size=(37, 3))   # another batch size
    np.testing.assert_allclose(run(states), _reference(policy, states), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(run(states[:1]), _reference(policy, states[:1]), atol=1e-12)
    assert meta["state_dim"] == 3 and meta["action_dim"] == 2 and meta["dtype"] == "float64"
    assert meta["action"] == ("mean" if kind == "gaussian" else "deterministic")
    assert meta["policy_spec"] == policy.spec()
    assert list(tmp_path.iterdir()) == [path]                           # no temporary file left


def test_float32_export_and_policy_untouched(tmp_path):
    policy = _policies()["gaussian"]
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    path = export_policy(policy, tmp_path / "p.onnx", dtype=torch.float32, onnx_exporter="legacy")
    run, meta = load_exported_policy(path)
    states = np.random.default_rng(2).normal(size=(5, 3))
    np.testing.assert_allclose(run(states), _reference(policy, states), atol=1e-5)
    assert meta["dtype"] == "float32"
    assert all(torch.equal(before[k], v) for k, v in policy.state_dict().items())
    assert next(policy.parameters()).dtype == torch.float64


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
def test_verification_catches_a_mismatch(tmp_path, monkeypatch, fmt):
    def broken(path, format=None):
        run, meta = real(path, format)
        return (lambda states: run(states) + 1e-3), meta

    real = export.load_exported_policy
    monkeypatch.setattr(export, "load_exported_policy", broken)
    target = tmp_path / "p.bin"
    target.write_text("old")
    with pytest.raises(ExportVerificationError, match="differ from the policy's by up to 0.001"):
        export_policy(_policies()["deterministic"], target, fmt, overwrite=True,
                      onnx_exporter="legacy")
    assert target.read_text() == "old" and len(list(tmp_path.iterdir())) == 1
    # Without verification the (here wrongly loaded) file is accepted.
    export_policy(_policies()["deterministic"], target, fmt, overwrite=True, verify=False,
                  onnx_exporter="legacy")
    assert target.stat().st_size > 3


def test_errors(tmp_path):
    policy = _policies()["deterministic"]
    with pytest.raises(ValueError, match="unknown export format 'tflite'"):
        export_policy(policy, tmp_path / "p.pt", "tflite")
    with pytest.raises(ValueError, match="cannot tell the export format"):
        export_policy(policy, tmp_path / "p.bin")
    with pytest.raises(ValueError, match=r"the folder .*missing does not exist"):
        export_policy(policy, tmp_path / "missing" / "p.pt")
    with pytest.raises(ValueError, match="is a folder"):
        export_policy(policy, tmp_path)
    export_policy(policy, tmp_path / "p.pt")
    with pytest.raises(ValueError, match="already exists"):
        export_policy(policy, tmp_path / "p.pt")
    with pytest.raises(ValueError, match="cannot act on states"):
        export_policy(policy, tmp_path / "q.pt", example_states=np.zeros((4, 5)))
    with pytest.raises(ValueError, match="onnx_exporter"):
        export_policy(policy, tmp_path / "q.onnx", onnx_exporter="fast")
    with pytest.raises(ValueError, match="does not exist"):
        load_exported_policy(tmp_path / "none.onnx")


def test_missing_onnx_packages_give_an_install_hint(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_onnx(name, *args, **kwargs):
        if name.split(".")[0] in ("onnx", "onnxruntime"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_onnx)
    with pytest.raises(ImportError, match=r"pip install 'nopg\[export\]'"):
        export_policy(_policies()["deterministic"], tmp_path / "p.onnx")
