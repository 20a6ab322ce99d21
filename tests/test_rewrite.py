"""UPat matching, the op-indexed PatternMatcher, graph_rewrite and the symbolic pass."""

from jit.dtype import dtypes
from jit.passes.symbolic import pm_symbolic
from jit.rewrite import PatternMatcher, UPat, graph_rewrite
from jit.uop import Ops, UOp


def test_hand_built_matcher_folds_two_plus_two() -> None:
    a = UOp(Ops.CONST, dtypes.int, arg=2)
    simple = PatternMatcher([
        (UPat(Ops.ADD, src=(UPat(Ops.CONST, name="c1"), UPat(Ops.CONST, name="c2"))),
         lambda c1, c2: UOp(Ops.CONST, dtype=c1.dtype, arg=c1.arg + c2.arg)),
    ])
    sugar = PatternMatcher([(UPat.cvar("c1") + UPat.cvar("c2"), lambda c1, c2: c1.const_like(c1.arg + c2.arg))])
    out = graph_rewrite(a + a, simple)
    assert out is UOp(Ops.CONST, dtypes.int, arg=4)
    assert graph_rewrite(a + a, sugar) is out


def test_commutative_patterns_match_either_order() -> None:
    x = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, 4),), (0, "global"))
    pm = PatternMatcher([(UPat.var("x") * 1, lambda x: x)])
    assert graph_rewrite(x * 1, pm) is x
    assert graph_rewrite(UOp.const(dtypes.int32, 1) * x, pm) is x


def test_matcher_is_indexed_by_op() -> None:
    pm = PatternMatcher([(UPat(Ops.ADD, name="x"), lambda x: None), (UPat(Ops.MUL, name="x"), lambda x: None)])
    assert len(pm._by_op[Ops.ADD]) == 1
    assert len(pm._by_op[Ops.SUB]) == 0


def test_rewrite_reaches_a_fixed_point_bottom_up() -> None:
    r = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, 4),), (0, "global"))
    expr = ((r + 3) + 4) + UOp.const(dtypes.int32, 2) * 0
    out = graph_rewrite(expr, pm_symbolic)
    assert out is r + 7


def test_deep_graphs_do_not_recurse() -> None:
    x = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, 4),), (0, "global"))
    for _ in range(5000):
        x = x + 1
    out = graph_rewrite(x, pm_symbolic)
    assert out.op is Ops.ADD and out.src[1].arg == 5000


def test_divmod_of_reshaped_index_simplifies() -> None:
    i = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, 3),), (0, "global"))
    j = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, 5),), (1, "global"))
    flat = i * 5 + j
    assert graph_rewrite(flat // 5, pm_symbolic) is i
    assert graph_rewrite(flat % 5, pm_symbolic) is j
    assert graph_rewrite((flat * 2) // 10, pm_symbolic) is i


def test_float_expressions_are_not_reassociated() -> None:
    x = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(4), (), 0)
    v = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.INDEX, x.dtype, (x, UOp.const(dtypes.int32, 0))),))
    expr = (v + 3.0) + 4.0
    assert graph_rewrite(expr, pm_symbolic) is expr


def test_a_decided_mask_term_drops_out_of_its_conjunction() -> None:
    i = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, 10),), (0, "global"))
    mask = i < 5
    assert graph_rewrite(mask & UOp.const(dtypes.bool, True), pm_symbolic) is mask
    assert graph_rewrite(UOp.const(dtypes.bool, False) & mask, pm_symbolic).arg is False
    bits = i & 6  # integer and: not a mask, left alone
    assert graph_rewrite(bits & UOp.const(dtypes.int32, -1), pm_symbolic).op is Ops.AND
