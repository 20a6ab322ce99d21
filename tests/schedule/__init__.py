"""Tests of kernels, lowering, the memory plan, lanes."""
