"""Tests of building, loading, verifying packages; the CLI."""
