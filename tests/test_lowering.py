"""Property tests of the lowering (tile IR -> layouts -> thread IR), run on the CPU backend.

The CPU backend executes the thread program itself (barriers, warp shuffles, shared memory,
masks, vector accesses), so it checks the lowering at real sizes without a GPU. Every test
runs its kernel on the interpreter and on the CPU backend, compares both with an
independent NumPy reference, and checks that the two backends agree with each other.

Compiling one CPU specialization takes seconds, so each test fixes its tile shapes,
constants, dtypes and thread counts (a short ``pytest.mark.parametrize`` list at most)
and lets Hypothesis vary what costs no compile: the data, array sizes that straddle tile
edges and span several blocks, strided and reversed views, offsets (negative too),
padding values, loop trip counts. Tiles are chosen so that each lowering path is taken,
and the thread IR (``tl.explain(..., backend="cpu")``) is checked to show it: reductions
in registers only, across lanes (``shuffle_xor``) and across warps (``shared``),
conversions by register renaming or through shared memory, 8-wide 16-bit vector loads,
barriers inside loops.

Integer data, or floats holding small integers, keep most results exact whatever the
order of the additions, so the backends can be compared exactly.
"""

from __future__ import annotations

import contextlib
import functools
import re

import ml_dtypes  # noqa: F401 - registers the bfloat16 NumPy dtype
import numpy as np
import pytest
from _blocks import from_blocks, padded_blocks, paths
from hypothesis import example, given, settings
from hypothesis import strategies as st

import tilelang as tl
import tilelang.kernel as tl_kernel
from tilelang import testing as tlt
from tilelang._lower.thread_ir import format_thread_program

# The interpreter is the reference; TILELANG_TEST_BACKENDS=interpret,cuda adds the GPU on a machine with one.
BACKENDS = ("interpret", "cpu") + (("cuda",) if "cuda" in tlt.default_backends() else ())
_SCALE = settings.default.max_examples / 20  # the "ci" profile has 20, "thorough" 300 (15x these counts)


def examples(n: int):
    """``n`` examples under the ci profile, scaled with the profile's example count."""
    return settings(max_examples=max(1, round(n * _SCALE)))


SEEDS = st.integers(0, 2**32 - 1)


def check(kernel, grid, make_args, reference, outputs, *, rtol=None, atol=None, **constants):
    """Run on every backend against ``reference``; then each compiled backend against the interpreter."""
    results = {}
    for backend in BACKENDS:
        results[backend] = tlt.check_kernel(
            kernel, grid, args_factory=make_args, reference=reference, outputs=outputs,
            backends=(backend,), rtol=rtol, atol=atol, **constants,
        )  # fmt: skip
    for backend in BACKENDS[1:]:
        for name, want, got in zip(outputs, results["interpret"], results[backend]):
            message = f"`{name}`: backend {backend!r} differs from the interpreter"
            tlt.assert_close(got, want, rtol=rtol, atol=atol, err_msg=message)


def _compiled(kernel, make_args, constants):
    """This specialization compiled for the CPU backend (once: the launch reuses it)."""
    key, _ = kernel.specialize(kernel.bind(make_args(), constants))
    return kernel.compile(key, "cpu")


def thread_ir(kernel, make_args, **constants) -> str:
    """The thread program of this specialization for aligned arrays; misaligned ones run the
    program of ``lane_first`` layouts (:func:`general_ir`)."""
    return _compiled(kernel, make_args, constants).stages["thread_ir"]


def general_ir(kernel, make_args, **constants) -> str | None:
    """The thread program of this specialization for any array (None: it takes every array as
    it comes, so there is no other)."""
    code = _compiled(kernel, make_args, constants).backend_kernel
    return None if code._general is None else format_thread_program(code.general().program)


def assert_warps_meet_alike(kernel, make_args, cross, **constants):
    """The kernel for any array goes through shared memory where the aligned one does (its
    layouts hold the same elements on each warp; within one, it may shuffle less)."""
    general = general_ir(kernel, make_args, **constants)
    if general is not None:
        assert ("shared" in paths(general)) == ("shared" in cross) and paths(general) <= cross


def grid_of(shape, tile):
    return tuple(tl.cdiv(s, t) for s, t in zip(shape, tile))


def view(base: np.ndarray, how: str) -> np.ndarray:
    """A non-contiguous view of ``base``'s data with the same shape: rows every other row
    ("rows2"), rows reversed ("flip"), or offset by one column so that the window bases
    are not 16-byte aligned ("shift"); the last dimension stays contiguous."""
    m, n = base.shape
    if how == "contiguous":
        return base.copy()
    if how == "rows2":
        big = np.zeros((2 * m, n), base.dtype)
        big[::2] = base
        return big[::2]
    if how == "flip":
        return base[::-1].copy()[::-1]
    if how == "shift":
        big = np.zeros((m, n + 1), base.dtype)
        big[:, 1:] = base
        return big[:, 1:]
    raise ValueError(how)


UNIT_VIEWS = st.sampled_from(["contiguous", "rows2", "flip", "shift"])


def _ints(rng, shape, lo, hi, dtype):
    return rng.integers(lo, hi, size=shape).astype(dtype)


# ------------------------------------------------------------ elementwise broadcasting


@tl.tile_kernel(num_threads=64)
def broadcast_kernel(x, row, col, out_a, out_b, out_c, out_d, BM: tl.Constant, BN: tl.Constant):
    i, j = tl.block_id(0), tl.block_id(1)
    t = tl.load(x, index=(i, j), shape=(BM, BN))
    r = tl.load(row, index=(j,), shape=(BN,))  # a 1-d layout: broadcasting it over t goes through shared memory
    c = tl.load(col, index=(i,), shape=(BM,))
    tl.store(out_a, t + r[None, :], index=(i, j))  # a row vector over the tile
    tl.store(out_b, c[:, None] * t - r, index=(i, j))  # the broadcast operand first; an implicit (BN,) row
    tl.store(out_c, c[:, None] - r[None, :], index=(i, j))  # both sides broadcast: an outer difference
    s = tl.sum(t, axis=1)  # a sliced layout (replicated over the lanes that held the row)
    tl.store(out_d, (s * c - c * s + s * c)[:, None], index=(i, j))  # sliced <-> blocked 1-d conversions


@examples(30)
@given(seed=SEEDS, shape=tlt.shapes((3, 20)), how=UNIT_VIEWS)
def test_broadcast_rows_and_columns(seed, shape, how):
    rng = np.random.default_rng(seed)
    m, n = shape
    x, row, col = (_ints(rng, s, -50, 50, np.float32) for s in (shape, (n,), (m,)))
    gm, gn = grid_of(shape, (3, 20))

    def make():
        outs = [np.full(shape, -1.0, np.float32) for _ in range(3)]
        return view(x, how), row.copy(), col.copy(), *outs, np.full((m, gn), -1.0, np.float32)

    def reference(x, row, col, *_):
        sums = padded_blocks(x, (3, 20), 0).sum(axis=3).transpose(0, 2, 1).reshape(gm * 3, gn)[:m]
        return x + row, col[:, None] * x - row, col[:, None] - row[None, :] + 0 * x, sums * col[:, None]

    consts = dict(BM=3, BN=20)
    assert "shared" in paths(thread_ir(broadcast_kernel, make, **consts))
    outputs = ("out_a", "out_b", "out_c", "out_d")
    check(broadcast_kernel, (gm, gn), make, reference, outputs, **consts)


