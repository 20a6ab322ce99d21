"""Tests of the lazy Tensor and the ops built on it."""
