"""tl.dot and ``@`` against NumPy: tiled matmuls with a tl.range loop over K, sizes that are
not tile multiples, every operand dtype, and the documented accumulators (float32 for
16-bit floats, int32 for 8/16/32-bit ints, int64 for 64-bit ints, else the operands' dtype).

Integer references are exact (Python ints, then wrapped to the accumulator); float
references are computed in float64 and compared within K * eps(accumulator) * (|a| @ |b|).
"""

import re

import numpy as np
import pytest
from _reference import promote, wrap
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import tilelang as tl
from tilelang import testing as tlt
from tilelang._ir.primitives import tf32

TILES = st.tuples(st.integers(1, 9), st.integers(1, 9), st.integers(1, 9))  # BM, BN, BK


def accumulator(d):
    if d.kind == "f":
        return tl.float32 if d.bits < 32 else d
    return tl.int64 if d.bits == 64 else tl.int32


def _matmul(a, b, c, HOW: tl.Constant, ACC: tl.Constant, BM: tl.Constant, BN: tl.Constant, BK: tl.Constant):
    """c = a @ b (or c += a @ b when HOW == "init"); b is (N, K) when HOW == "bt", a is (K, M) when "at"."""
    i, j = tl.block_id(0), tl.block_id(1)
    acc = tl.load(c, index=(i, j), shape=(BM, BN)) if HOW == "init" else tl.zeros((BM, BN), ACC)
    for k in tl.range(0, tl.cdiv(b.shape[1 if HOW == "bt" else 0], BK)):
        if HOW == "at":
            x = tl.load(a, index=(k, i), shape=(BK, BM)).T
        else:
            x = tl.load(a, index=(i, k), shape=(BM, BK))
        if HOW == "bt":
            y = tl.load(b, index=(j, k), shape=(BN, BK)).T
        else:
            y = tl.load(b, index=(k, j), shape=(BK, BN))
        if HOW in ("acc", "init", "bt", "at"):
            acc = tl.dot(x, y, acc)
        elif HOW == "matmul":
            acc = acc + x @ y
        else:
            acc += tl.dot(x, y)
    tl.store(c, acc, index=(i, j))


matmul_kernel = tl.tile_kernel(_matmul)


def _operands(data, da, db, m, n, k):
    """Floats in [-4, 4] (and ints too, when they are promoted to a float); other ints over their whole range."""
    floats = promote(da, db).kind == "f"

    def draw(d, shape, label):
        if floats:
            return data.draw(tlt.arrays(d, shape, min_value=-4, max_value=4), label=label)
        return data.draw(tlt.arrays(d, shape), label=label)

    return draw(da, (m, k), "a"), draw(db, (k, n), "b")


@given(
    data=st.data(),
    da=tlt.dtypes("iuf"),
    same=st.booleans(),
    how=st.sampled_from(["acc", "matmul", "plus", "init", "bt", "at"]),
    tile=TILES,
)
def test_matmul(data, da, same, how, tile):
    db = da if same else data.draw(tlt.dtypes("iuf"), label="db")
    d = promote(da, db)
    acc = accumulator(d)
    bm, bn, bk = tile
    m, n, k = data.draw(tlt.shapes(tile, max_tiles=3), label="M, N, K")
    a, b = _operands(data, da, db, m, n, k)
    c = (
        data.draw(tlt.arrays(acc, (m, n), min_value=-4, max_value=4), label="c")
        if how == "init"
        else np.zeros((m, n), acc.np)
    )

    with np.errstate(over="ignore"):
        a_d, b_d = a.astype(d.np), b.astype(d.np)  # the operands promoted to one dtype
    rtol = atol = None
    if d.kind == "f":
        exact = a_d.astype(np.float64) @ b_d.astype(np.float64) + c.astype(np.float64)
        expected = exact.astype(acc.np)
        eps = float(np.finfo(acc.np).eps)
        rtol, atol = tlt.tolerance(acc)
        bound = np.abs(a_d.astype(np.float64)) @ np.abs(b_d.astype(np.float64)) + np.abs(c.astype(np.float64))
        atol += (k + 1) * eps * float(np.max(bound, initial=0))
    else:
        exact = a_d.astype(object) @ b_d.astype(object) + c.astype(object)
        expected = wrap(exact, acc)
    a_arg, b_arg = _transposed_args(how, a, b)

    tlt.check_kernel(
        matmul_kernel,
        (tl.cdiv(m, bm), tl.cdiv(n, bn)),
        args=(a_arg, b_arg, c),
        reference=lambda a, b, c: expected,
        rtol=rtol,
        atol=atol,
        HOW=how,
        ACC=acc,
        BM=bm,
        BN=bn,
        BK=bk,
    )


def _transposed_args(how, a, b):
    """The arrays the kernel takes: b as (N, K) for "bt", a as (K, M) for "at"."""
    return (np.ascontiguousarray(a.T) if how == "at" else a), (np.ascontiguousarray(b.T) if how == "bt" else b)


# tiles of at least one tensor-core fragment (16 x 16 of a, 16 x 8 of b), powers of two and not
MMA_TILES = st.sampled_from(
    [(16, 8, 16), (16, 16, 32), (32, 16, 16), (64, 32, 32), (48, 24, 40), (16, 64, 24), (128, 64, 16)]
)
MMA_KERNELS = {t: tl.tile_kernel(_matmul, num_threads=t, arch="sm_80") for t in (32, 64, 128, 256)}
WGMMA_KERNELS = {t: tl.tile_kernel(_matmul, num_threads=t, arch="sm_90a") for t in (128, 256)}


def pow2(n):
    return 1 << (n - 1).bit_length()


