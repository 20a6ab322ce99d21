"""Tests of errors, dtypes, settings."""
