"""Tests of the ONNX front end and the node conformance suite."""
