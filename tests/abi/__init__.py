"""Tests of ABI records, checks, diffs, frames, vehicle profiles."""
