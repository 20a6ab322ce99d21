"""Tests of the pass pipeline, dtype decomposition, the optimizer."""
