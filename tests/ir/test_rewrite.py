"""UPat matching, the op-indexed PatternMatcher, graph_rewrite and the symbolic pass."""

import numpy as np

from jit import dtypes
from jit.codegen.passes.symbolic import canonical_sum, pm_symbolic
from jit.ir.rewrite import PatternMatcher, UPat, graph_rewrite, single_path
from jit.ir.uop import Ops, UOp


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


def test_division_by_a_power_of_two_becomes_an_exact_multiply() -> None:
    x = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(4), (), 0)
    v = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.INDEX, x.dtype, (x, UOp.const(dtypes.int32, 0))),))
    out = graph_rewrite(v / 128.0, pm_symbolic)
    assert out.op is Ops.MUL and out.src[1].arg == 1 / 128
    assert graph_rewrite(v / -0.25, pm_symbolic).src[1].arg == -4.0
    for kept in (v / 3.0, v / 2.0 ** 127):  # not a power of two; 2**-127 is subnormal in float32
        assert graph_rewrite(kept, pm_symbolic).op is Ops.FDIV
    h = UOp(Ops.LOAD, dtypes.float16, (UOp(Ops.INDEX, dtypes.float16.ptr(4), (x, UOp.const(dtypes.int32, 0))),))
    assert graph_rewrite(h / 2.0 ** 15, pm_symbolic).op is Ops.FDIV  # 2**-15 is subnormal in float16
    assert graph_rewrite(h / 2.0 ** 14, pm_symbolic).op is Ops.MUL


def test_division_by_a_power_of_two_matches_numpy_bit_for_bit() -> None:
    from jit import Tensor
    x = np.array([1.0, 255.0, -3.5, np.inf, -np.inf, np.nan, -0.0, 1e-38, 3e38, 1.4e-45], np.float32)
    for c in (128.0, 0.5, 2.0 ** -100, 2.0 ** 100):
        got = (Tensor(x) / c).numpy()
        with np.errstate(over="ignore"):
            want = x / np.float32(c)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_divmod_at_a_block_the_terms_divide_splits_off_the_remainder() -> None:
    # a 32-wide tile t over weights in blocks of 64: (32t + lane) // 64 and % 64, lane < 16
    t = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, 8),), (1, "global"))
    lane = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, 16),), (2, "vector"))
    x = t * 32 + lane + 16
    assert graph_rewrite(x // 64, pm_symbolic) is graph_rewrite(t // 2, pm_symbolic)
    assert graph_rewrite(x % 64, pm_symbolic) is graph_rewrite((t % 2) * 32 + lane + 16, pm_symbolic)
    for tv in range(8):
        for lv in range(16):
            v = tv * 32 + lv + 16
            assert (v // 64, v % 64) == (tv // 2, (tv % 2) * 32 + lv + 16)
    # a remainder that can reach the block (lane < 40 > 32) keeps the division
    wide = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, 40),), (3, "global"))
    assert graph_rewrite((t * 32 + wide) // 64, pm_symbolic).op is Ops.IDIV
    assert graph_rewrite((t * 32 + wide) // 64, pm_symbolic).src[0] is not t


def test_a_row_split_and_rejoined_is_the_row() -> None:
    # a 56x56 plane read as 49 rows of 64: (f // 56) * 56 + f % 56 with f = 64r + lane is f again
    r = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, 49),), (1, "global"))
    lane = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, 64),), (2, "vector"))
    f = r * 64 + lane
    rejoined = (f // 56) * 56 + f % 56 + 3136
    assert graph_rewrite(rejoined, pm_symbolic) is graph_rewrite(f + 3136, pm_symbolic)
    # a different multiple of the quotient stays as it is
    kept = graph_rewrite((f // 56) * 57 + f % 56, pm_symbolic)
    assert any(u.op is Ops.IDIV for u in kept.toposort())


def _nodes() -> list[UOp]:
    r = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, 4),), (0, "global"))
    c2, c3 = UOp.const(dtypes.int32, 2), UOp.const(dtypes.int32, 3)
    f = UOp.const(dtypes.float32, 2.0)
    return [r, c2, r + c2, c2 + r, r + r, (r + c2) * c3, r * c3, (r < c3).where(c2, c3),
            f + f, UOp(Ops.CAST, dtypes.float32, (r,)), UOp(Ops.CONST, dtypes.int32, arg=2)]


def test_a_pattern_without_commutative_sources_matches_as_one_function_like_match() -> None:
    """``single_path`` (what PatternMatcher tries rules with) binds what ``match`` yields, and only then."""
    pats = [UPat.var("x"), UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar("c"))), UPat(Ops.ADD, src=(UPat.var("x"),) * 2),
            UPat(Ops.ADD, name="a", src=UPat(dtype=dtypes.int32)), UPat(Ops.MUL, src=(UPat(Ops.ADD),),
                                                                         allow_any_len=True),
            UPat(Ops.MUL, src=(UPat(Ops.ADD),)), UPat(Ops.CONST, arg=2), UPat(Ops.CONST, arg=2.0),
            UPat((Ops.ADD, Ops.MUL), dtype=dtypes.float32, name="y"), UPat(Ops.WHERE, src=(UPat(Ops.CMPLT), UPat.cvar(),
                                                                                           UPat.cvar("c")))]
    for pat in pats:
        fn = single_path(pat)
        assert fn is not None
        for node in _nodes():
            first = next(pat.match(node, {}), None)
            got: dict[str, UOp] = {}
            assert fn(node, got) == (first is not None), (pat, node)
            if first is not None:
                assert got == first


def test_a_pattern_with_commutative_sources_anywhere_is_left_to_match() -> None:
    assert single_path(UPat.var("x") + 1) is None
    assert single_path(UPat(Ops.MUL, src=(UPat.var("x") + 1, UPat.cvar("c")))) is None
    assert single_path(UPat(Ops.MUL, src=UPat.var("x") + 1)) is None


def test_a_canonical_sum_is_kept_on_its_node() -> None:
    r = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, 8),), (0, "global"))
    s = UOp.const(dtypes.int32, 3) + r * 2 + 1
    first = canonical_sum(s)
    assert first is not None and canonical_sum(first) is None
    assert canonical_sum(s) is first and s.cached("canonical_sum", lambda _: None) is first
