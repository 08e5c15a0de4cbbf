"""The printed tile IR: golden text of ``tl.explain`` for small kernels, what the simplify
pass does (and must not do), and that the verifier rejects malformed programs."""

import numpy as np
import pytest

import tilelang as tl
from tilelang._ir import primitives as P
from tilelang._ir.core import PRIMITIVES, Block, Eqn, Literal, Program, TileType, Var
from tilelang._ir.verifier import verify
from tilelang._passes.simplify import simplify
from tilelang.dtypes import float32, int32
from tilelang.kernel import trace


def golden(kernel, text):
    """``text`` with ``@N`` replaced by this file's name and line N of the kernel (1 = the decorator)."""
    first = kernel.fn.__code__.co_firstlineno
    out = []
    for line in text.strip("\n").splitlines():
        head, sep, tail = line.rpartition(" # @")
        out.append(f"{head} # test_printer.py:{first + int(tail) - 1}" if sep else line)
    return "\n".join(out)


@tl.tile_kernel
def vadd(x, y, out, TILE: tl.Constant):
    i = tl.block_id(0)
    a = tl.load(x, index=(i,), shape=(TILE,))
    b = tl.load(y, index=(i,), shape=(TILE,))
    tl.store(out, a + b, index=(i,))


@tl.tile_kernel
def running(x, out, n, T: tl.Constant):
    acc = tl.zeros((T,), tl.float32)
    m = tl.full((T,), float("-inf"))
    count = 0
    for k in tl.range(n):
        t = tl.load(x, index=(k,), shape=(T,))
        acc, m = acc + t, tl.maximum(m, t)
        count += 1
    tl.store(out, acc / count + m, index=(0,))


@tl.tile_kernel
def rowsum(x, out, BM: tl.Constant, BN: tl.Constant):
    i = tl.block_id(0)
    t = tl.load(x, index=(i, 0), shape=(BM, BN))
    s = tl.sum(t, axis=1, keepdims=True)
    tl.store(out, s, index=(i, 0))


@tl.tile_kernel
def folding(out, T: tl.Constant):
    s = tl.full((), 2.0) * 3.0 + 1.0
    w = tl.full((), 127, tl.int8) + 1
    z = tl.full((), float("nan")).astype(tl.int32)
    q = tl.full((), 7) // 0
    tl.store(out, tl.zeros((T,)) + s + w + z + q, index=(0,))


@tl.tile_kernel
def cse_dce(x, out, T: tl.Constant):
    a = tl.load(x, index=(0,), shape=(T,))
    b = tl.load(x, index=(0,), shape=(T,))
    unused = tl.exp(a) + tl.load(x, index=(1,), shape=(T,))  # noqa: F841
    tl.store(out, a * 2.0 + b * 2.0, index=(0,))
    tl.store(out, tl.sqrt(a) + tl.sqrt(a), index=(0,))
    c = tl.load(out, index=(0,), shape=(T,))
    tl.store(out, c, index=(1,))


# ----------------------------------------------------------------------- golden text

VADD_TILE_IR = """
{ kernel vadd(x:f32[?]*, y:f32[?]*, out:f32[?]*) TILE=128
    a:i32[] = block_id[axis=0]                                   # @3
    b:i64[] = convert[dtype=int64] a                             # @4
    c:i64[] = mul b 128:i64[]                                    # @4
    d:f32[128] = load[shape=(128,)] x c 0.0:f32[]                # @4
    e:i64[] = convert[dtype=int64] a                             # @5
    f:i64[] = mul e 128:i64[]                                    # @5
    g:f32[128] = load[shape=(128,)] y f 0.0:f32[]                # @5
    h:f32[128] = add d g                                         # @6
    i:i64[] = convert[dtype=int64] a                             # @6
    j:i64[] = mul i 128:i64[]                                    # @6
    store out h j                                                # @6
}
"""

VADD_SIMPLIFIED = """
{ kernel vadd(x:f32[?]*, y:f32[?]*, out:f32[?]*) TILE=128
    a:i32[] = block_id[axis=0]                                   # @3
    b:i64[] = convert[dtype=int64] a                             # @4
    c:i64[] = mul b 128:i64[]                                    # @4
    d:f32[128] = load[shape=(128,)] x c 0.0:f32[]                # @4
    e:f32[128] = load[shape=(128,)] y c 0.0:f32[]                # @5
    f:f32[128] = add d e                                         # @6
    store out f c                                                # @6
}
"""

