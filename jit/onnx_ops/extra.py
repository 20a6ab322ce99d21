"""ONNX ops beyond the core families: sampling, signal processing, detection, quantized linear algebra,
training optimizers, ML-domain ops and the newer fused ops (LinearAttention, CausalConvWithState, ...)."""

from __future__ import annotations
