"""``fold_reciprocal_products`` (jit/codegen/passes/quotients.py): ``a * (1 / b)`` becomes ``a / b`` only where
the reciprocal varies with every range ``a`` does and has no other consumer; the results are the quotient's."""

from __future__ import annotations

import numpy as np

from jit import Tensor
from jit.realize import compile_uops

RNG = np.random.default_rng(0)
X = RNG.standard_normal((8, 64), dtype=np.float32)
ROW = RNG.standard_normal((8, 1), dtype=np.float32)


def _divisions(t: Tensor) -> list[str]:
    kernels = compile_uops([t.uop])
    assert len(kernels) == 1
    source = kernels[0].program.source
    return [line.strip() for line in source[source.find("void "):].split("\n") if "/" in line]


def test_a_product_with_a_reciprocal_of_the_same_lanes_is_one_division() -> None:
    out = Tensor(X) * (Tensor(X) + 2).reciprocal()
    lines = _divisions(out)
    assert len(lines) == 1 and "1.0f/" not in lines[0] and "*" not in lines[0], lines
    np.testing.assert_array_equal(out.numpy(), X / (X + np.float32(2)))  # the correctly rounded quotient


def test_a_reciprocal_computed_once_per_row_stays_a_product() -> None:
    """A division per element would replace a multiply per element (a softmax's ``e * (1 / sum)``)."""
    out = Tensor(X) * Tensor(ROW).reciprocal()
    lines = _divisions(out)
    assert len(lines) == 1 and "*" in lines[0], lines
    np.testing.assert_allclose(out.numpy(), X * (np.float32(1) / ROW), rtol=1e-6)


def test_a_reciprocal_used_twice_stays() -> None:
    r = (Tensor(X) + 2).reciprocal()
    out = Tensor(X) * r + r
    lines = _divisions(out)
    assert len(lines) == 1 and "1.0f/" in lines[0], lines
    recip = np.float32(1) / (X + np.float32(2))
    np.testing.assert_allclose(out.numpy(), X * recip + recip, rtol=1e-6, atol=1e-6)