RUNNING_TILE_IR = """
{ kernel running(x:f32[?]*, out:f32[?]*, n:i32[]~) T=8
    a:f32[8] = full[shape=(8,) dtype=float32] 0.0:f32[]          # @3
    b:f32[8] = full[shape=(8,) dtype=float32] -inf:f32[]         # @4
    c:i32[] = convert[dtype=int32] n                             # @6
    d:i32[] = full[shape=() dtype=int32] 0:i32[]~                # @6
    e:f32[8] f:f32[8] g:i32[] = range_loop 0:i32[] c 1:i32[] a b d # @6
        body={ lambda h:i32[] i:f32[8] j:f32[8] k:i32[] .
            l:i64[] = convert[dtype=int64] h                     # @7
            m:i64[] = mul l 8:i64[]                              # @7
            o:f32[8] = load[shape=(8,)] x m 0.0:f32[]            # @7
            p:f32[8] = add i o                                   # @8
            q:f32[8] = maximum j o                               # @8
            r:i32[] = add k 1:i32[]                              # @9
          in (p q r) }
    s:f32[] = convert[dtype=float32] g                           # @10
    t:f32[8] = div e s                                           # @10
    u:f32[8] = add t f                                           # @10
    store out u 0:i64[]                                          # @10
}
"""

RUNNING_SIMPLIFIED = """
{ kernel running(x:f32[?]*, out:f32[?]*, n:i32[]~) T=8
    a:f32[8] = full[shape=(8,) dtype=float32] 0.0:f32[]          # @3
    b:f32[8] = full[shape=(8,) dtype=float32] -inf:f32[]         # @4
    c:f32[8] d:f32[8] e:i32[] = range_loop 0:i32[] n 1:i32[] a b 0:i32[] # @6
        body={ lambda f:i32[] g:f32[8] h:f32[8] i:i32[] .
            j:i64[] = convert[dtype=int64] f                     # @7
            k:i64[] = mul j 8:i64[]                              # @7
            l:f32[8] = load[shape=(8,)] x k 0.0:f32[]            # @7
            m:f32[8] = add g l                                   # @8
            o:f32[8] = maximum h l                               # @8
            p:i32[] = add i 1:i32[]                              # @9
          in (m o p) }
    q:f32[] = convert[dtype=float32] e                           # @10
    r:f32[8] = div c q                                           # @10
    s:f32[8] = add r d                                           # @10
    store out s 0:i64[]                                          # @10
}
"""

ROWSUM_TILE_IR = """
{ kernel rowsum(x:f16[?,?]*, out:f16[?,?]*) BM=4 BN=8
    a:i32[] = block_id[axis=0]                                   # @3
    b:i64[] = convert[dtype=int64] a                             # @4
    c:i64[] = mul b 4:i64[]                                      # @4
    d:f16[4,8] = load[shape=(4,8)] x c 0:i64[] 0.0:f16[]         # @4
    e:f32[4,8] = convert[dtype=float32] d                        # @5
    f:f32[4] = reduce_sum[axis=1] e                              # @5
    g:f32[4,1] = reshape[shape=(4,1)] f                          # @5
    h:f16[4,1] = convert[dtype=float16] g                        # @5
    i:i64[] = convert[dtype=int64] a                             # @6
    j:i64[] = mul i 4:i64[]                                      # @6
    store out h j 0:i64[]                                        # @6
}
"""

ROWSUM_SIMPLIFIED = """
{ kernel rowsum(x:f16[?,?]*, out:f16[?,?]*) BM=4 BN=8
    a:i32[] = block_id[axis=0]                                   # @3
    b:i64[] = convert[dtype=int64] a                             # @4
    c:i64[] = mul b 4:i64[]                                      # @4
    d:f16[4,8] = load[shape=(4,8)] x c 0:i64[] 0.0:f16[]         # @4
    e:f32[4,8] = convert[dtype=float32] d                        # @5
    f:f32[4] = reduce_sum[axis=1] e                              # @5
    g:f32[4,1] = reshape[shape=(4,1)] f                          # @5
    h:f16[4,1] = convert[dtype=float16] g                        # @5
    store out h c 0:i64[]                                        # @6
}
"""