# ---------------------------------------- one kernel at 32, 64, 128 and 256 threads


@functools.cache
def softmax_kernel(num_threads):
    @tl.tile_kernel(num_threads=num_threads)
    def softmax_rows(x, out, BM: tl.Constant, BN: tl.Constant):
        i = tl.block_id(0)
        t = tl.load(x, index=(i, 0), shape=(BM, BN), padding=float("-inf"))
        e = tl.exp(t - tl.max(t, axis=1)[:, None])  # a column from a reduction, broadcast back over its rows
        tl.store(out, e / tl.sum(e, axis=1, keepdims=True), index=(i, 0))

    return softmax_rows


# (2, 48) pads to 2x64: 32 threads hold 4 elements each (the row on registers and lanes),
# 256 threads hold each element twice (replicated warps store once); the row's reduction
# crosses warps (shared memory) only from 128 threads on.
@pytest.mark.parametrize("num_threads, cross", [(32, {"shuffle"}), (64, {"shuffle"}), (128, {"shuffle", "shared"}),
                                                (256, {"shuffle", "shared"})])  # fmt: skip
@examples(20)
@given(seed=SEEDS, m=st.integers(1, 9), n=st.integers(1, 48))
def test_softmax_rows_at_every_thread_count(num_threads, cross, seed, m, n):
    kernel = softmax_kernel(num_threads)
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((m, n)) * 4).astype(np.float32)

    def make():
        return x.copy(), np.zeros((m, n), np.float32)

    def reference(x, out):
        e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    consts = dict(BM=2, BN=48)
    ir = thread_ir(kernel, make, **consts)
    assert paths(ir) == cross  # with one warp on the row, the column of maxima is a register renaming
    assert_warps_meet_alike(kernel, make, cross, **consts)
    check(kernel, tl.cdiv(m, 2), make, reference, ("out",), rtol=2**-18, atol=2**-20, **consts)


# ---------------------------------------------------------------------- reductions

NUMPY_REDUCE = {
    "sum": lambda a, axis: np.sum(a, axis=axis, dtype=np.float32 if a.dtype == np.float16 else a.dtype).astype(a.dtype),
    "prod": lambda a, axis: np.prod(a, axis=axis, dtype=a.dtype),
    "max": np.max,
    "min": np.min,
    "argmax": lambda a, axis: np.argmax(a, axis=axis).astype(np.int32),
    "argmin": lambda a, axis: np.argmin(a, axis=axis).astype(np.int32),
}


@functools.cache
def reduce_kernel(num_threads):
    @tl.tile_kernel(num_threads=num_threads)
    def reduce_pair(x, out_a, out_b, pad, OPS: tl.Constant, AXIS: tl.Constant, BM: tl.Constant, BN: tl.Constant):
        """Two reductions of each (BM, BN) tile along AXIS; the results of block (i, j) land
        at tile index (i, j) as a column (AXIS=1) or a row (AXIS=0)."""
        i, j = tl.block_id(0), tl.block_id(1)
        t = tl.load(x, index=(i, j), shape=(BM, BN), padding=pad)
        for out, op in zip((out_a, out_b), OPS):
            r = getattr(tl, op)(t, axis=AXIS)
            tl.store(out, r[:, None] if AXIS == 1 else r[None, :], index=(i, j))

    return reduce_pair


# (dtype, threads, tile, axis, ops, the cross-thread paths of the reduced axis). The default
# layout gives each thread up to 16 bytes of a row in registers, then spreads the padded tile's
# index bits (lowest first) over the 5 lane bits, the warp bits and the remaining register bits.
REDUCTIONS = [
    # 24x3 (padded 32x4), 32 threads: the columns in each thread's registers, the rows on the lanes
    ("int32", 32, (24, 3), 1, ("prod", "argmin"), set()),
    ("int32", 32, (24, 3), 0, ("sum", "max"), {"shuffle"}),
    # 3x24 (padded 4x32), 128 threads: one element per thread, the columns on lanes, the rows on warps
    ("int32", 128, (3, 24), 0, ("max", "argmax"), {"shared"}),
    ("float16", 128, (3, 24), 1, ("min", "sum"), {"shuffle"}),  # the sum accumulates in float32
    # 5x30 (padded 8x32), 64 threads, 8-byte elements: the rows on a register, lanes and a warp
    # (the columns, a register and lanes, are like 2x100's)
    ("float64", 64, (5, 30), 0, ("sum", "argmin"), {"shuffle", "shared"}),
    # 2x100 (padded 2x128), 64 threads: the columns on a register, lanes and a warp; the rows on a register
    ("int64", 64, (2, 100), 1, ("prod", "argmax"), {"shuffle", "shared"}),
    ("int64", 64, (2, 100), 0, ("min", "argmin"), set()),
]


@pytest.mark.parametrize(
    "dtype, num_threads, tile, axis, ops, cross",
    REDUCTIONS,
    ids=[f"{d}-{t}threads-{m}x{n}-axis{a}-{'-'.join(ops)}" for d, t, (m, n), a, ops, _ in REDUCTIONS],
)
@examples(25)
@given(seed=SEEDS, data=st.data())
def test_reductions_on_registers_lanes_and_warps(dtype, num_threads, tile, axis, ops, cross, seed, data):
    kernel = reduce_kernel(num_threads)
    d = np.dtype(dtype)
    shape = data.draw(tlt.shapes(tile), label="shape")
    how = data.draw(UNIT_VIEWS, label="view")
    rng = np.random.default_rng(seed)
    if data.draw(st.booleans(), label="few distinct values (ties)"):
        x = _ints(rng, shape, -3, 4, d)
    else:
        lo, hi = (np.iinfo(d).min, np.iinfo(d).max) if d.kind == "i" else (-1000, 1000)  # exact in float16 too
        x = rng.integers(lo, hi, size=shape, endpoint=True).astype(d)
    if d.kind == "f" and data.draw(st.booleans(), label="NaN and infinities"):
        x.flat[rng.integers(0, x.size, size=3)] = rng.choice([np.nan, np.inf, -np.inf], size=3)
    if d.kind == "f":
        pad = d.type(data.draw(st.sampled_from([0.0, 1.0, -7.0, np.inf, -np.inf, np.nan]), label="pad"))
    else:
        pad = d.type(data.draw(st.sampled_from([0, 1, -7, 2**31 - 1, -(2**31)]), label="pad"))
    gm, gn = grid_of(shape, tile)
    out_shapes = [(gm * tile[0], gn) if axis == 1 else (gm, gn * tile[1])] * 2
    out_dtypes = [np.int32 if op.startswith("arg") else d for op in ops]

    def make():
        return view(x, how), *(np.zeros(s, t) for s, t in zip(out_shapes, out_dtypes)), pad

    def reference(x, out_a, out_b, pad):
        xb = padded_blocks(x, tile, pad)
        results = []
        for op in ops:
            r = NUMPY_REDUCE[op](xb, 3 if axis == 1 else 2)  # (GM, GN, BM) or (GM, GN, BN)
            results.append(r.transpose(0, 2, 1).reshape(gm * tile[0], gn) if axis == 1 else r.reshape(gm, -1))
        return results

    consts = dict(OPS=ops, AXIS=axis, BM=tile[0], BN=tile[1])
    assert paths(thread_ir(kernel, make, **consts)) == cross
    assert_warps_meet_alike(kernel, make, cross, **consts)
    check(kernel, (gm, gn), make, reference, ("out_a", "out_b"), **consts)


