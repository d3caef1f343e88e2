"""Saved policies: export to TorchScript or ONNX, and evaluating a saved policy."""
