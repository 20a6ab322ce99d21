"""Tests of the targets: CPU, OpenCL, QCOM, command buffers, replay engines."""