@functools.cache
def full_reduce_kernel(num_threads):
    @tl.tile_kernel(num_threads=num_threads)
    def full_reduce(x, sums, mins, where_max, BM: tl.Constant, BN: tl.Constant):
        """Whole-tile reductions to 0-d values (the argmax indexes the flattened tile), one per block."""
        i, j = tl.block_id(0), tl.block_id(1)
        b = i * tl.num_blocks(1) + j
        t = tl.load(x, index=(i, j), shape=(BM, BN), padding=-100)
        tl.store(sums, tl.sum(t, keepdims=True), offset=(b, 0))
        tl.store(mins, tl.min(tl.min(t, axis=1), axis=0)[None], offset=(b,))  # a reduction of a sliced layout
        tl.store(where_max, tl.argmax(t)[None], offset=(b,))

    return full_reduce


# 4x16 keeps its padded numbering when flattened (a renaming: registers and lanes, nothing
# shared); 3x24 does not (the flattening goes through shared memory).
@pytest.mark.parametrize("num_threads, tile, shared", [(32, (4, 16), False), (128, (3, 24), True)])
@examples(25)
@given(seed=SEEDS, data=st.data())
def test_full_reductions_to_scalars(num_threads, tile, shared, seed, data):
    kernel = full_reduce_kernel(num_threads)
    shape = data.draw(tlt.shapes(tile), label="shape")
    rng = np.random.default_rng(seed)
    x = _ints(rng, shape, -20, 20, np.int32)
    gm, gn = grid_of(shape, tile)

    def make():
        nb = gm * gn
        return x.copy(), np.zeros((nb, 1), np.int32), np.zeros(nb, np.int32), np.zeros(nb, np.int32)

    def reference(x, *_):
        xb = padded_blocks(x, tile, -100).reshape(gm * gn, -1)
        return xb.sum(1, dtype=np.int32, keepdims=True), xb.min(1), xb.argmax(1).astype(np.int32)

    consts = dict(BM=tile[0], BN=tile[1])
    assert ("shared" in paths(thread_ir(kernel, make, **consts))) == shared
    check(kernel, (gm, gn), make, reference, ("sums", "mins", "where_max"), **consts)


# --------------------------------------------------------------------------- scans


@functools.cache
def scan_kernel(num_threads):
    @tl.tile_kernel(num_threads=num_threads)
    def scans(x, out_s, out_p, out_sum, out_prod, AXIS: tl.Constant, BM: tl.Constant, BN: tl.Constant):
        i, j = tl.block_id(0), tl.block_id(1)
        t = tl.load(x, index=(i, j), shape=(BM, BN), padding=3)
        tl.store(out_s, tl.cumsum(t, axis=AXIS), index=(i, j))
        tl.store(out_p, tl.cumprod(t, axis=AXIS), index=(i, j))
        # without padding along the axis, these read the scans' totals
        tl.store(out_sum, tl.sum(t, axis=AXIS, keepdims=True), index=(i, j))
        tl.store(out_prod, tl.prod(t, axis=AXIS, keepdims=True), index=(i, j))

    return scans


# 3x10 (padded 4x16) on 64 threads: the axis on lanes and warps; 5x30 (8x32): registers
# too; 4x8 on 256 threads (each element held by 8 threads); 16x64 on 128 threads: no
# padding, so the sums and products come from the scans
@pytest.mark.parametrize("num_threads, tile", [(64, (3, 10)), (64, (5, 30)), (256, (4, 8)), (128, (16, 64))])
@pytest.mark.parametrize("axis", [0, 1])
@examples(20)
@given(seed=SEEDS, data=st.data())
def test_cumsum_cumprod_along_both_axes(num_threads, tile, axis, seed, data):
    kernel = scan_kernel(num_threads)
    shape = data.draw(tlt.shapes(tile), label="shape")
    rng = np.random.default_rng(seed)
    wide = data.draw(st.booleans(), label="the whole int32 range (else few values)")
    x = _ints(rng, shape, -(2**31), 2**31, np.int32) if wide else _ints(rng, shape, -3, 4, np.int32)
    how = data.draw(UNIT_VIEWS, label="view")
    grid = grid_of(shape, tile)
    totals = (grid[0], shape[1]) if axis == 0 else (shape[0], grid[1])

    def make():
        return view(x, how), *(np.zeros(s, np.int32) for s in (shape, shape, totals, totals))

    def reference(x, *_):
        xb = padded_blocks(x, tile, 3)
        ax = 2 if axis == 0 else 3
        m, n = shape
        cut = (slice(None), slice(n)) if axis == 0 else (slice(m), slice(None))
        return (from_blocks(np.cumsum(xb, axis=ax, dtype=np.int32))[:m, :n],
                from_blocks(np.cumprod(xb, axis=ax, dtype=np.int32))[:m, :n],
                from_blocks(np.sum(xb, axis=ax, dtype=np.int32, keepdims=True))[cut],
                from_blocks(np.prod(xb, axis=ax, dtype=np.int32, keepdims=True))[cut])  # fmt: skip

    consts = dict(AXIS=axis, BM=tile[0], BN=tile[1])
    check(kernel, grid, make, reference, ("out_s", "out_p", "out_sum", "out_prod"), **consts)


@tl.tile_kernel(num_threads=128)
def scan_in_a_loop_sum_after(x, out_s, out_sum, N: tl.Constant):
    t = tl.load(x, index=(0, 0), shape=(16, 64))
    acc = tl.zeros((16, 64), tl.int32)
    for _ in tl.range(0, N):
        acc += tl.cumsum(t, axis=1)
    tl.store(out_s, acc, index=(0, 0))
    tl.store(out_sum, tl.sum(t, axis=1, keepdims=True), index=(0, 0))


def test_a_reduction_outside_the_loop_of_a_scan_reduces_on_its_own():
    """The scan's totals are registers of the loop body (run no times here): a sum after the
    loop cannot read them."""
    x = np.random.default_rng(0).integers(-9, 9, (16, 64)).astype(np.int32)

    def make():
        return x, np.zeros((16, 64), np.int32), np.zeros((16, 1), np.int32)

    def reference(x, *_):
        return 0 * x, x.sum(axis=1, keepdims=True, dtype=np.int32)

    check(scan_in_a_loop_sum_after, (1,), make, reference, ("out_s", "out_sum"), N=0)


@tl.tile_kernel(num_threads=128)
def scans_only(x, out_s, out_p, out_sum, out_prod, AXIS: tl.Constant, BM: tl.Constant, BN: tl.Constant):
    i, j = tl.block_id(0), tl.block_id(1)
    t = tl.load(x, index=(i, j), shape=(BM, BN), padding=3)
    tl.store(out_s, tl.cumsum(t, axis=AXIS), index=(i, j))
    tl.store(out_p, tl.cumprod(t, axis=AXIS), index=(i, j))


