"""Verification: the optimized model against the original, in onnxruntime."""
