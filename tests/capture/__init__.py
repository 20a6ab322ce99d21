"""Tests of capture, realize and replay of captured models."""
