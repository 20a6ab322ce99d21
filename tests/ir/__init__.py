"""Tests of the UOp, the pattern matcher, ALU semantics."""