FOLDING_SIMPLIFIED = """
{ kernel folding(out:f32[?]*) T=4
    a:f32[4] = full[shape=(4,) dtype=float32] 0.0:f32[]          # @7
    b:f32[4] = add a 7.0:f32[]                                   # @7
    c:f32[4] = add b -128.0:f32[]                                # @7
    d:f32[4] = add c 0.0:f32[]                                   # @7
    e:f32[4] = add d 0.0:f32[]                                   # @7
    store out e 0:i64[]                                          # @7
}
"""

CSE_DCE_SIMPLIFIED = """
{ kernel cse_dce(x:f32[?]*, out:f32[?]*) T=4
    a:f32[4] = load[shape=(4,)] x 0:i64[] 0.0:f32[]              # @3
    b:f32[4] = load[shape=(4,)] x 0:i64[] 0.0:f32[]              # @4
    c:f32[4] = mul a 2.0:f32[]                                   # @6
    d:f32[4] = mul b 2.0:f32[]                                   # @6
    e:f32[4] = add c d                                           # @6
    store out e 0:i64[]                                          # @6
    f:f32[4] = sqrt a                                            # @7
    g:f32[4] = add f f                                           # @7
    store out g 0:i64[]                                          # @7
    h:f32[4] = load[shape=(4,)] out 0:i64[] 0.0:f32[]            # @8
    store out h 4:i64[]                                          # @9
}
"""

CASES = [
    (vadd, ("f32[:]", "f32[:]", "f32[:]"), {"TILE": 128}, VADD_TILE_IR, VADD_SIMPLIFIED),
    (running, ("f32[:]", "f32[:]", 3), {"T": 8}, RUNNING_TILE_IR, RUNNING_SIMPLIFIED),
    (rowsum, ("f16[:, :]", "f16[:, :]"), {"BM": 4, "BN": 8}, ROWSUM_TILE_IR, ROWSUM_SIMPLIFIED),
    (folding, ("f32[:]",), {"T": 4}, None, FOLDING_SIMPLIFIED),
    (cse_dce, ("f32[:]", "f32[:]"), {"T": 4}, None, CSE_DCE_SIMPLIFIED),
]


@pytest.mark.parametrize("kernel, args, constants, tile_ir, simplified", CASES, ids=[c[0].__name__ for c in CASES])
def test_golden_text(kernel, args, constants, tile_ir, simplified):
    explanation = tl.explain(kernel, *args, **constants, backend="interpret")
    if tile_ir is not None:
        assert explanation["tile_ir"] == golden(kernel, tile_ir)
    assert explanation["simplified"] == golden(kernel, simplified)
    assert str(explanation).startswith(f"tilelang.explain({kernel.__name__})\n\n=== tile_ir ===\n{{ kernel ")


@pytest.mark.parametrize("kernel, args, constants", [c[:3] for c in CASES], ids=[c[0].__name__ for c in CASES])
def test_traced_and_simplified_programs_verify(kernel, args, constants):
    program = trace(kernel, kernel.specialize(kernel.bind(args, constants))[0])
    verify(program, "tracing")
    verify(simplify(program), "simplify")


def test_explain_accepts_real_arguments_and_names_stages():
    x = np.zeros(256, np.float32)
    by_signature = tl.explain(vadd, "f32[:]", "f32[:]", "f32[:]", TILE=128)
    by_value = tl.explain(vadd, x, x, x, TILE=128)
    assert by_value.stages == by_signature.stages
    assert list(by_value.stages)[:2] == ["tile_ir", "simplified"]
    with pytest.raises(KeyError, match="no stage 'nope'; stages are tile_ir, simplified"):
        by_value["nope"]


