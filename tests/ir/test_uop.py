"""The UOp: hash-consing, immutability, cached properties, repr, op groups, memory."""

import gc

import pytest

from jit import dtypes
from jit.ir.uop import GroupOp, Ops, UOp, UOpArgError


def test_equal_specs_are_the_same_object() -> None:
    a = UOp(Ops.CONST, dtypes.int, arg=2)
    b = UOp(Ops.CONST, dtypes.int, arg=2)
    assert a is b
    assert (a + b) is (a + b)


def test_python_equal_args_stay_distinct() -> None:
    assert UOp.const(dtypes.float32, 0.0) is not UOp.const(dtypes.float32, -0.0)
    assert UOp.const(dtypes.float32, float("nan")) is UOp.const(dtypes.float32, float("nan"))
    assert UOp.const(dtypes.int32, 1) is not UOp.const(dtypes.bool, True)
    same_op = [UOp(Ops.SINK, arg=a) for a in (1, True, 1.0, None)]
    assert len({id(u) for u in same_op}) == 4 and [u.arg for u in same_op] == [1, True, 1.0, None]
    assert type(same_op[1].arg) is bool and type(same_op[2].arg) is float


def test_replace_builds_the_interned_node() -> None:
    x, y = UOp.const(dtypes.int32, 1), UOp.const(dtypes.int32, 2)
    s = x + y
    assert s.replace(src=[y, x]) is (y + x)
    assert s.replace(src=(x, y)) is s
    assert s.replace(op=Ops.MUL) is (x * y)
    assert s.replace(src=(y, y), arg=None) is (y + y)


def test_uop_is_immutable() -> None:
    a = UOp.const(dtypes.int32, 1)
    with pytest.raises(AttributeError):
        a.arg = 2  # type: ignore[misc]


def test_arg_type_is_checked() -> None:
    with pytest.raises(UOpArgError, match="RESHAPE"):
        UOp(Ops.RESHAPE, dtypes.float32, (), arg=[2, 2])


def test_repr_prints_shared_subtrees_once() -> None:
    a = UOp(Ops.CONST, dtypes.int, arg=2)
    text = repr(a + a)
    assert text == ("UOp(Ops.ADD, dtypes.int32, arg=None, src=(\n"
                    "  x0:=UOp(Ops.CONST, dtypes.int32, arg=2, src=()),\n"
                    "   x0,))")


def test_shape_and_value_range_are_cached() -> None:
    buf = UOp(Ops.BUFFER, dtypes.float32, (), (10_001, "CPU", 12))
    view = UOp(Ops.RESHAPE, dtypes.float32, (buf,), (3, 4))
    assert view.shape == (3, 4)
    assert "shape" in view._cache
    rng = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, 8),), (0, "global"))
    expr = rng * 4 + 3
    assert (expr.vmin, expr.vmax) == (3, 31)
    assert "vrange" in expr._cache


def test_op_groups() -> None:
    x = UOp.const(dtypes.float32, 1.0)
    assert (x + x).is_alu
    assert UOp(Ops.RESHAPE, dtypes.float32, (x,), (1,)).is_movement
    assert UOp(Ops.BUFFER, dtypes.float32, (), (10_002, "CPU", 1)).is_buffer
    assert Ops.ADD in GroupOp.Commutative and Ops.SUB not in GroupOp.Commutative


def test_dropping_graphs_frees_them() -> None:
    """A long run that builds and drops graphs keeps the intern table (and memory) flat."""
    gc.collect()
    before = len(UOp._interned)
    for i in range(2000):
        x = UOp.const(dtypes.float32, float(i))
        for _ in range(20):
            x = x * 1.5 + float(i)
        del x
    gc.collect()
    assert len(UOp._interned) - before < 50


def test_toposort_orders_sources_first_and_each_call_owns_its_list() -> None:
    from jit.ir.uop import toposort
    a, b = UOp.const(dtypes.int32, 3), UOp.const(dtypes.int32, 4)
    mul = a * b
    root = mul + a
    first = toposort([root])
    assert first == [a, b, mul, root]
    first.append(a)  # a caller's own list: the root's kept order is not touched
    first.reverse()
    assert toposort([root]) == [a, b, mul, root] == root.toposort()
    assert toposort([root]) is not toposort([root])
    # with roots or edges of its own a walk is never the kept one
    assert toposort([mul, root]) == [a, b, mul, root]
    assert toposort([root], lambda u: u.src[:1]) == [a, mul, root]


def test_toposort_is_the_recursive_depth_first_post_order() -> None:
    """First visit order, sources left to right, on random graphs sharing nodes, and on a chain too deep to
    recurse along."""
    import random

    from jit.ir.uop import toposort

    def recursive(roots: list[UOp]) -> list[UOp]:
        order: list[UOp] = []
        seen: set[UOp] = set()

        def visit(u: UOp) -> None:
            if u not in seen:
                seen.add(u)
                for s in u.src:
                    visit(s)
                order.append(u)
        for r in roots:
            visit(r)
        return order

    rng = random.Random(5)
    for _ in range(50):
        nodes = [UOp.const(dtypes.int32, rng.randrange(40)) for _ in range(4)]
        for _ in range(40):
            a, b, c = (rng.choice(nodes) for _ in range(3))
            nodes.append(rng.choice([a + b, a * b, (a < b).where(c, a)]))
        roots = rng.sample(nodes, 3)
        assert toposort(roots) == recursive(roots)
    deep = UOp.const(dtypes.int32, 0)
    for i in range(5000):
        deep = deep + i
    order = toposort([deep])
    assert len(order) == 10000 and order[-1] is deep and order[0] is UOp.const(dtypes.int32, 0)  # 5000 sums, 0..4999


def test_a_walked_graph_is_freed_without_the_cycle_collector() -> None:
    import weakref

    from jit.ir.uop import toposort
    gc.disable()
    try:
        root = UOp.const(dtypes.int32, 12345) * UOp.const(dtypes.int32, 678)
        assert toposort([root])[-1] is root and toposort([root])[-1] is root  # walked, then kept
        gone = weakref.ref(root)
        del root
        assert gone() is None
    finally:
        gc.enable()