@given(
    data=st.data(),
    d=st.sampled_from([tl.float16, tl.bfloat16, tl.float8_e4m3fn, tl.float8_e5m2]),  # (float8: as float16s)
    how=st.sampled_from(["acc", "matmul", "init", "bt", "at"]),
    tile=MMA_TILES,
    threads=st.sampled_from(sorted(MMA_KERNELS)),
)
def test_matmul_on_tensor_cores(data, d, how, tile, threads):
    """16-bit float dots on mma.sync fragments (arch sm_80): warps split over m and n (or
    replicated where the tile is small), k padded to a power of two with zeros, arrays not
    tile multiples. The CPU backend computes each mma from the PTX ISA's fragment table, not
    from the layouts."""
    bm, bn, bk = tile
    largest = max(pow2(bm) * pow2(bk), pow2(bk) * pow2(bn), pow2(bm) * pow2(bn))
    threads = max(threads, largest // 64)  # (at most 64 elements of a tile per thread)
    thread_ir = _check_float_matmul(data, d, how, tile, MMA_KERNELS[threads])
    assert "mma[" in thread_ir and "wgmma[" not in thread_ir


def _float8_sums_atol(k: int, bound) -> float:
    """Hopper's float8 tensor cores keep ~13 bits of each k-step's sum (as cuBLAS's fast
    accumulation): 2^-12 of the largest sum of |a| |b| products per k-step of 32 (and one more)."""
    return (-(-k // 32) + 1) * 2.0**-12 * float(np.max(bound, initial=0))


def _check_float_matmul(data, d, how, tile, kernel) -> str:
    """A dot of ``d`` operands (16-bit floats or float32) on arrays not tile multiples against
    float64 (a rounding bound for float32 accumulation); its thread IR."""
    bm, bn, bk = tile
    m, n, k = data.draw(tlt.shapes(tile, max_tiles=2, slack=3), label="M, N, K")
    a, b = _operands(data, d, d, m, n, k)
    c = data.draw(tlt.arrays(tl.float32, (m, n), min_value=-4, max_value=4), label="c")
    if how != "init":
        c = np.zeros((m, n), np.float32)
    exact = a.astype(np.float64) @ b.astype(np.float64) + c
    bound = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)) + np.abs(c)
    rtol, atol = tlt.tolerance(tl.float32)
    atol += (k + 1) * float(np.finfo(np.float32).eps) * float(np.max(bound, initial=0))
    if d.is_float8:
        atol += _float8_sums_atol(k, bound)
    args = (*_transposed_args(how, a, b), c)
    tlt.check_kernel(
        kernel, (tl.cdiv(m, bm), tl.cdiv(n, bn)), args=args,
        reference=lambda *_: exact.astype(np.float32), rtol=rtol, atol=atol,
        HOW=how, ACC=tl.float32, BM=bm, BN=bn, BK=bk,
    )  # fmt: skip
    return tl.explain(kernel, *args, HOW=how, ACC=tl.float32, BM=bm, BN=bn, BK=bk, backend="cpu")["thread_ir"]


# (tile, threads): 8 x 8 results a thread (64x64 on 64 threads, 128x64 on 128, 128x128 on 256), 4 x 4 and
# fewer, tiles not powers of two (48x40x12, 20x12x6: k not a multiple of the 4 read at once),
# k under 4 (2: no 16-byte rows to copy ahead)
FMA_TILES = st.sampled_from([
    ((64, 64, 16), 64), ((128, 64, 8), 128), ((32, 32, 8), 64), ((48, 40, 12), 128), ((20, 12, 6), 32),
    ((16, 32, 2), 32), ((128, 128, 16), 256),
])  # fmt: skip
FMA_KERNELS = {t: tl.tile_kernel(_matmul, num_threads=t) for t in (32, 64, 128, 256)}


@given(data=st.data(), how=st.sampled_from(["acc", "matmul", "init", "bt", "at"]), case=FMA_TILES)
def test_float32_matmul_on_cuda_cores(data, how, case):
    """float32 dots on CUDA cores (``lower_dot._lower_fma``): each thread a register block of
    the result, both operands read from shared memory 4 k-steps at a time with 16-byte
    loads (along k for ``a`` and ``w.T``, across a thread's 4 columns for ``b`` and rows for
    ``x.T``); in the loop the tiles are copied ahead with cp.async (``w.T``'s tile
    swizzled), the CPU backend landing each copy only at its wait."""
    tile, threads = case
    thread_ir = _check_float_matmul(data, tl.float32, how, tile, FMA_KERNELS[threads])
    assert ("async shared" in thread_ir) == (tile[2] >= 4)
    assert re.search(r"= shared \S+ lanes=4$", thread_ir, re.M)


def _tf32_matmul(a, b, c, HOW: tl.Constant, BM: tl.Constant, BN: tl.Constant, BK: tl.Constant):
    """c (+)= a @ b with ``precision="tf32"``; b is (N, K) when HOW == "bt", a is (K, M) when "at"."""
    i, j = tl.block_id(0), tl.block_id(1)
    acc = tl.load(c, index=(i, j), shape=(BM, BN)) if HOW == "init" else tl.zeros((BM, BN), tl.float32)
    for k in tl.range(0, tl.cdiv(b.shape[1 if HOW == "bt" else 0], BK)):
        x = tl.load(a, index=(k, i), shape=(BK, BM)).T if HOW == "at" else tl.load(a, index=(i, k), shape=(BM, BK))
        y = tl.load(b, index=(j, k), shape=(BN, BK)).T if HOW == "bt" else tl.load(b, index=(k, j), shape=(BK, BN))
        acc = tl.dot(x, y, acc, precision="tf32")
    tl.store(c, acc, index=(i, j))


# (tile, threads): one fragment, warps over m and n, k padded (12 of 16), tiles not powers of
# two, 2 x 8 fragments a warp (128x128 on 256 threads); under a fragment (8x8x4: CUDA cores,
# the operands rounded alike)
TF32_TILES = st.sampled_from([
    ((16, 8, 8), 32), ((32, 32, 16), 64), ((64, 32, 32), 128), ((48, 24, 12), 64), ((128, 128, 16), 256),
    ((8, 8, 4), 32),
])  # fmt: skip
TF32_KERNELS = {t: tl.tile_kernel(_tf32_matmul, num_threads=t) for t in (32, 64, 128, 256)}


@given(data=st.data(), how=st.sampled_from(["acc", "init", "bt", "at"]), case=TF32_TILES)
def test_tf32_matmul(data, how, case):
    """``precision="tf32"``: the operands rounded to TF32 (``cvt.rna``), the products summed in
    float32, against float64 products of the rounded operands. On tensor cores
    (``mma.sync.m16n8k8``: the CPU backend computes each from the PTX ISA's fragment table)
    from swizzled tiles copied ahead; a tile under one fragment on CUDA cores, rounded alike."""
    (bm, bn, bk), threads = case
    m, n, k = data.draw(tlt.shapes((bm, bn, bk), max_tiles=2, slack=3), label="M, N, K")
    a, b = _operands(data, tl.float32, tl.float32, m, n, k)
    c = data.draw(tlt.arrays(tl.float32, (m, n), min_value=-4, max_value=4), label="c")
    if how != "init":
        c = np.zeros((m, n), np.float32)
    ta, tb = (tf32(x).astype(np.float64) for x in (a, b))
    exact = ta @ tb + c
    rtol, atol = tlt.tolerance(tl.float32)
    atol += (k + 1) * float(np.finfo(np.float32).eps) * float(np.max(np.abs(ta) @ np.abs(tb) + np.abs(c), initial=0))
    args = (*_transposed_args(how, a, b), c)
    kernel = TF32_KERNELS[threads]
    tlt.check_kernel(
        kernel, (tl.cdiv(m, bm), tl.cdiv(n, bn)), args=args,
        reference=lambda *_: exact.astype(np.float32), rtol=rtol, atol=atol, HOW=how, BM=bm, BN=bn, BK=bk,
    )  # fmt: skip
    e = tl.explain(kernel, *args, HOW=how, BM=bm, BN=bn, BK=bk, backend="cpu")
    on_tensor_cores = bm >= 16 and bk >= 8
    assert ("m16n8k8.tf32" in e["thread_ir"]) == on_tensor_cores
    assert " tf32 " in e["thread_ir"] and ("rounded to TF32" in e["layouts"])


def _operand_forms(a, b, c, FORM: tl.Constant, BM: tl.Constant, BK: tl.Constant):
    """``c = x.T @ x`` (one copied tile read as both operands) or ``(2 * x.T) @ y`` (an
    operand computed in the loop, the other copied), x a (BK, BM) block of ``a``."""
    i = tl.block_id(0)
    acc = tl.zeros((BM, BM), tl.float32)
    for k in tl.range(0, tl.cdiv(a.shape[0], BK)):
        x = tl.load(a, index=(k, i), shape=(BK, BM))
        y = x if FORM == "xt_x" else tl.load(b, index=(k, i), shape=(BK, BM))
        acc = tl.dot(x.T if FORM == "xt_x" else x.T * 2.0, y, acc)
    tl.store(c, acc, index=(i, i))


@pytest.mark.parametrize("stages", [1, 2, 4])
@pytest.mark.parametrize("form", ["xt_x", "computed"])
def test_float32_dot_stages_and_operand_forms(form, stages):
    """float32 dots on CUDA cores with the tiles copied 0 to 3 iterations ahead, a copied
    tile read as both operands, and a computed operand beside a copied one."""
    kernel = tl.tile_kernel(_operand_forms, num_threads=128, num_stages=stages)
    rng = np.random.default_rng(stages)
    a, b = (rng.uniform(-4, 4, (70, 100)).astype(np.float32) for _ in range(2))
    x, y = a.astype(np.float64), (a if form == "xt_x" else b).astype(np.float64)
    want = np.zeros((100, 100), np.float32)
    for i in range(2):
        block = slice(64 * i, 64 * i + 64)
        want[block, block] = (x[:, block].T * (1 if form == "xt_x" else 2)) @ y[:, block]
    bound = 71 * float(np.finfo(np.float32).eps) * float(np.max(np.abs(x).T @ np.abs(y))) * 2
    tlt.check_kernel(
        kernel, 2, args=(a, b, np.zeros((100, 100), np.float32)), reference=lambda *_: want, rtol=0, atol=bound,
        FORM=form, BM=64, BK=16,
    )  # fmt: skip


# (tile, threads): warpgroups over m, over n, several 64-row blocks or instructions each,
# k padded (24, 40), tiles not powers of two (m 100, n 48), K-major and MN-major operands,
# 128 accumulators a thread (m64n256)
WGMMA_TILES = st.sampled_from([
    ((64, 16, 16), 128), ((64, 32, 32), 128), ((64, 64, 24), 128), ((128, 32, 16), 128), ((100, 48, 40), 128),
    ((64, 64, 64), 256), ((128, 64, 32), 256), ((128, 128, 16), 256), ((128, 256, 16), 256),
])  # fmt: skip


@given(
    data=st.data(),
    d=st.sampled_from([tl.float16, tl.bfloat16, tl.float8_e4m3fn, tl.float8_e5m2]),
    how=st.sampled_from(["acc", "matmul", "init", "bt", "at"]),
    case=WGMMA_TILES,
)
def test_matmul_on_warpgroup_tensor_cores(data, d, how, case):
    """16-bit float dots on wgmma (arch sm_90a): operands copied ahead into swizzled shared
    tiles (or stored there from registers), read K-major or MN-major (a transposed operand
    flips which); float8 ones on wgmma's float8 instructions where both are K-major ("bt")
    and k is at least 32, else as float16s. The CPU backend reads each operand element
    through the descriptor's fields as the PTX ISA's canonical layouts place it, and each
    accumulator from the ISA's fragment table, independently of how the lowering wrote them."""
    tile, threads = case
    # (128 accumulators a thread are the wgmma accumulator's alone: loaded, the initial
    # 128x256 tile is an ordinary one, limited to 64 a thread)
    assume(not (how == "init" and tile[0] * tile[1] // threads > 64))
    thread_ir = _check_float_matmul(data, d, how, tile, WGMMA_KERNELS[threads])
    assert "wgmma[" in thread_ir and "ldmatrix" not in thread_ir
    words = min(pow2(tile[0]), pow2(tile[1])) * pow2(tile[2]) >= 4 * threads  # (each operand four elements a thread)
    eight = d.is_float8 and how == "bt" and pow2(tile[2]) >= 32 and words
    if d.is_float8:  # (its own instructions, or float16's)
        assert (f"k32.{d.short}]" in thread_ir) == eight and (".f16]" in thread_ir) == (not eight)


E4M3, E5M2 = tl.float8_e4m3fn, tl.float8_e5m2


@pytest.mark.parametrize("da, db", [(E4M3, E4M3), (E5M2, E5M2), (E4M3, E5M2), (E5M2, E4M3)])
@pytest.mark.parametrize("how, threads", [("bt", 128), ("bt", 256), ("acc", 128), ("at", 128)])
def test_float8_dots_take_the_float8_tensor_cores_where_both_operands_are_k_major(da, db, how, threads):
    """x @ w.T of float8 tiles (either format, mixed too) runs wgmma's own m64nNk32 float8
    instructions (the PTX names both formats); a row-major b or a transposed a (read
    MN-major, which 8-bit operands cannot be) makes the dot a float16 one, its operands
    converted exactly (the layouts stage shows the conversions). Against float64 on the CPU
    backend, which reads the bytes through the descriptors; a non-multiple of the tile."""
    m, n, k, tile = 100, 136, 200, (64, 64, 64) if threads == 128 else (128, 64, 64)
    g = np.random.default_rng(7)
    a, b = (g.uniform(-4, 4, s).astype(x.np) for s, x in (((m, k), da), ((k, n), db)))
    args = (*_transposed_args(how, a, b), np.zeros((m, n), np.float32))
    kernel, consts = WGMMA_KERNELS[threads], dict(HOW=how, ACC=tl.float32, BM=tile[0], BN=tile[1], BK=tile[2])
    bound = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    tlt.check_kernel(kernel, (tl.cdiv(m, tile[0]), tl.cdiv(n, tile[1])), args=args,
                     reference=lambda *_: (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32),
                     rtol=0, atol=(k // 32 + 2) * 2.0**-12 * bound.max(), **consts)  # fmt: skip
    e = tl.explain(kernel, *args, **consts, backend="cuda")
    fp8 = f"wgmma.mma_async.sync.aligned.m64n64k32.f32.{da.short[2:]}.{db.short[2:]}"
    assert (fp8 in e["ptx"]) == (how == "bt") and ("k16.f32.f16.f16" in e["ptx"]) == (how != "bt")
    assert ("convert[dtype=float16]" in e["layouts"]) == (how != "bt")
    assert "k32" in e["layouts"] if how == "bt" else "k16.f16" in e["layouts"]


def test_float8_dots_before_hopper_are_float16_dots():
    """On sm_80 (mma.sync has no float8 shape tilelang uses) x @ w.T of float8 runs mma.sync on float16s."""
    a, w = np.ones((64, 64), tl.float8_e4m3fn.np), np.ones((64, 64), tl.float8_e4m3fn.np)
    c = np.zeros((64, 64), np.float32)
    kernel = MMA_KERNELS[128]
    ptx = tl.explain(kernel, a, w, c, HOW="bt", ACC=tl.float32, BM=64, BN=64, BK=64, backend="cuda")["ptx"]
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx and "wgmma" not in ptx
    tlt.check_kernel(kernel, (1, 1), args=(a, w, c), reference=lambda *_: np.full((64, 64), 64, np.float32),
                     HOW="bt", ACC=tl.float32, BM=64, BN=64, BK=64)  # fmt: skip


@pytest.mark.parametrize("d, tile, mma", [
    (tl.float16, (16, 8, 16), True), (tl.bfloat16, (32, 32, 16), True), (tl.float32, (16, 8, 16), False),
    (tl.float16, (8, 8, 16), False), (tl.float16, (16, 8, 8), False), (tl.int8, (16, 16, 32), False),
])  # fmt: skip
def test_which_dots_take_tensor_cores(d, tile, mma):
    """16-bit floats with at least one fragment take mma.sync; other dtypes and smaller tiles the CUDA cores."""
    bm, bn, bk = tile
    acc = accumulator(d)
    a, b, c = (np.zeros(s, t.np) for s, t in (((bm, bk), d), ((bk, bn), d), ((bm, bn), acc)))
    thread_ir = tl.explain(matmul_kernel, a, b, c, HOW="acc", ACC=acc, BM=bm, BN=bn, BK=bk, backend="cpu")["thread_ir"]
    assert ("mma[" in thread_ir) == mma


@pytest.mark.parametrize("d", [tl.float8_e4m3fn, tl.float16, tl.bfloat16, tl.float32, tl.float64, tl.int8])
def test_dot_accumulates_in_the_documented_dtype(d):
    """Sums that would overflow or round in the operand dtype do not: 16-bit floats accumulate in
    float32 (64 products of 64*64 overflow float16), int8 in int32."""
    a = np.full((4, 64), 64 if d.kind == "f" else 100, d.np)
    b = np.full((64, 5), 64 if d.kind == "f" else 100, d.np)
    acc = accumulator(d)
    expected = np.full((4, 5), 64 * (64 * 64 if d.kind == "f" else 100 * 100), acc.np)
    tlt.check_kernel(
        matmul_kernel,
        (1, 1),
        args=(a, b, np.zeros((4, 5), acc.np)),
        reference=lambda a, b, c: expected,
        HOW="acc",
        ACC=acc,
        BM=4,
        BN=5,
        BK=64,
    )


@tl.tile_kernel
def bad_dot_kernel(a, out, WHAT: tl.Constant):
    x = tl.load(a, offset=(0, 0), shape=(4, 4))
    if WHAT == "acc_dtype":
        r = tl.dot(x, x, tl.zeros((4, 4), tl.float16))
    elif WHAT == "acc_shape":
        r = tl.dot(x, x, tl.zeros((4, 5), tl.float32))
    elif WHAT == "inner":
        r = tl.dot(x, tl.load(a, offset=(0, 0), shape=(3, 4)))
    elif WHAT == "one_d":
        r = tl.dot(tl.reshape(x, (16,)), x)
    elif WHAT == "scalar":
        r = tl.dot(2.0, 3.0)
    elif WHAT == "precision":
        r = tl.dot(x, x, precision="fp16")
    elif WHAT == "tf32_of_halves":  # (a is float16)
        r = tl.dot(x, x, precision="tf32")
    else:
        r = tl.dot(x != 0, x != 0)
    tl.store(out, r, offset=(0, 0))


@pytest.mark.parametrize(
    "what, error",
    [
        ("acc_dtype", tl.TileTypeError),
        ("acc_shape", tl.TileTypeError),
        ("inner", tl.TileShapeError),
        ("one_d", tl.TileShapeError),
        ("scalar", tl.TileTypeError),
        ("precision", tl.TileValueError),
        ("tf32_of_halves", tl.TileTypeError),
        ("bool", tl.TileTypeError),
    ],
)
def test_dot_errors(what, error):
    with pytest.raises(error):
        bad_dot_kernel[1](np.ones((4, 4), np.float16), np.zeros((4, 4), np.float32), WHAT=what)


# The interpreter is the reference; TILELANG_TEST_BACKENDS=interpret,cuda adds the GPU on a machine with one.
BACKENDS = ("interpret", "cpu") + (("cuda",) if "cuda" in tlt.default_backends() else ())


@tl.tile_kernel
def dot_acc_kernel(a, b, c, out, SRC: tl.Constant, M: tl.Constant, N: tl.Constant, K: tl.Constant):
    """out = a @ b + acc, with an acc that is not in the dot's result layout (it is converted
    between the dot's staging of a and b in shared memory and their reads)."""
    x, y = tl.load(a, index=(0, 0), shape=(M, K)), tl.load(b, index=(0, 0), shape=(K, N))
    if SRC == "load":
        acc = tl.load(c, index=(0, 0), shape=(M, N))
    elif SRC == "transposed":  # c holds acc.T
        acc = tl.load(c, index=(0, 0), shape=(N, M)).T
    elif SRC == "row":
        acc = tl.broadcast_to(tl.load(c, index=(0, 0), shape=(1, N)), (M, N))
    else:  # a scan's result: its own layout, through shared memory
        acc = tl.cumsum(tl.load(c, index=(0, 0), shape=(M, N)), axis=1)
    tl.store(out, tl.dot(x, y, acc), index=(0, 0))


@pytest.mark.parametrize(
    "src, d, shape",
    [
        ("load", tl.float32, (16, 16, 16)),
        ("load", tl.float16, (32, 16, 8)),
        ("load", tl.int8, (16, 32, 16)),
        ("transposed", tl.float32, (16, 8, 32)),
        ("row", tl.float32, (8, 16, 16)),
        ("cumsum", tl.float32, (16, 16, 16)),
    ],
)
def test_dot_with_an_accumulator_in_another_layout(src, d, shape):
    """The accumulator's conversion went through the shared buffer the operands were just
    staged in and overwrote them (issue 19, item 16): 253 of 256 elements were wrong."""
    m, n, k = shape
    rng = np.random.default_rng(0)
    acc_dtype = accumulator(d)
    a, b = rng.integers(-3, 4, (m, k)).astype(d.np), rng.integers(-3, 4, (k, n)).astype(d.np)
    c = rng.integers(-3, 4, (n, m) if src == "transposed" else (m, n)).astype(acc_dtype.np)
    acc = {"load": c, "transposed": c.T, "row": c[:1], "cumsum": np.cumsum(c, axis=1)}[src]
    expected = (a.astype(np.int64) @ b.astype(np.int64) + acc).astype(acc_dtype.np)
    tlt.check_kernel(
        dot_acc_kernel, 1, args=(a, b, c, np.zeros((m, n), acc_dtype.np)), reference=lambda *_: expected,
        backends=BACKENDS, SRC=src, M=m, N=n, K=k,
    )  # fmt: skip


@pytest.mark.parametrize("d, tile, threads, plan", [
    (tl.float16, (128, 128, 32), 256, "tensor cores, mma.sync.m16n8k16.f16: 4 x 2 warps (m x n), each 2 x 8 "
                                      "fragments of 16x8, 2 k-steps of 16"),
    (tl.bfloat16, (16, 8, 16), 64, "tensor cores, mma.sync.m16n8k16.bf16: 1 x 1 warps (m x n), 2 replicating, "
                                   "each 1 x 1 fragments of 16x8, 1 k-steps of 16"),
    (tl.float32, (32, 32, 8), 64, "CUDA cores (FFMA from shared memory): float32, each thread 4 x 4 results, "
                                  "4 k-steps a read"),
    (tl.float16, (8, 8, 16), 32, "CUDA cores (FFMA from shared memory): tiles under one fragment"),
    (tl.float16, (128, 128, 32), "sm_90a", "tensor cores, wgmma.m64n128k16.f16 (sm_90a): 2 x 1 warpgroups (m x n), "
                                           "each 1 x 1 instructions of 64x128, 2 k-steps of 16"),
])  # fmt: skip
def test_explain_shows_each_dots_plan(d, tile, threads, plan):
    """The layouts stage says under each dot how it will be lowered."""
    bm, bn, bk = tile
    kernel = WGMMA_KERNELS[256] if threads == "sm_90a" else MMA_KERNELS[threads]
    a, b, c = (np.zeros(s, t.np) for s, t in (((bm, bk), d), ((bk, bn), d), ((bm, bn), accumulator(d))))
    layouts = tl.explain(kernel, a, b, c, HOW="acc", ACC=accumulator(d), BM=bm, BN=bn, BK=bk, backend="cpu")["layouts"]
    assert plan in layouts


def _small_dot(a, b, c, BM: tl.Constant, BN: tl.Constant, BK: tl.Constant, TB: tl.Constant):
    x = tl.load(a, index=(0, 0), shape=(BM, BK))
    y = tl.load(b, index=(0, 0), shape=(BN, BK)).T if TB else tl.load(b, index=(0, 0), shape=(BK, BN))
    tl.store(c, tl.dot(x, y), index=(0, 0))


# a warpgroup's share 8 columns wide (no swizzled shared layout for its operand), or an operand of
# fewer than two elements a thread (its words cannot go to shared memory whole): mma.sync instead
@pytest.mark.parametrize("threads, tile", [
    (128, (64, 8, 16)), (256, (64, 16, 16)), (256, (128, 16, 16)), (512, (64, 32, 16)), (512, (128, 32, 16)),
])  # fmt: skip
@pytest.mark.parametrize("tb", [0, 1])
def test_dots_too_small_for_warpgroups_take_mma_sync(threads, tile, tb):
    """They were planned on wgmma, which then failed to compile (TileCompilerError)."""
    bm, bn, bk = tile
    rng = np.random.default_rng(bm + bn + threads + tb)
    a = rng.integers(-3, 4, (bm, bk)).astype(np.float16)
    b = rng.integers(-3, 4, (bn, bk) if tb else (bk, bn)).astype(np.float16)
    c = np.zeros((bm, bn), np.float32)
    kernel = tl.tile_kernel(_small_dot, num_threads=threads, arch="sm_90a")
    assert "mma.sync.m16n8k16.f16" in tl.explain(kernel, a, b, c, BM=bm, BN=bn, BK=bk, TB=tb, backend="cpu")["layouts"]
    kernel[1](a, b, c, BM=bm, BN=bn, BK=bk, TB=tb, backend="cpu")
    np.testing.assert_array_equal(c, a.astype(np.float64) @ (b.T if tb else b).astype(np.float64))  # exact: small ints


def test_only_tensor_core_dots_ask_the_gpu_for_its_arch(monkeypatch):
    """A kernel names no arch: its dots' strategy depends on the GPU's (sm_90a on Hopper), and
    asking the driver costs ~0.15 s a process, so kernels without a 16-bit dot never ask."""
    from tilelang import kernel as kernel_module

    asked = []
    monkeypatch.setattr(kernel_module, "default_arch", lambda: asked.append(1) or "sm_90a")

    def matmul(a, b, c):
        tl.store(
            c, tl.dot(tl.load(a, index=(0, 0), shape=(64, 16)), tl.load(b, index=(0, 0), shape=(16, 16))), index=(0, 0)
        )

    for d, wanted in (("f32", []), ("f16", [1])):
        tl.explain(tl.tile_kernel(matmul, num_threads=128), f"{d}[:, :]", f"{d}[:, :]", "f32[:, :]", backend="cpu")
        assert asked == wanted, d


def _two_dots(x, y, z, out, BM: tl.Constant, BK: tl.Constant, BN: tl.Constant, BD: tl.Constant):
    """out = (x @ y).astype(x.dtype) @ z: the second dot's ``a`` is the first's result."""
    i = tl.block_id(0)
    s = tl.dot(tl.load(x, index=(i, 0), shape=(BM, BK)), tl.load(y, index=(0, 0), shape=(BK, BN)))
    o = tl.dot(s.astype(x.dtype), tl.load(z, index=(0, 0), shape=(BN, BD)))
    tl.store(out, o, index=(i, 0))


TWO_DOTS = {t: tl.tile_kernel(_two_dots, num_threads=t, arch="sm_90a") for t in (128, 256)}


@settings(max_examples=25, deadline=None)
@given(
    data=st.data(),
    d=st.sampled_from([tl.float16, tl.bfloat16]),
    case=st.sampled_from([
        ((64, 16, 16, 16), 128), ((64, 32, 64, 32), 128), ((64, 64, 48, 64), 128), ((128, 32, 128, 16), 128),
        ((128, 16, 64, 64), 256), ((128, 64, 256, 32), 256), ((64, 32, 32, 32), 256), ((256, 16, 32, 64), 256),
    ]),
)  # fmt: skip
def test_a_dot_of_a_dots_result_reads_it_from_registers(data, d, case):
    """Attention's ``p @ v``: the second dot's ``a`` is the first's accumulator, rounded to 16
    bits. Where every warpgroup holds whole rows of it (the dots split m alike), wgmma reads
    it from those registers as its fragments (``RegisterTile``: no shared store, no fence, no
    barrier); else (a 64-row tile over two warpgroups) it is stored to a swizzled tile. The
    CPU backend reads each register fragment from the PTX ISA's table, not the lowering's.
    A k extent that is not a multiple of 16 (48) is zero-padded."""
    (bm, bk, bn, bd), threads = case
    m = data.draw(st.integers(1, 2 * bm), label="m")
    x, y, z = (data.draw(tlt.arrays(d, s, min_value=-1, max_value=1)) for s in ((m, bk), (bk, bn), (bn, bd)))
    out = np.full((m, bd), np.nan, np.float32)
    kernel = TWO_DOTS[threads]
    e = tl.explain(kernel, x, y, z, out, BM=bm, BK=bk, BN=bn, BD=bd, backend="cpu")
    registers = bm // 64 >= threads // 128  # (both dots split their m over the warpgroups)
    dots = [line for line in e["thread_ir"].splitlines() if "wgmma[" in line]
    assert len(dots) == 2 and (not dots[1].split("] ", 1)[1].startswith("swizzled_")) == registers, dots
    assert all(dot.endswith(" -") for dot in dots)  # no accumulator: the CPU's wgmma adds to nothing
    assert ("a from its registers" in e["layouts"]) == registers  # (the plan explain shows says so)
    kernel[(tl.cdiv(m, bm),)](x, y, z, out, BM=bm, BK=bk, BN=bn, BD=bd, backend="cpu")
    p = (x.astype(np.float64) @ y.astype(np.float64)).astype(np.float32).astype(d.np).astype(np.float64)
    want = p @ z.astype(np.float64)
    eps = np.finfo(np.float32).eps
    bound = (
        (bk + bn) * eps * (np.abs(x.astype(np.float64)) @ np.abs(y.astype(np.float64)) @ np.abs(z.astype(np.float64)))
    )
    bound += 2.0 ** -(10 if d == tl.float16 else 7) * (np.abs(p) @ np.abs(z.astype(np.float64)))  # p's rounding
    assert np.all(np.abs(out - want) <= bound + 1e-6)


def _independent_dots(x, y, z, w, out, out2, BM: tl.Constant, BK: tl.Constant, BN: tl.Constant):
    i = tl.block_id(0)
    s = tl.dot(tl.load(x, index=(i, 0), shape=(BM, BK)), tl.load(y, index=(0, 0), shape=(BK, BN)))
    t = tl.dot(tl.load(z, index=(i, 0), shape=(BM, BK)), tl.load(w, index=(0, 0), shape=(BK, BN)))
    tl.store(out, s * 2, index=(i, 0))
    tl.store(out2, t, index=(i, 0))


INDEPENDENT_DOTS = tl.tile_kernel(_independent_dots, num_threads=128, arch="sm_90a")


@pytest.mark.parametrize("d", [tl.float16, tl.bfloat16])
def test_a_product_is_waited_for_where_its_result_is_needed(d):
    """Two wgmma products that do not read each other: both issued, then ``wait_group 1``
    before the first result is read (the second still in flight), ``wait_group 0`` before
    the second's; the second's operands are stored for it while the first runs. Values as
    NumPy's on the CPU backend."""
    rng = np.random.default_rng(7)
    x, y, z, w = (rng.uniform(-1, 1, shape).astype(d.np) for shape in ((100, 32), (32, 64), (100, 32), (32, 64)))
    out, out2 = np.full((100, 64), np.nan, np.float32), np.full((100, 64), np.nan, np.float32)
    e = tl.explain(INDEPENDENT_DOTS, x, y, z, w, out, out2, BM=64, BK=32, BN=64, backend="cpu")
    lines = e["thread_ir"].splitlines()
    order = [line.split()[0] if "wgmma_wait" in line else "P" for line in lines if "wgmma" in line]
    first = next(n for n, line in enumerate(lines) if "= wgmma[" in line)
    assert order == ["P", "P", "wgmma_wait", "wgmma_wait"], order
    assert "wgmma_wait 1" in e["thread_ir"] and any("shared swizzled" in line for line in lines[first:]), lines
    INDEPENDENT_DOTS[(2,)](x, y, z, w, out, out2, BM=64, BK=32, BN=64, backend="cpu")
    for got, a, b, k in ((out, x, y, 2), (out2, z, w, 1)):
        want = k * (a.astype(np.float64) @ b.astype(np.float64))
        bound = 32 * np.finfo(np.float32).eps * k * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))
        assert np.all(np.abs(got - want) <= bound + 1e-30)


def _staged_in_a_loop(x, y, out, BM: tl.Constant, BK: tl.Constant, BN: tl.Constant):
    acc = tl.zeros((BM, BN), tl.float32)
    for k in tl.range(0, tl.cdiv(x.shape[1], BK)):
        a = tl.load(x, index=(0, k), shape=(BM, BK)) * 2  # (computed: stored for the tensor cores each iteration)
        acc = tl.dot(a, tl.load(y, index=(k, 0), shape=(BK, BN)) * 2, acc)
    tl.store(out, acc, index=(0, 0))


STAGED_IN_A_LOOP = tl.tile_kernel(_staged_in_a_loop, num_threads=256, arch="sm_90a")


def test_a_product_is_done_before_the_barrier_its_tiles_are_reused_after():
    """Each iteration stores its operands into the same shared tiles; past the body's last
    barrier the other warpgroup may already store the next iteration's, so the product is
    waited for before that barrier, not after it (a thread's own wait says nothing of the
    other warpgroup's product)."""
    x, y = np.ones((128, 40), np.float16), np.full((40, 64), 0.5, np.float16)
    out = np.full((128, 64), np.nan, np.float32)
    e = tl.explain(STAGED_IN_A_LOOP, x, y, out, BM=128, BK=16, BN=64, backend="cpu")
    loop = e["thread_ir"].split("    for k", 1)[1].splitlines()[1:]
    body = [line.strip() for line in loop if line.startswith(" " * 8)]  # (its statements, to the next)
    waits = [n for n, line in enumerate(body) if line.startswith("wgmma_wait")]
    assert body[-2] == "barrier" and body[-1].startswith("next") and waits and max(waits) < len(body) - 2, body
    STAGED_IN_A_LOOP[(1,)](x, y, out, BM=128, BK=16, BN=64, backend="cpu")
    np.testing.assert_array_equal(out, np.full((128, 64), 4 * 40 * 0.5, np.float32))


def _last_product_wins(x, y, w, out, out2, BM: tl.Constant, BK: tl.Constant, BN: tl.Constant):
    a = tl.load(x, index=(0, 0), shape=(BM, BK))
    s, t, total = tl.zeros((BM, BN), tl.float32), tl.zeros((BM, BN), tl.float32), tl.zeros((BM,), tl.float32)
    for _ in tl.range(0, 3):
        total = total + tl.max(s, axis=1) * tl.min(t, axis=1)  # (the iteration before's product, twice)
        p = tl.dot(a, tl.load(y, index=(0, 0), shape=(BK, BN)))
        s, t = p, p  # carried into two parameters
    u = tl.zeros((BM, BN), tl.float32)
    for _ in tl.range(0, 3):
        total = total + tl.sum(tl.dot(a, tl.load(w, index=(0, 0), shape=(BK, BN))), axis=1)
        u = tl.dot(a, tl.load(y, index=(0, 0), shape=(BK, BN)))  # carried, its parameter never read
    tl.store(out, s + t + u, index=(0, 0))
    tl.store(out2, total, index=(0,))


LAST_PRODUCT_WINS = tl.tile_kernel(_last_product_wins, num_threads=128, num_stages=1, arch="sm_90a")


def _previous_and_current(q, k, v, out, out2, n, BM: tl.Constant, BN: tl.Constant, D: tl.Constant):
    qt = tl.load(q, index=(0, 0), shape=(BM, D))
    prev, cur, total = tl.zeros((BM, D), tl.float32), tl.zeros((BM, D), tl.float32), tl.zeros((BM,), tl.float32)
    for j in tl.range(0, n):
        s = tl.dot(qt, tl.load(k, index=(j, 0), shape=(BN, D)).T)
        total = total + tl.sum(s, axis=1)
        prev, cur = cur, tl.dot(s.astype(tl.float16), tl.load(v, index=(j, 0), shape=(BN, D)))  # (back edge reads cur)
    tl.store(out, prev + cur, index=(0, 0))
    tl.store(out2, total, index=(0,))


PREVIOUS_AND_CURRENT = tl.tile_kernel(_previous_and_current, num_threads=128, num_stages=2, arch="sm_90a")


def test_products_the_next_iteration_could_not_wait_for_alone_complete_in_their_own():
    """A product a loop carries stays in flight into the next iteration only where that is
    safe for ptxas: carried into one parameter (two would copy its registers on the back edge
    while it runs), and completed there by a wait with nothing later left in flight (ptxas
    follows no partial wait around a loop). Else it completes in its own iteration, as
    before: nothing is serialized. Values as NumPy's on the CPU backend."""
    rng = np.random.default_rng(3)
    x, y, w = (rng.uniform(-1, 1, shape).astype(np.float16) for shape in ((64, 16), (16, 64), (16, 64)))
    out, out2 = np.full((64, 64), np.nan, np.float32), np.full((64,), np.nan, np.float32)
    e = tl.explain(LAST_PRODUCT_WINS, x, y, w, out, out2, BM=64, BK=16, BN=64)
    for body in (body.split("next (")[0] for body in e["thread_ir"].split("    for k")[1:]):
        waits = [line.strip() for line in body.splitlines() if "wgmma" in line]
        assert waits[-1].startswith("wgmma_wait 0 acc") and "wgmma_wait 0 c" not in body, body  # (in its iteration)
    assert "serialized" not in e["resources"] and "injected" not in e["resources"], e["resources"]
    LAST_PRODUCT_WINS[(1,)](x, y, w, out, out2, BM=64, BK=16, BN=64, backend="cpu")
    p = x.astype(np.float64) @ y.astype(np.float64)
    q = x.astype(np.float64) @ w.astype(np.float64)
    want = 0.0 + 2 * (p.max(axis=1) * p.min(axis=1)) + 3 * q.sum(axis=1)  # (the first iteration adds 0 * 0)
    np.testing.assert_allclose(out, 3 * p, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out2, want, rtol=1e-4, atol=1e-3)


def test_a_product_whose_parameter_the_back_edge_copies_completes_in_its_iteration():
    """``prev, cur = cur, p @ v``: the back edge reads ``cur``'s parameter while the new product
    would be in flight (LLVM copies registers there, and ptxas adds a wait of its own, C7517):
    the product completes in its own iteration, and ptxas adds nothing (explain reports what
    it adds). Values as NumPy's on the CPU backend."""
    rng = np.random.default_rng(5)
    q, k, v = (rng.uniform(-1, 1, (192, 64)).astype(np.float16) for _ in range(3))
    out, out2 = np.full((64, 64), np.nan, np.float32), np.full((64,), np.nan, np.float32)
    e = tl.explain(PREVIOUS_AND_CURRENT, q, k, v, out, out2, 3, BM=64, BN=64, D=64)
    body = e["thread_ir"].split("    for k")[1].split("next (")[0]
    assert [line.strip() for line in body.splitlines() if "wgmma" in line][-1].startswith("wgmma_wait 0 acc"), body
    assert "serialized" not in e["resources"] and "injected" not in e["resources"], e["resources"]
    PREVIOUS_AND_CURRENT[(1,)](q, k, v, out, out2, 3, BM=64, BN=64, D=64, backend="cpu")
    qq, kk, vv = (x.astype(np.float64) for x in (q, k, v))
    s = [qq[:64] @ kk[64 * j : 64 * j + 64].T for j in range(3)]
    p = [x.astype(np.float16).astype(np.float64) @ vv[64 * j : 64 * j + 64] for j, x in enumerate(s)]
    np.testing.assert_allclose(out, p[1] + p[2], rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(out2, sum(x.sum(axis=1) for x in s), rtol=1e-4, atol=1e-2)


@tl.tile_kernel(num_threads=128, arch="sm_90a")
def _promoted_float8(a, w, out):
    acc = tl.zeros((64, 64), tl.float32)
    for k in tl.range(0, tl.cdiv(a.shape[1], 64)):
        acc += tl.dot(tl.load(a, index=(0, k), shape=(64, 64)), tl.load(w, index=(0, k), shape=(64, 64)).T)
    tl.store(out, acc, index=(0, 0))


def test_float8_sums_promoted_every_k_tile():
    """``acc += tl.dot(x, w.T)`` (docs/dtypes.md): each iteration's float8 wgmma starts from
    zero (no accumulator operand: the tensor cores' reduced-precision sums span one k-tile)
    and its result is added to ``acc`` in float32."""
    g = np.random.default_rng(1)
    a, w = (g.uniform(-4, 4, (64, 200)).astype(E4M3.np) for _ in range(2))
    e = tl.explain(_promoted_float8, a, w, np.zeros((64, 64), np.float32), backend="cpu")
    wgmma = [line for line in e["thread_ir"].splitlines() if "= wgmma[" in line]
    assert len(wgmma) == 1 and "k32.f8e4m3]" in wgmma[0] and wgmma[0].rstrip().endswith(" -"), wgmma
    want = a.astype(np.float64) @ w.astype(np.float64).T
    atol = 1e-4 + _float8_sums_atol(200, np.abs(a.astype(np.float64)) @ np.abs(w.astype(np.float64)).T)
    tlt.check_kernel(_promoted_float8, (1,), args=(a, w, np.zeros((64, 64), np.float32)),
                     reference=lambda *_: want.astype(np.float32), rtol=1e-6, atol=atol)  # fmt: skip


@tl.tile_kernel(num_threads=128, arch="sm_90a")
def _transposed_before_the_loop(a, w, c):
    acc = tl.zeros((64, 64), tl.float32)
    x = tl.load(a, index=(0, 0), shape=(64, 64))
    wt = tl.load(w, index=(0, 0), shape=(64, 64)).T
    for _ in tl.range(0, 3):
        acc = tl.dot(x, wt, acc)
    tl.store(c, acc, index=(0, 0))


@pytest.mark.parametrize("d", [E4M3, E5M2, tl.float16])
def test_a_transposed_operand_from_before_the_loop(d):
    """``w.T`` taken before the loop of the dot that reads it: stored transposed once, before the
    loop (K-major: float8's own instructions). Float8 refused to compile (an MN-major 8-bit
    tile) and float16 failed in the lowering before this was fixed (a review found both)."""
    g = np.random.default_rng(0)
    a, w = (g.uniform(-2, 2, (64, 64)).astype(d.np) for _ in range(2))
    want = 3 * (a.astype(np.float64) @ w.astype(np.float64).T)
    bound = 3 * (np.abs(a.astype(np.float64)) @ np.abs(w.astype(np.float64)).T)
    atol = 1e-4 + (_float8_sums_atol(3 * 64, bound) if d.is_float8 else 0.0)
    args = (a, w, np.zeros((64, 64), np.float32))
    tlt.check_kernel(_transposed_before_the_loop, (1,), args=args, reference=lambda *_: want.astype(np.float32),
                     rtol=1e-6, atol=atol)  # fmt: skip
    ir = tl.explain(_transposed_before_the_loop, *args, backend="cpu")["thread_ir"]
    assert f"k{32 if d.is_float8 else 16}.{d.short}]" in ir