def test_explain_grid_estimates_the_cost_of_a_launch():
    """Bytes each array moves once, float operations per element (a loop's body per known
    iteration); a kernel with a string Constant (examples/matmul.py's PRECISION) was refused
    as if its arguments were signatures."""
    from tilelang._passes.estimate_cost import estimate_cost

    x, out = np.zeros(1000, np.float32), np.zeros(16, np.float32)
    for kernel, args, constants, grid, want in [
        (vadd, (x, x, x), dict(TILE=128), (8,), (3 * 4000, 8 * 128, True)),
        (running, (x, out, 5), dict(T=16), (1,), (4000 + 64, 5 * 2 * 16 + 2 * 16, True)),
    ]:
        arguments = kernel.bind(args, constants)
        program = kernel.compile(kernel.specialize(arguments)[0], "interpret").program
        cost = estimate_cost(program, grid, arguments)
        assert (cost.bytes, cost.flops, cost.exact_loops) == want
    text = tl.explain(vadd, x, x, x, TILE=128, grid=8)["cost"]
    assert text.startswith("grid (8,): 0.012 MB moved at least, 0.001 MFLOP\n")
    empty = tl.explain(vadd, x, x, x, TILE=128, grid=(8, 0))["cost"]  # (no block runs: it counted the arrays)
    assert empty.startswith("grid (8, 0): 0.000 MB moved at least, 0.000 MFLOP\n")
    tuned = tl.autotune(configs=[tl.Config(TILE=128)])(vadd)
    with pytest.raises(tl.TileError, match=r"test_printer.py:\d+.*one configuration of a tuned kernel"):
        tl.explain(tuned, x, x, x)

    @tl.tile_kernel
    def scaled(x, out, MODE: tl.Constant = "double"):
        t = tl.load(x, index=(0,), shape=(1024,))
        tl.store(out, t * 2.0 if MODE == "double" else t, index=(0,))

    assert "0.008 MB moved at least" in tl.explain(scaled, x, x, grid=1)["cost"]
    with pytest.raises(tl.TileArgumentError, match="pass arrays, not signatures"):
        tl.explain(scaled, "f32[:]", "f32[:]", grid=1)


# ------------------------------------------------------------------------ simplify


def test_simplify_folds_constants_with_the_interpreter_semantics():
    out = np.zeros(4, np.float32)
    folding[1](out, T=4)
    # 2*3+1, int8 127+1 wraps to -128, NaN converts to 0, integer division by zero gives 0
    np.testing.assert_array_equal(out, np.float32(7 - 128 + 0 + 0))
    text = tl.explain(folding, "f32[:]", T=4, backend="interpret")["simplified"]
    for gone in ("mul", "floordiv", "convert", "nan"):
        assert gone not in text


def test_simplify_merges_pure_expressions_but_not_reads():
    simplified = tl.explain(cse_dce, "f32[:]", "f32[:]", T=4, backend="interpret")["simplified"]
    assert simplified.count("sqrt") == 1  # sqrt(a) + sqrt(a): computed once
    assert simplified.count("mul") == 2  # a * 2 and b * 2 differ: a and b are two reads
    assert simplified.count("= load") == 3  # reads are never merged (a store may sit between them)


def test_simplify_drops_dead_code_and_keeps_stores():
    tile_ir = tl.explain(cse_dce, "f32[:]", "f32[:]", T=4, backend="interpret")["tile_ir"]
    simplified = tl.explain(cse_dce, "f32[:]", "f32[:]", T=4, backend="interpret")["simplified"]
    assert "exp" in tile_ir and "exp" not in simplified  # `unused` and the read feeding it are gone
    assert "x 4:i64[]" in tile_ir and "x 4:i64[]" not in simplified
    assert tile_ir.count("store") == simplified.count("store") == 3  # stores are kept, even overwritten ones
    x = np.arange(8, dtype=np.float32)
    out = np.zeros(8, np.float32)
    cse_dce[1](x, out, T=4)
    np.testing.assert_allclose(out, np.concatenate([2 * np.sqrt(x[:4])] * 2), rtol=1e-6)


@tl.tile_kernel
def loops_with_and_without_effects(x, out, n, T: tl.Constant):
    waste = tl.zeros((T,), tl.float32)
    for k in tl.range(n):
        waste += tl.load(x, index=(k,), shape=(T,))  # a loop whose results are unused: dropped
    for k in tl.range(n):
        tl.store(out, tl.load(x, index=(k,), shape=(T,)) * 2.0, index=(k,))  # only a store: kept