@pytest.mark.parametrize("axis", [0, 1])
def test_a_reduction_beside_a_scan_of_the_same_tile_reads_its_totals(axis):
    """No shuffle, barrier or shared-memory access beyond the scans' own."""
    x = np.zeros((16, 64), np.int32)
    ir, alone = (thread_ir(k, lambda: (x,) * 5, AXIS=axis, BM=16, BN=64) for k in (scan_kernel(128), scans_only))
    keys = ("shuffle_up", "shuffle_xor", "barrier", "= shared ", "shared smem")
    assert "shuffle_" in alone
    assert [ir.count(k) for k in keys] == [alone.count(k) for k in keys]
    # (but the lanes' totals, read here by the sum and the product: one shuffle each)
    assert ir.count("shuffle_idx") - alone.count("shuffle_idx") <= 2


@tl.tile_kernel(num_threads=32)
def row_prefixes(x, out, BM: tl.Constant, BN: tl.Constant):
    t = tl.load(x, index=(tl.block_id(0), 0), shape=(BM, BN))
    tl.store(out, tl.cumsum(t, axis=1), index=(tl.block_id(0), 0))


def test_a_scan_whose_totals_nothing_reads_shuffles_no_totals():
    """A row of 32 over 8 lanes of 4 registers: a Kogge-Stone scan by shuffle_up (3 lane bits and
    the lane before's prefix), and the last lane's total (shuffle_idx), which nothing reads
    here, is not shuffled (dead_code_threads)."""
    x = np.arange(4 * 32, dtype=np.float32).reshape(4, 32)
    ir = thread_ir(row_prefixes, lambda: (x, x), BM=4, BN=32)
    assert ir.count("shuffle_up") == 3 + 1 and "shuffle_idx" not in ir and "shuffle_xor" not in ir
    check(
        row_prefixes, (1,), lambda: (x, np.zeros_like(x)), lambda x, out: (np.cumsum(x, axis=1),), ("out",), BM=4, BN=32
    )


# ----------------------------------------------------------------------- shape ops


@tl.tile_kernel(num_threads=256)
def transpose_kernel(x, out_t, out_b, BM: tl.Constant, BN: tl.Constant):
    i, j = tl.block_id(0), tl.block_id(1)
    t = tl.load(x, index=(i, j), shape=(BM, BN))
    tl.store(out_t, t.T, index=(j, i))
    col_max = tl.max(t, axis=0)  # a sliced layout, broadcast back to the tile
    rows = tl.broadcast_to(x.shape[0], (BM, BN))  # a 0-d int64 broadcast (a fill)
    tl.store(out_b, tl.broadcast_to(col_max[None, :], (BM, BN)) * 2 + rows - t, index=(i, j))


@examples(30)
@given(seed=SEEDS, shape=tlt.shapes((6, 20)), how=UNIT_VIEWS)
def test_transpose_and_broadcast_to(seed, shape, how):
    rng = np.random.default_rng(seed)
    x = _ints(rng, shape, -1000, 1000, np.float32)
    gm, gn = grid_of(shape, (6, 20))

    def make():
        return view(x, how), np.full(shape[::-1], 7, np.float32), np.zeros(shape, np.float32)

    def reference(x, *_):
        col_max = padded_blocks(x, (6, 20), 0).max(axis=2, keepdims=True)  # (GM, GN, 1, BN)
        b = from_blocks(np.broadcast_to(col_max, (gm, gn, 6, 20)), shape)
        return x.T, b * 2 + shape[0] - x

    check(transpose_kernel, (gm, gn), make, reference, ("out_t", "out_b"), BM=6, BN=20)


@tl.tile_kernel(num_threads=32)
def permute_kernel(x, out, centered, A: tl.Constant, B: tl.Constant, C: tl.Constant, PERM: tl.Constant):
    i = tl.block_id(0)
    t = tl.load(x, index=(i, 0, 0), shape=(A, B, C))
    p = tl.permute(t, PERM)
    index = [0, 0, 0]
    index[PERM.index(0)] = i
    tl.store(out, p, index=tuple(index))
    tl.store(centered, t - tl.max(t, axis=1, keepdims=True), index=(i, 0, 0))  # the middle axis of a 3-d tile


@examples(25)
@given(seed=SEEDS, a=st.integers(1, 7), b=st.integers(1, 3), c=st.integers(1, 8), flip=st.booleans())
def test_permute_3d(seed, a, b, c, flip):
    rng = np.random.default_rng(seed)
    x = _ints(rng, (a, b, c), -99, 99, np.int16)
    perm = (2, 0, 1)
    ga = tl.cdiv(a, 2)

    def make():
        xs = x[:, ::-1, :].copy()[:, ::-1, :] if flip else x.copy()  # strided in the middle dimension
        return xs, np.full((8, 2 * ga, 3), -1, np.int16), np.full((a, b, c), -1, np.int16)

    def reference(x, out, centered):
        xp = np.zeros((2 * ga, 3, 8), np.int16)
        xp[:a, :b, :c] = x
        return xp.transpose(perm), (xp - xp.max(axis=1, keepdims=True))[:a, :b, :c]

    check(permute_kernel, ga, make, reference, ("out", "centered"), A=2, B=3, C=8, PERM=perm)


