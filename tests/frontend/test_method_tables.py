"""How the front end puts Tensor together (jit/frontend/__init__.py): each op module's ``TENSOR_METHODS`` attached
once, the elementwise op tables (jit/frontend/elementwise.py) behind the ALU methods and operators."""

from __future__ import annotations

import operator
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from jit.frontend import autograd, creation, elementwise, getitem, movement, nn_ops, reduce
from jit.frontend.tensor import Tensor

ROOT = Path(__file__).resolve().parents[2]
MODULES = (elementwise, creation, movement, getitem, reduce, nn_ops, autograd)


def run_fresh(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a new interpreter (nothing of jit imported yet), from the repository root."""
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("imports", ["from jit.frontend.tensor import Tensor", "from jit import Tensor"])
def test_any_import_of_tensor_gets_every_method(imports: str) -> None:
    # the op modules import tensor, never the other way: importing tensor alone must still attach them
    done = run_fresh(f"{imports}\n"
                     "names = ('conv2d', 'max_pool2d', 'softmax', 'sum', 'argmax', 'reshape', 'pad', 'cat', "
                     "'zeros', 'rand', '__getitem__', 'gradient', 'backward', 'exp', '__add__', '__rsub__', 'T')\n"
                     "missing = [n for n in names if not hasattr(Tensor, n)]\n"
                     "assert not missing, missing\n"
                     "print(Tensor([[[1.0, 2.0]]]).conv2d(Tensor([[[3.0]]])).tolist())")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[[[3.0, 6.0]]]"


def test_attached_methods_are_the_modules_functions() -> None:
    for module in MODULES:
        for name, method in module.TENSOR_METHODS.items():
            assert Tensor.__dict__[name] is method, f"Tensor.{name} is not {module.__name__}'s"


def test_a_second_attach_is_refused() -> None:
    # attaching again would replace every method: the package refuses a name that is already on Tensor
    done = run_fresh("import importlib\nimport jit.frontend\nimportlib.reload(jit.frontend)")
    assert done.returncode != 0
    assert "defined by jit.frontend.elementwise and before it" in done.stderr


def test_every_table_row_is_a_method() -> None:
    for name in (*elementwise.ALU_OPS, *elementwise.OPERATORS):
        assert callable(getattr(Tensor, name)), name
    for method, _ in elementwise.OPERATORS.values():
        assert hasattr(Tensor, method), method


A = np.array([[1, -2, 3], [4, 0, -6]], np.int32)
B = np.array([[2, 3, -1], [4, -5, 6]], np.int32)


@pytest.mark.parametrize("op", [operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod,
                                operator.lt, operator.gt, operator.le, operator.ge, operator.eq, operator.ne,
                                operator.and_, operator.or_, operator.xor])
def test_operators_match_numpy_both_ways(op: Callable[[Any, Any], Any]) -> None:
    np.testing.assert_array_equal(op(Tensor(A), 3).numpy(), op(A, 3))  # the forward operator
    np.testing.assert_array_equal(op(3, Tensor(B)).numpy(), op(3, B))  # the reflected one: operands swapped


def test_reflected_float_operators() -> None:
    a = np.array([0.5, 2.0, -4.0], np.float32)
    t = Tensor(a)
    np.testing.assert_allclose((3 / t).numpy(), 3 / a)
    np.testing.assert_allclose((2 ** t).numpy(), 2 ** a, rtol=1e-6)
    np.testing.assert_allclose((-t).numpy(), -a)
    np.testing.assert_allclose((Tensor(np.eye(3, dtype=np.float32)) @ t).numpy(), a)
