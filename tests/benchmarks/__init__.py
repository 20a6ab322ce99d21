"""Tests of the benchmarks' own helpers."""