def test_simplify_keeps_loops_with_stores_only():
    text = tl.explain(loops_with_and_without_effects, "f32[:]", "f32[:]", 3, T=4, backend="interpret")
    assert text["tile_ir"].count("range_loop") == 2
    assert text["simplified"].count("range_loop") == 1 and "store" in text["simplified"]
    x = np.arange(12, dtype=np.float32)
    out = np.zeros(12, np.float32)
    loops_with_and_without_effects[1](x, out, 3, T=4)
    np.testing.assert_array_equal(out, 2 * x)


# ------------------------------------------------------------------------ verifier

F4 = TileType((4,), float32)
ADD, MUL = PRIMITIVES["add"], PRIMITIVES["mul"]


def _program(params, eqns, results=()):
    return Program("broken", [f"p{i}" for i in range(len(params))], Block(list(params), list(eqns), list(results)), {})


def test_verifier_accepts_a_well_formed_program():
    x, y, z = Var(F4), Var(F4), Var(F4)
    verify(_program([x], [Eqn(ADD, (x, x), (y,), {}), Eqn(MUL, (y, x), (z,), {})]))


def test_verifier_rejects_use_before_def():
    x, y, z = Var(F4), Var(F4), Var(F4)
    program = _program([x], [Eqn(MUL, (y, x), (z,), {}), Eqn(ADD, (x, x), (y,), {})])
    with pytest.raises(tl.TileCompilerError, match=r"after my_pass in 'mul': Var\(f32\[4\]\) is used before it is"):
        verify(program, "my_pass")
    never = Var(F4)
    with pytest.raises(tl.TileCompilerError, match="used before it is defined"):
        verify(_program([x], [Eqn(ADD, (x, never), (y,), {})]))
    with pytest.raises(tl.TileCompilerError, match="used before it is defined"):
        verify(_program([x], [], results=[never]))


def test_verifier_rejects_wrong_output_type():
    x, y = Var(F4), Var(TileType((4,), int32))
    with pytest.raises(tl.TileCompilerError, match=r"outputs are \(i32\[4\]\) but the type rule gives \(f32\[4\]\)"):
        verify(_program([x], [Eqn(ADD, (x, x), (y,), {})]))
    with pytest.raises(tl.TileCompilerError, match=r"outputs are \(\) but the type rule gives \(f32\[\]\)"):
        verify(_program([x], [Eqn(PRIMITIVES["reduce_sum"], (x,), (), {"axis": 0})]))


def test_verifier_rejects_other_malformations():
    x, y = Var(F4), Var(F4)
    with pytest.raises(tl.TileCompilerError, match="defined twice"):
        verify(_program([x], [Eqn(ADD, (x, x), (y,), {}), Eqn(ADD, (x, x), (y,), {})]))
    bad_literal = Literal(np.zeros(4, np.float32), F4)
    with pytest.raises(tl.TileCompilerError, match="is not a scalar"):
        verify(_program([x], [Eqn(ADD, (x, bad_literal), (y,), {})]))
    w = Var(TileType((4,), int32))
    with pytest.raises(tl.TileCompilerError, match="the type rule rejects the inputs: add: operands must have one"):
        verify(_program([x, w], [Eqn(ADD, (x, w), (y,), {})]))


def test_verifier_rejects_a_broken_traced_program():
    args, constants = ("f32[:]", "f32[:]", 3), {"T": 8}
    program = trace(running, running.specialize(running.bind(args, constants))[0])
    verify(program)
    program.body.eqns.reverse()
    with pytest.raises(tl.TileCompilerError, match=r"after reorder in '\w+' at test_printer\.py:\d+: .* used before"):
        verify(program, "reorder")

    program = trace(running, running.specialize(running.bind(args, constants))[0])
    loop = next(e for e in program.body.eqns if e.prim is P.range_loop)
    body = loop.params["body"]
    body.results = [body.results[1], body.results[0], body.results[2]]  # still f32[8], f32[8], i32[]
    verify(program)  # swapping two results of one type is well formed (if wrong)
    body.results = [body.results[2], body.results[1], body.results[0]]
    with pytest.raises(tl.TileCompilerError, match="changes type"):
        verify(program, "swap")