@functools.cache
def reshape_kernel(num_threads):
    @tl.tile_kernel(num_threads=num_threads)
    def regroup(x, out, sums, BM: tl.Constant, BN: tl.Constant, G: tl.Constant):
        """Each tile flattened row-major and regrouped into rows of G: stored, and summed per group."""
        i = tl.block_id(0)
        t = tl.load(x, index=(i, 0), shape=(BM, BN), padding=-1)
        g = tl.reshape(t, (BM * BN // G, G))
        tl.store(out, g, index=(i, 0))
        tl.store(sums, tl.sum(g, axis=1)[:, None], index=(i, 0))

    return regroup


# 4x8 -> 8x4 keeps the padded numbering (no data moves), and so does 3x8 -> 6x4 (rows of a power of two
# split: (4, 8) and (8, 4) padded); 3x8 -> 8x3 changes it (through shared memory)
@pytest.mark.parametrize("tile, group, moves", [((4, 8), 4, False), ((3, 8), 4, False), ((3, 8), 3, True)])
@examples(25)
@given(seed=SEEDS, m=st.integers(1, 14), n=st.integers(1, 8))
def test_reshape_keeping_and_changing_the_padded_numbering(tile, group, moves, seed, m, n):
    kernel = reshape_kernel(32)
    bm, bn = tile
    rows = bm * bn // group
    rng = np.random.default_rng(seed)
    x = _ints(rng, (m, n), -99, 99, np.int32)
    gm = tl.cdiv(m, bm)

    def make():
        return x.copy(), np.zeros((gm * rows, group), np.int32), np.zeros((gm * rows, 1), np.int32)

    def reference(x, *_):
        g = padded_blocks(x, tile, -1).reshape(gm * rows, group)
        return g, g.sum(axis=1, keepdims=True)

    consts = dict(BM=bm, BN=bn, G=group)
    assert ("shared" in paths(thread_ir(kernel, make, **consts))) == moves
    check(kernel, gm, make, reference, ("out", "sums"), **consts)


# -------------------------------------------------------------------- loads/stores


@functools.cache
def window_kernel(num_threads):
    @tl.tile_kernel(num_threads=num_threads)
    def window_copy(x, out, r0, c0, q0, d0, pad, BM: tl.Constant, BN: tl.Constant):
        """Block (i, j) copies the window of x at (r0, c0) + (i*BM, j*BN) to out at (q0, d0) + (i*BM, j*BN)."""
        i, j = tl.block_id(0), tl.block_id(1)
        t = tl.load(x, offset=(r0 + i * BM, c0 + j * BN), shape=(BM, BN), padding=pad)
        tl.store(out, t, offset=(q0 + i * BM, d0 + j * BN))

    return window_copy


def _window_reference(x, out, r0, c0, q0, d0, pad, tile, grid):
    out = out.copy()
    for i in range(grid[0]):
        for j in range(grid[1]):
            for a in range(tile[0]):
                for b in range(tile[1]):
                    src, dst = (
                        (r0 + i * tile[0] + a, c0 + j * tile[1] + b),
                        (q0 + i * tile[0] + a, d0 + j * tile[1] + b),
                    )
                    if 0 <= dst[0] < out.shape[0] and 0 <= dst[1] < out.shape[1]:
                        inside = 0 <= src[0] < x.shape[0] and 0 <= src[1] < x.shape[1]
                        out[dst] = x[src] if inside else pad
    return out


# Tiles hold 16 bytes of a row per thread: 4 float32s, 8 float16s (the 8-wide vector path),
# 16 int8s; bools 8 bytes (a narrower vector). "cols2" and "reversed" views have a non-unit last stride (no vectors).
WINDOWS = [
    ("float32", (4, 32), "unit", 4),
    ("float32", (4, 32), "strided", 1),
    ("float16", (8, 32), "unit", 8),
    ("bfloat16", (8, 32), "unit", 8),
    ("bool", (4, 64), "unit", 8),
    ("int8", (8, 64), "unit", 16),
]


def _random(rng, shape, d):
    if d == np.bool_:
        return rng.random(shape) < 0.5
    if d.kind == "f" or d == np.dtype("bfloat16"):
        return (rng.standard_normal(shape) * 100).astype(d)
    return _ints(rng, shape, np.iinfo(d).min, int(np.iinfo(d).max) + 1, d)


@pytest.mark.parametrize("dtype, tile, strides, width", WINDOWS, ids=[f"{d}-{s}" for d, _, s, _ in WINDOWS])
@examples(30)
@given(seed=SEEDS, data=st.data())
def test_load_store_windows_at_edges(dtype, tile, strides, width, seed, data):
    kernel = window_kernel(32)
    d = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    xshape = data.draw(tlt.shapes(tile, max_tiles=2), label="x shape")
    if strides == "strided":  # a last dimension of one element counts as contiguous
        xshape = (xshape[0], max(xshape[1], 2))
    oshape = data.draw(tlt.shapes(tile, max_tiles=2), label="out shape")
    if strides == "strided":
        oshape = (oshape[0], max(oshape[1], 2))
    far = st.sampled_from([2**31 - 1, 2**31, -(2**31), 2**33, -(2**33)])  # int32 clamping of the bounds
    offsets = [data.draw(st.integers(-t - 2, t + 2) | far, label=f"offset {k}") for k, t in enumerate(tile * 2)]
    grid = tuple(tl.cdiv(s + 2, t) + 1 for s, t in zip(oshape, tile))  # windows past every edge
    how = data.draw(st.sampled_from(["cols2", "reversed"]) if strides == "strided" else UNIT_VIEWS, label="view")
    x, out0 = _random(rng, xshape, d), _random(rng, oshape, d)
    pad = d.type(_random(rng, (), d))

    def strided(a):
        if how == "cols2":
            big = np.zeros((a.shape[0], 2 * a.shape[1]), d)
            big[:, ::2] = a
            return big[:, ::2]
        return a[:, ::-1].copy()[:, ::-1]

    def make():
        if strides == "strided":
            return strided(x), strided(out0), *map(np.int64, offsets), pad
        return view(x, how), view(out0, "rows2" if how == "rows2" else "contiguous"), *map(np.int64, offsets), pad

    def reference(x, out, r0, c0, q0, d0, pad):
        return _window_reference(x, out, r0, c0, q0, d0, pad, tile, grid)

    consts = dict(BM=tile[0], BN=tile[1])
    ir = thread_ir(kernel, make, **consts)
    widest = max(int(m.group(1) or 1) for m in re.finditer(r"= load [^\n]*?(?:lanes=(\d+)[^\n]*)?$", ir, re.M))
    assert widest == width
    check(kernel, grid, make, reference, ("out",), **consts)


# ------------------------------------------------------------ gather/scatter/atomics


@tl.tile_kernel(num_threads=32)
def gather_scatter_kernel(table, ids, keep, dest, out, BN: tl.Constant, BC: tl.Constant):
    """Rows of table picked by ids (masked by keep; bad ids read the padding) are scattered,
    doubled, to rows dest of out (a permutation; masked-off rows are left alone)."""
    j = tl.block_id(0)
    idx = tl.load(ids, index=(j,), shape=(BN,), padding=-1)
    k = tl.load(keep, index=(j,), shape=(BN,))
    cols = tl.arange(0, BC)[None, :]  # BC is wider than the table: the last column reads the padding
    rows = tl.gather(table, idx[:, None], cols, mask=k[:, None], padding=-7.0)
    to = tl.load(dest, index=(j,), shape=(BN,), padding=-1)
    tl.scatter(out, to[:, None], cols, rows * 2, mask=k[:, None])


@examples(40)
@given(seed=SEEDS, n=st.integers(1, 40), t=st.integers(1, 9))
def test_gather_scatter_with_masks(seed, n, t):
    rng = np.random.default_rng(seed)
    table = _ints(rng, (t, 5), -50, 50, np.float32)
    ids = rng.integers(-2, t + 2, size=n).astype(np.int32)
    keep = rng.random(n) < 0.7
    dest = rng.permutation(n).astype(np.int32)

    def make():
        return table.copy(), ids.copy(), keep.copy(), dest.copy(), np.full((n, 6), 1.5, np.float32)

    def reference(table, ids, keep, dest, out):
        out = out.copy()
        for p in range(n):
            if keep[p]:
                row = np.full(6, -7.0, np.float32)
                if 0 <= ids[p] < t:
                    row[:5] = table[ids[p]]
                out[dest[p]] = row * 2
        return out

    check(gather_scatter_kernel, tl.cdiv(n, 16), make, reference, ("out",), BN=16, BC=6)


@tl.tile_kernel(num_threads=128)
def atomics_kernel(h_add, h_max, h_min, h2, count, bins, vals, keep, BN: tl.Constant):
    """Histograms with repeated bins: out-of-range bins and masked-off elements are skipped.
    BN=40 leaves phantom elements in every tile (they must not count), and 128 threads hold
    each element of a 1-d tile twice (only one copy may add)."""
    j = tl.block_id(0)
    b = tl.load(bins, index=(j,), shape=(BN,), padding=-1)
    v = tl.load(vals, index=(j,), shape=(BN,))
    k = tl.load(keep, index=(j,), shape=(BN,))
    tl.atomic_add(h_add, b, v, mask=k)
    tl.atomic_max(h_max, b, v, mask=k)
    tl.atomic_min(h_min, b, v)
    tl.atomic_add(h2, b[:, None], tl.arange(0, 4)[None, :], v[:, None] + tl.arange(0, 4)[None, :].astype(v.dtype))
    tl.atomic_add(count, 0, 1)  # 0-d: once per block
    tl.atomic_add(count, 1, k.astype(tl.int32))  # a 0-d index, tile values: the kept elements


@pytest.mark.parametrize("dtype", ["int32", "float32"])
@examples(30)
@given(seed=SEEDS, n=st.integers(1, 200), nbins=st.integers(1, 6))
def test_atomics_with_repeated_indices(dtype, seed, n, nbins):
    rng = np.random.default_rng(seed)
    d = np.dtype(dtype)
    bins = rng.integers(-1, nbins + 1, size=n).astype(np.int32)
    vals = _ints(rng, n, -100, 100, d)
    keep = rng.random(n) < 0.8
    grid = tl.cdiv(n, 40)

    def make():
        return (np.zeros(nbins, d), np.full(nbins, -50, d), np.full(nbins, 50, d), np.zeros((nbins, 3), d),
                np.zeros(2, np.int32), bins.copy(), vals.copy(), keep.copy())  # fmt: skip

    def reference(h_add, h_max, h_min, h2, count, bins, vals, keep):
        ok = (bins >= 0) & (bins < nbins)
        np.add.at(h_add, bins[ok & keep], vals[ok & keep])
        np.maximum.at(h_max, bins[ok & keep], vals[ok & keep])
        np.minimum.at(h_min, bins[ok], vals[ok])
        for c in range(3):
            np.add.at(h2[:, c], bins[ok], vals[ok] + c)
        return h_add, h_max, h_min, h2, count + [grid, keep.sum()]

    check(atomics_kernel, grid, make, reference, ("h_add", "h_max", "h_min", "h2", "count"), BN=40)


@functools.cache
def histogram_kernel(dtype):
    @tl.tile_kernel(num_threads=64)
    def histogram(x, keep, counts, BN: tl.Constant, BINS: tl.Constant):
        i = tl.block_id(0)
        t = tl.load(x, index=(i,), shape=(BN,), padding=-1 if dtype[0] == "i" else 0)
        k = tl.load(keep, index=(i,), shape=(BN,))  # (False past the end: the padding is not counted)
        tl.atomic_add(counts, tl.arange(0, BINS), tl.histogram(t, BINS, mask=k))

    return histogram


# 200 values over 64 threads (4 each) into 37 bins (padded to 64: phantom bins); 20 values
# over 64 threads (each held by two threads: counted once) into 8 bins; more bins than the
# values' dtype has values (num_bins was compared in that dtype: 256 as a uint8 is 0, nothing counted)
@pytest.mark.parametrize(
    "dtype, bn, bins",
    [(d, bn, bins) for d in ("int8", "uint16", "int64") for bn, bins in ((200, 37), (20, 8))]
    + [("uint8", 200, 256), ("int8", 200, 128), ("int8", 200, 300)],
)
@examples(15)
@given(seed=SEEDS, n=st.integers(1, 700))
def test_histogram_counts_in_range_masked_values_once(dtype, bn, bins, seed, n):
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    low = -4 if dtype[0] == "i" else 0
    x = rng.integers(max(low, info.min), min(bins + 4, info.max + 1), size=n).astype(dtype)
    keep = rng.random(n) < 0.8

    def make():
        return x.copy(), keep.copy(), np.zeros(bins, np.int32)

    def reference(x, keep, counts):
        inside = keep & (x.astype(np.int64) >= 0) & (x.astype(np.int64) < bins)
        return np.bincount(x[inside].astype(np.int64), minlength=bins).astype(np.int32)

    assert "+= 1:i32" in thread_ir(histogram_kernel(dtype), make, BN=bn, BINS=bins)  # shared atomics
    check(histogram_kernel(dtype), tl.cdiv(n, bn), make, reference, ("counts",), BN=bn, BINS=bins)


# ----------------------------------------------------------------------------- dot


@functools.cache
def matmul_kernel(num_threads):
    @tl.tile_kernel(num_threads=num_threads)
    def matmul(a, b, c, NESTED: tl.Constant, BM: tl.Constant, BN: tl.Constant, BK: tl.Constant):
        """c = a @ b; block (i, j) computes tile (i, j), or (NESTED) block i loops over the tiles of row i."""

        def tile(i, j):
            acc = tl.zeros((BM, BN), tl.float32)
            for k in tl.range(tl.cdiv(a.shape[1], BK)):  # a dot (shared memory, barriers) in a loop
                x, y = tl.load(a, index=(i, k), shape=(BM, BK)), tl.load(b, index=(k, j), shape=(BK, BN))
                acc = tl.dot(x, y, acc)
            tl.store(c, acc, index=(i, j))

        if NESTED:
            for j in tl.range(tl.cdiv(b.shape[1], BN)):  # synchronising loops nested
                tile(tl.block_id(0), j)
        else:
            tile(tl.block_id(0), tl.block_id(1))

    return matmul


# float32: 16x16 on 128 threads, 2 columns of the result per thread; float16: 12x10 (padded
# 16x16) on 32 threads, a 2x4 register block per thread (each operand value reused)
@pytest.mark.parametrize(
    "dtype, num_threads, tile, nested", [("float32", 128, (16, 16, 8), False), ("float16", 32, (12, 10, 6), True)]
)
@examples(25)
@given(seed=SEEDS, data=st.data())
def test_dot_with_ragged_shapes(dtype, num_threads, tile, nested, seed, data):
    kernel = matmul_kernel(num_threads)
    bm, bn, bk = tile
    m, n, k = data.draw(tlt.shapes(tile), label="m, n, k")
    rng = np.random.default_rng(seed)
    a, b = _ints(rng, (m, k), -4, 5, dtype), _ints(rng, (k, n), -4, 5, dtype)  # exact products and sums
    how = data.draw(UNIT_VIEWS, label="view of a")

    def make():
        return view(a, how), b.copy(), np.full((m, n), np.nan, np.float32)

    def reference(a, b, c):
        return a.astype(np.float64) @ b.astype(np.float64)

    grid = tl.cdiv(m, bm) if nested else grid_of((m, n), (bm, bn))
    check(kernel, grid, make, reference, ("c",), NESTED=nested, BM=bm, BN=bn, BK=bk)


# --------------------------------------------------------------------------- loops


@tl.tile_kernel(num_threads=128)
def online_columns_kernel(x, start, lse, best, positive, BM: tl.Constant, BN: tl.Constant):
    """Column logsumexp, argmax and count of positives over row tiles: running values carried
    in the reductions' (sliced) layout. 6x12 pads to 8x16; on 128 threads its rows lie on a
    lane and two warp bits, so each iteration shuffles and reduces across warps (barriers
    inside the loop). The count starts from a loaded tile (a conversion before
    the loop)."""
    j = tl.block_id(0)
    m = tl.full((BN,), float("-inf"), tl.float32)
    total = tl.zeros((BN,), tl.float32)
    arg = tl.zeros((BN,), tl.int32)
    count = tl.load(start, index=(j,), shape=(BN,))
    for k in tl.range(tl.cdiv(x.shape[0], BM)):
        t = tl.load(x, index=(k, j), shape=(BM, BN), padding=float("-inf"))
        tmax = tl.max(t, axis=0)
        arg = tl.where(tmax > m, tl.argmax(t, axis=0) + (k * BM).astype(tl.int32), arg)
        m_new = tl.maximum(m, tmax)
        total = total * tl.exp(m - m_new) + tl.sum(tl.exp(t - m_new[None, :]), axis=0)
        m = m_new
        count += tl.sum((t > 0).astype(tl.int32), axis=0)
    tl.store(lse, (m + tl.log(total))[None, :], index=(0, j))
    tl.store(best, arg[None, :], index=(0, j))
    tl.store(positive, count[None, :], index=(0, j))


def _loop_lines(ir):
    """The lines of the first loop's body in a printed thread program."""
    lines = ir.splitlines()
    start = next(n for n, line in enumerate(lines) if line.lstrip().startswith("for "))
    indent = len(lines[start]) - len(lines[start].lstrip())
    body = []
    for line in lines[start + 1 :]:
        if len(line) - len(line.lstrip()) <= indent:
            break
        body.append(line)
    return body


@examples(30)
@given(seed=SEEDS, m=st.integers(1, 40), n=st.integers(1, 30))
def test_loop_carrying_running_column_reductions(seed, m, n):
    rng = np.random.default_rng(seed)
    x = _ints(rng, (m, n), -4, 5, np.float32)  # ties: the first maximum must win across tiles
    start = _ints(rng, n, -100, 100, np.int32)

    def make():
        outs = [np.zeros((1, n), d) for d in (np.float32, np.int32, np.int32)]
        return x.copy(), start.copy(), *outs

    def reference(x, start, *_):
        lse = np.log(np.exp(x.astype(np.float64)).sum(axis=0, keepdims=True))
        return lse, x.argmax(axis=0)[None, :].astype(np.int32), (start + (x > 0).sum(axis=0))[None, :].astype(np.int32)

    consts = dict(BM=6, BN=12)
    body = _loop_lines(thread_ir(online_columns_kernel, make, **consts))
    assert any(line.strip() == "barrier" for line in body) and any("shuffle_xor" in line for line in body)
    outputs = ("lse", "best", "positive")
    check(online_columns_kernel, tl.cdiv(n, 12), make, reference, outputs, rtol=2**-18, atol=2**-20, **consts)


# ------------------------------------------------------- where, 0-d values from x.shape


@tl.tile_kernel(num_threads=256)
def where_kernel(x, y, flags, out, stats, BM: tl.Constant, BN: tl.Constant):
    i, j = tl.block_id(0), tl.block_id(1)
    m, n = x.shape[0], x.shape[1]  # 0-d int64 values
    t = tl.load(x, index=(i, j), shape=(BM, BN))
    u = tl.load(y, index=(i, j), shape=(BM, BN))
    rows = i * BM + tl.arange(0, BM)
    cols = j * BN + tl.arange(0, BN)
    inside = (rows[:, None] < m) & (cols[None, :] < n)
    v = tl.where(t > u, t, u * 2)
    f = tl.load(flags, index=(j,), shape=(BN,))  # bool: through shared memory as bytes
    v = tl.where(f & (cols % 2 == 0), v, -v)  # a row condition broadcast over the tile
    v = tl.where(inside, v, (m * 1000 + n).astype(tl.float32))  # a 0-d value where the array ends
    tl.store(out, v, index=(i, j))
    count = tl.sum(inside.astype(tl.int32))
    pair = tl.where(tl.arange(0, 2) == 0, count, m * n - count)  # 0-d operands of a tile op
    tl.store(stats, pair[None, :], index=(i * tl.num_blocks(1) + j, 0))


@examples(30)
@given(seed=SEEDS, shape=tlt.shapes((3, 40)))
def test_where_and_scalars_from_array_shapes(seed, shape):
    rng = np.random.default_rng(seed)
    x, y = _ints(rng, shape, -9, 10, np.float32), _ints(rng, shape, -9, 10, np.float32)
    gm, gn = grid_of(shape, (3, 40))
    m, n = shape
    flags = rng.random(n) < 0.7

    def make():
        return (
            x.copy(),
            y.copy(),
            flags.copy(),
            np.zeros((gm * 3, gn * 40), np.float32),
            np.zeros((gm * gn, 2), np.int64),
        )

    def reference(x, y, flags, out, stats):
        v = np.where(x > y, x, y * 2)
        v = np.where(flags & (np.arange(n) % 2 == 0), v, -v)
        out = np.full(out.shape, m * 1000 + n, np.float32)
        out[:m, :n] = v
        inside = padded_blocks(np.ones(shape, np.int64), (3, 40), 0).reshape(gm * gn, -1).sum(axis=1)
        return out, np.stack([inside, m * n - inside], axis=1)

    check(where_kernel, (gm, gn), make, reference, ("out", "stats"), BM=3, BN=40)


@tl.tile_kernel(num_threads=64)
def counted_comparisons(out, bound, START: tl.Constant, STOP: tl.Constant):
    """``arange(START, STOP)`` against one integer, by each comparison both ways round, as a
    row and as a column (another layout)."""
    c = tl.arange(START, STOP)
    row, col = c[None, :], c[:, None]
    for k, r in enumerate([row < bound, row <= bound, row > bound, bound >= row, bound == row, row != bound]):
        tl.store(out, r, index=(k, 0))
    tl.store(out, tl.transpose(bound > col), index=(6, 0))
    tl.store(out, tl.transpose(col >= bound), index=(7, 0))


@examples(40)
@given(
    start=st.integers(-70, 70),
    n=st.integers(1, 200),
    at=st.integers(-3, 3),
    far=st.sampled_from([0, 2**31, 2**31 - 1, 2**63 - 1]),
    dtype=st.sampled_from([np.int32, np.int64, np.uint32, np.int16, np.uint64]),
    sign=st.sampled_from([1, -1]),
)
@example(start=1, n=1, at=0, far=2**63 - 1, dtype=np.uint64, sign=1)  # 2^63: -2^63 in int64
@example(start=0, n=65, at=1, far=2**63 - 1, dtype=np.uint64, sign=1)  # (bound less the thread's part wrapped)
@example(start=-70, n=130, at=0, far=2**63 - 1, dtype=np.int64, sign=1)
@example(start=0, n=128, at=0, far=2**63 - 1, dtype=np.int64, sign=-1)
def test_an_iota_compared_with_a_scalar(start, n, at, far, dtype, sign):
    """``cols < N``: each slot's constant against the bound less the thread's part
    (thread IR), exactly NumPy's comparisons for bounds inside the range, at its ends, far
    outside (int64, uint32) and of a dtype the rewrite leaves alone (uint64, which meets
    int32 in int64)."""
    stop = start + n
    value = sign * far + start + at * (n // 2) if far else start + at * (n // 2)
    info = np.iinfo(dtype)
    bound = dtype(min(max(value, info.min), info.max))

    def reference(out, bound):
        c = np.arange(start, stop, dtype=np.int32)
        bound = np.array(bound).view(np.int64)[()] if dtype is np.uint64 else bound  # (docs/dtypes.md: int64)
        rows = [c < bound, c <= bound, c > bound, bound >= c, bound == c, c != bound, bound > c, c >= bound]
        return np.stack(rows)

    make = lambda: (np.zeros((8, n), np.bool_), bound)  # noqa: E731
    check(counted_comparisons, (1,), make, reference, ("out",), START=start, STOP=stop)


@pytest.mark.parametrize("bound", [np.int32(7), np.int64(7)])  # (an int64 bound: the iota widened first)
def test_the_comparison_of_an_iota_adds_nothing_per_element(bound):
    ir = thread_ir(counted_comparisons, lambda: (np.zeros((8, 100), np.bool_), bound), START=3, STOP=103)
    compares = re.findall(r"= (lt|le|gt|ge|eq|ne) (\S+) (\S+)", ir)
    assert len(compares) >= 8 and all(re.fullmatch(r"i\d+|\d+:i32", a) for _, a, _ in compares), ir


def test_a_scratch_buffer_holding_live_data_is_not_handed_out_again():
    """A conversion between a shared store and its reads (a dot's accumulator, between the
    staged operands and the k loop) got the same buffer and overwrote them (issue 19, item 16)."""
    from tilelang._lower.lowering import Lowering

    lw = Lowering({}, 32)
    staged = lw.buffer(tl.float32, 64)
    nested = lw.buffer(tl.float16, 16)  # 16-bit floats are held as float32 in shared memory too
    assert nested != staged
    lw.release(nested)
    assert lw.buffer(tl.float32, 8) not in (staged, nested)  # released, but read until a barrier
    lw.barrier()
    assert lw.buffer(tl.float32, 8) == nested  # after it: uses one after another share it
    lw.release(staged)
    lw.barrier()
    assert lw.buffer(tl.float32, 8) == staged
    assert lw.shared[staged] == (tl.float32, 64)  # sized for its largest use


# ------------------------------------------------ conversions between arbitrary layouts


def random_layout(draw, shape, num_threads):
    """Any bit-permutation layout of ``shape``: each padded index bit on a register, lane or
    warp bit (at most 16 registers), hardware bits left over replicate."""
    from tilelang._lower.layout import Layout, log2, padded_size

    bits = draw(st.permutations(range(log2(padded_size(shape)))))
    hardware = 5 + log2(num_threads // 32)
    on_threads = draw(st.integers(max(len(bits) - 4, 0), min(hardware, len(bits))))
    places = draw(st.permutations([*bits[:on_threads], *[None] * (hardware - on_threads)]))
    return Layout(tuple(shape), tuple(bits[on_threads:]), tuple(places[:5]), tuple(places[5:]))


def convert_kernel():
    @tl.tile_kernel(num_threads=64)
    def convert(x, y, out, BM: tl.Constant, BN: tl.Constant):
        i = tl.block_id(0)
        a = tl.load(x, index=(i, 0), shape=(BM, BN))
        b = tl.load(y, index=(i, 0), shape=(BM, BN))  # its own layout: converted to a's for the product
        tl.store(out, a * b.astype(a.dtype), index=(i, 0))

    return convert


@contextlib.contextmanager
def layouts_of_2d_values(first, second):
    """Compile with every 2-d value in layout ``first`` but the second load's result in ``second``."""
    real = tl_kernel.assign_layouts

    def assign(program, num_threads=None, arch="sm_80", general=False):  # (the kernel for any array too)
        layouts, t = real(program, num_threads, arch, general)
        b = [e.outputs[0] for e in program.body.eqns if e.prim.name == "load"][1]
        return {v: (second if v is b else first) if len(lay.shape) == 2 else lay for v, lay in layouts.items()}, t

    tl_kernel.assign_layouts = assign
    try:
        yield
    finally:
        tl_kernel.assign_layouts = real


@pytest.mark.parametrize("y_dtype", ["int8", "bfloat16", "float32", "float64"])
@examples(6)
@given(seed=SEEDS, data=st.data())
def test_conversions_between_arbitrary_layouts(y_dtype, seed, data):
    """Loads, stores and a ``convert_layout`` under random layouts (registers, lanes and warps
    in any order, replicated or not) on a tile that is not a power of two."""
    m = data.draw(st.integers(1, 20))
    first, second = (random_layout(data.draw, (6, 20), 64) for _ in range(2))
    rng = np.random.default_rng(seed)
    x, y = _ints(rng, (m, 20), -20, 20, np.float32), _ints(rng, (m, 20), -20, 20, y_dtype)

    def make():
        return x.copy(), y.copy(), np.full((m, 20), -1.0, np.float32)

    kernel = convert_kernel()  # a new kernel object each time: its layouts are this example's
    with layouts_of_2d_values(first, second):
        layouts = tl.explain(kernel, *make(), backend="cpu", BM=6, BN=20)["layouts"]
        assert ("convert_layout" in layouts) == (first.lane + first.warp != second.lane + second.warp)
        check(kernel, tl.cdiv(m, 6), make, lambda x, y, out: x * y.astype(np.float32), ("out",), BM=6, BN=20)


@tl.tile_kernel(num_threads=128)
def scale_rows(x, s, out, total, BM: tl.Constant, BN: tl.Constant, WRITE_S: tl.Constant):
    """Each row of a tile scaled by its entry of ``s`` (a vector broadcast against a tile the
    sum over the loop is laid out for), summed over the column blocks; ``WRITE_S``: ``s`` is
    also written (then its load may not be repeated)."""
    i = tl.block_id(0)
    r = tl.load(s, index=(i,), shape=(BM,))
    m = tl.sum(tl.load(x, index=(i, 0), shape=(BM, BN)), axis=1)  # a statistic in a reduction's layout
    acc = tl.zeros((BM, BN), tl.float32)
    for j in tl.range(0, tl.cdiv(x.shape[1], BN)):
        t = tl.load(x, index=(i, j), shape=(BM, BN))
        acc += t * r[:, None] + m[:, None]
    tl.store(out, acc, index=(i, 0))
    tl.store(total, tl.sum(acc, axis=1), index=(i,))
    if WRITE_S:
        tl.store(s, r * 2.0, index=(i,))


@pytest.mark.parametrize("write_s", [False, True])
def test_vectors_are_reloaded_and_conversions_leave_loops(write_s):
    """A vector the loop reads in another layout: loaded again in that layout (no shared-memory
    round trip) unless the kernel writes its array; a loop-invariant value the loop reads in
    another layout (the row statistic ``m``): converted once, before the loop."""
    rng = np.random.default_rng(0)
    x, s = rng.standard_normal((37, 70)).astype(np.float32), rng.standard_normal(37).astype(np.float32)

    def make():
        return x.copy(), s.copy(), np.zeros((37, 16), np.float32), np.zeros(37, np.float32)

    layouts = tl.explain(scale_rows, *make(), backend="cpu", BM=16, BN=16, WRITE_S=write_s)["layouts"]
    loop = layouts[layouts.index("range_loop") :]
    assert "convert_layout" not in loop, loop  # (m converted before it; r reloaded there, or converted)
    assert layouts.count("= load[shape=(16,)] s") == (1 if write_s else 2), layouts

    def reference(x, s, out, total):
        blocks = -(-70 // 16)
        xp = np.zeros((37, blocks * 16), np.float32)
        xp[:, :70] = x
        acc = sum(xp[:, 16 * j : 16 * j + 16] for j in range(blocks)) * s[:, None]
        acc = acc + blocks * xp[:, :16].sum(axis=1, keepdims=True)
        return [acc, acc.sum(axis=1)] + ([s * 2] if write_s else [])

    outputs = ("out", "total", "s") if write_s else ("out", "total")
    check(scale_rows, tl.cdiv(37, 16), make, reference, outputs, rtol=1e-5, atol=1e-4, BM=16, BN=16, WRITE_S=write_s)
