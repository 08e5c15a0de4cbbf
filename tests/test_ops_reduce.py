"""Reductions (sum, max, min, prod, argmax, argmin) and scans (cumsum, cumprod) against NumPy.

The kernels reduce each (BM, BN) tile of an array whose sizes are not tile multiples; the
edge tiles are padded with the reduction's neutral value. The reference pads the array
the same way with NumPy, cuts it into blocks and reduces each block.

Accumulation (from the docs of tl.sum): bool and narrow ints accumulate in int32 (unsigned
in uint32) and return that; 16-bit floats accumulate in float32 and round once.
"""

import numpy as np
import pytest
from _blocks import from_blocks, padded_blocks
from hypothesis import given
from hypothesis import strategies as st

import tilelang as tl
from tilelang import testing as tlt

TILES = st.sampled_from([(1, 6), (4, 4), (5, 3), (7, 9)])
REDUCERS = {"sum": tl.sum, "prod": tl.prod, "max": tl.max, "min": tl.min, "argmax": tl.argmax, "argmin": tl.argmin}
NUMPY = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min, "argmax": np.argmax, "argmin": np.argmin}
AXES = [None, 0, 1, -1]


def accumulator(d):
    """The documented accumulator (and result) dtype of sum/prod/cumsum/cumprod without dtype=."""
    if d.kind == "b" or (d.kind in "iu" and d.bits < 32):
        return tl.uint32 if d.kind == "u" else tl.int32
    return d


def neutral(op, d):
    """The padding that leaves a reduction unchanged (for argmax/argmin: never strictly better)."""
    if op in ("sum", "cumsum"):
        return 0
    if op in ("prod", "cumprod"):
        return 1
    low = op in ("max", "argmax")
    if d.kind == "b":
        return not low
    if d.kind == "f":
        return -np.inf if low else np.inf
    info = np.iinfo(d.np)
    return int(info.min if low else info.max)


def unblock(r, axis, shape, tile):
    """Per-block results (GM, GN[, BM or BN]) laid out as the kernel stores them."""
    (m, n), (bm, bn) = shape, tile
    gm, gn = r.shape[:2]
    if axis is None:
        return r
    if axis == 0:
        return r.reshape(gm, gn * bn)[:, :n]
    return r.transpose(0, 2, 1).reshape(gm * bm, gn)[:m]


def out_shape(axis, shape, tile):
    (m, n), (bm, bn) = shape, tile
    return {None: (tl.cdiv(m, bm), tl.cdiv(n, bn)), 0: (tl.cdiv(m, bm), n)}.get(axis, (m, tl.cdiv(n, bn)))


@tl.tile_kernel
def reduce_kernel(
    x, out, OP: tl.Constant, AXIS: tl.Constant, KEEP: tl.Constant, DT: tl.Constant, PAD: tl.Constant, TILE: tl.Constant
):
    i, j = tl.block_id(0), tl.block_id(1)
    t = tl.load(x, index=(i, j), shape=TILE, padding=PAD)
    kwargs = {} if DT is None else {"dtype": DT}
    r = REDUCERS[OP](t, axis=AXIS, keepdims=KEEP, **kwargs)
    if not KEEP:
        r = tl.reshape(r, (1, 1)) if AXIS is None else (r[None, :] if AXIS == 0 else r[:, None])
    tl.store(out, r, index=(i, j))


def _float_reduction_tolerance(op, blocks, axes, acc, result):
    """Summation in a different order: |error| <= n * eps(acc) * sum|x|, plus the result's own rounding."""
    rtol, atol = tlt.tolerance(result)
    n = int(np.prod([blocks.shape[a] for a in axes]))
    eps = float(np.finfo(np.float32 if acc.bits <= 32 else np.float64).eps)
    if op == "sum":
        bound = float(np.max(np.sum(np.abs(blocks.astype(np.float64)), axis=axes), initial=0))
        return rtol, atol + n * eps * bound
    return rtol + n * eps, atol  # products of values of magnitude 1/2..2: relative error grows with n


@pytest.mark.parametrize("op", sorted(REDUCERS))
@given(data=st.data(), d=tlt.dtypes(), axis=st.sampled_from(AXES), keepdims=st.booleans(), tile=TILES)
def test_reductions(op, data, d, axis, keepdims, tile):
    shape = data.draw(tlt.shapes(tile), label="shape")
    if op == "prod" and d.kind == "f":  # |products| of up to 63 factors stay inside float16's range
        x = data.draw(tlt.arrays(d, shape, min_value=0.85, max_value=1.15), label="x")
        x = np.where(np.arange(x.size).reshape(shape) % 2 == 0, x, -x)
    elif op == "sum" and d.kind == "f":
        x = data.draw(tlt.arrays(d, shape, min_value=-100, max_value=100), label="x")
    else:
        x = data.draw(tlt.arrays(d, shape, allow_nan_inf=data.draw(st.booleans())), label="x")
    arg = op.startswith("arg")
    result = tl.int32 if arg else (accumulator(d) if op in ("sum", "prod") else d)
    pad = neutral(op, d)
    blocks = padded_blocks(x, tile, np.array(pad).astype(d.np))
    axes = (2, 3) if axis is None else (2 + axis % 2,)

    def reference(x, out):
        with np.errstate(all="ignore"):
            if arg:
                flat = blocks.reshape(blocks.shape[:2] + (-1,)) if axis is None else blocks
                r = NUMPY[op](flat, axis=-1 if axis is None else axes[0])
            elif op in ("sum", "prod") and d.kind != "f":
                wide = np.uint64 if d.kind == "u" else np.int64  # exact modulo 2**64, then wrapped
                r = NUMPY[op](blocks.astype(wide), axis=axes)
            elif op in ("sum", "prod"):
                r = NUMPY[op](blocks.astype(np.float64), axis=axes)
            else:
                r = NUMPY[op](blocks, axis=axes)
            return unblock(np.asarray(r).astype(result.np), axis, shape, tile)

    rtol = atol = None
    if op in ("sum", "prod") and d.kind == "f":
        rtol, atol = _float_reduction_tolerance(op, blocks, axes, tl.float32 if d.bits < 32 else d, d)
    out = np.zeros(out_shape(axis, shape, tile), result.np)
    grid = (tl.cdiv(shape[0], tile[0]), tl.cdiv(shape[1], tile[1]))
    kwargs = dict(OP=op, AXIS=axis, KEEP=keepdims, DT=None, PAD=pad, TILE=tile)
    tlt.check_kernel(reduce_kernel, grid, args=(x, out), reference=reference, rtol=rtol, atol=atol, **kwargs)


@given(
    data=st.data(),
    op=st.sampled_from(["sum", "prod"]),
    d=tlt.dtypes("biu"),
    acc=st.sampled_from([tl.int8, tl.int64, tl.uint16, tl.float64]),
    axis=st.sampled_from(AXES),
    tile=TILES,
)
def test_sum_and_prod_with_dtype(data, op, d, acc, axis, tile):
    """``dtype=`` picks the accumulator and the result dtype (integers wrap in it)."""
    shape = data.draw(tlt.shapes(tile), label="shape")
    lim = 3 if op == "sum" else 2  # products of 0, ±1, ±2 are exact in float64
    x = data.draw(tlt.arrays(d, shape, min_value=-lim, max_value=lim), label="x")
    blocks = padded_blocks(x, tile, np.array(neutral(op, d)).astype(d.np))
    axes = (2, 3) if axis is None else (2 + axis % 2,)
    with np.errstate(all="ignore"):
        wide = blocks.astype(acc.np).astype(np.float64 if acc.kind == "f" else np.int64)
        expected = unblock(NUMPY[op](wide, axis=axes).astype(acc.np), axis, shape, tile)
    out = np.zeros(out_shape(axis, shape, tile), acc.np)
    grid = (tl.cdiv(shape[0], tile[0]), tl.cdiv(shape[1], tile[1]))
    kwargs = dict(OP=op, AXIS=axis, KEEP=False, DT=acc, PAD=neutral(op, d), TILE=tile)
    tlt.check_kernel(reduce_kernel, grid, args=(x, out), reference=lambda x, out: expected, **kwargs)


@pytest.mark.parametrize("d", [tl.float16, tl.bfloat16])
@pytest.mark.parametrize("op", ["sum", "cumsum"])
def test_16bit_float_sums_accumulate_in_float32(op, d):
    """Ones added to a large value vanish if the partial sums are rounded to 16 bits; in float32 they stay.

    Every partial sum is an integer below 2**24, so the float32 result does not depend on the order.
    """
    big = 2048 if d is tl.float16 else 256  # the ulp of big is 2: big + 1 rounds back to big in 16 bits
    x = np.array([[big] + [1] * 63], d.np)
    if op == "sum":
        expected = np.array([[np.float32(big + 63)]]).astype(d.np)
        kernel, kwargs = reduce_kernel, dict(OP="sum", AXIS=1, KEEP=True, DT=None, PAD=0, TILE=(1, 64))
    else:
        expected = np.cumsum(x.astype(np.float32), axis=1).astype(d.np)
        kernel, kwargs = SCAN_KERNELS[None], dict(OP="cumsum", AXIS=1, DT=None, PAD=0, TILE=(1, 64))
    out = np.zeros(expected.shape, d.np)
    tlt.check_kernel(kernel, (1, 1), args=(x, out), reference=lambda x, out: expected, rtol=0, atol=0, **kwargs)


@tl.tile_kernel
def reduce3d_kernel(x, out, OP: tl.Constant, AXIS: tl.Constant, SHAPE: tl.Constant):
    t = tl.load(x, offset=(0, 0, 0), shape=SHAPE)
    tl.store(out, REDUCERS[OP](t, axis=AXIS, keepdims=True), offset=(0, 0, 0))


@given(
    data=st.data(),
    op=st.sampled_from(["sum", "max", "min", "argmax", "argmin"]),
    d=tlt.dtypes("iuf", exclude=[tl.float16, tl.bfloat16]),
    axis=st.sampled_from([None, 0, 1, 2, -1, -2, -3]),
    shape=st.tuples(st.integers(1, 5), st.integers(1, 6), st.integers(1, 7)),
)
def test_reductions_of_3d_tiles(data, op, d, axis, shape):
    x = data.draw(tlt.arrays(d, shape, min_value=-1000, max_value=1000), label="x")
    result = tl.int32 if op.startswith("arg") else (accumulator(d) if op == "sum" else d)
    rtol = atol = None
    with np.errstate(all="ignore"):
        if op.startswith("arg") and axis is None:
            expected = np.asarray(NUMPY[op](x)).reshape(1, 1, 1)
        elif op == "sum":
            expected = np.sum(x.astype(np.float64 if d.kind == "f" else np.int64), axis=axis, keepdims=True)
            if d.kind == "f":  # summation order: |error| <= n * eps * sum|x|
                atol = x.size * float(tlt.ml_dtypes.finfo(d.np).eps) * float(np.abs(x.astype(np.float64)).sum())
        else:
            expected = np.asarray(NUMPY[op](x, axis=axis, keepdims=True))
    expected = expected.astype(result.np)
    out = np.zeros(expected.shape, result.np)
    kwargs = dict(OP=op, AXIS=axis, SHAPE=shape)
    tlt.check_kernel(
        reduce3d_kernel, 1, args=(x, out), reference=lambda x, out: expected, rtol=rtol, atol=atol, **kwargs
    )


@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_reductions_pick_the_first_of_ties_and_nan(op):
    x = np.array([[1, 5, 5, 0, 0], [np.nan, 2, np.nan, 9, -9], [3, 3, 3, 3, 3]], np.float32)
    for axis in (None, 0, 1):
        expected = np.asarray(NUMPY[op](x, axis=axis)).astype(np.int32)
        out = np.zeros(out_shape(axis, x.shape, x.shape), np.int32)
        kwargs = dict(OP=op, AXIS=axis, KEEP=True, DT=None, PAD=0, TILE=x.shape)
        ref = expected.reshape(out.shape)
        tlt.check_kernel(reduce_kernel, (1, 1), args=(x, out), reference=lambda x, out, r=ref: r, **kwargs)


# ---------------------------------------------------------------------- scans

SCANS = {"cumsum": (tl.cumsum, np.cumsum), "cumprod": (tl.cumprod, np.cumprod)}


def scan_kernel(x, out, OP: tl.Constant, AXIS: tl.Constant, DT: tl.Constant, PAD: tl.Constant, TILE: tl.Constant):
    i, j = tl.block_id(0), tl.block_id(1)
    t = tl.load(x, index=(i, j), shape=TILE, padding=PAD)
    r = SCANS[OP][0](t, axis=AXIS) if DT is None else SCANS[OP][0](t, axis=AXIS, dtype=DT)
    tl.store(out, r, index=(i, j))


# the default threads (32 for these tiles) and 256: the axis across warps (the butterfly's
# exchanges through shared memory), elements replicated
SCAN_KERNELS = {t: tl.tile_kernel(num_threads=t)(scan_kernel) for t in (None, 256)}


@pytest.mark.parametrize("op", sorted(SCANS))
@given(
    data=st.data(),
    d=tlt.dtypes(),
    axis=st.sampled_from([0, 1, -1, -2]),
    dt=st.sampled_from([None, None, tl.int64, tl.float32]),
    tile=TILES,
    threads=st.sampled_from([None, 256]),
)
def test_scans(op, data, d, axis, dt, tile, threads):
    if op == "cumsum" and data.draw(st.booleans(), label="long"):  # (products of hundreds of factors overflow)
        tile = data.draw(st.sampled_from([(2, 300), (500, 1)]), label="long tile")
    shape = data.draw(tlt.shapes(tile), label="shape")
    result = accumulator(d) if dt is None else dt
    if d.kind == "f" or result.kind == "f":  # keep float products and sums well inside the range
        lo, hi = (0.5, 2) if op == "cumprod" else (-100, 100)
        x = data.draw(tlt.arrays(d, shape, min_value=lo, max_value=hi), label="x")
    else:  # integers wrap: the whole range
        x = data.draw(tlt.arrays(d, shape), label="x")
    pad = neutral(op, d)
    blocks = padded_blocks(x, tile, np.array(pad).astype(d.np))
    ax = 2 + axis % 2
    exact = result.kind != "f"
    with np.errstate(all="ignore"):
        wide = blocks.astype(result.np).astype(np.int64 if exact else np.float64)
        if exact and result.kind == "u":
            wide = blocks.astype(result.np).astype(np.uint64)
        r = SCANS[op][1](wide, axis=ax).astype(result.np)
    gm, gn, bm, bn = blocks.shape
    expected = from_blocks(r, shape)
    rtol = atol = None
    if not exact:
        n = blocks.shape[ax]
        eps = float(np.finfo(np.float32 if result.bits <= 32 else np.float64).eps)
        rtol, atol = tlt.tolerance(result)
        if op == "cumsum":
            atol += n * eps * float(np.max(np.sum(np.abs(wide), axis=ax), initial=0))
        else:
            rtol += n * eps
    out = np.zeros(shape, result.np)
    grid = (gm, gn)
    kwargs = dict(OP=op, AXIS=axis, DT=dt, PAD=pad, TILE=tile)
    tlt.check_kernel(
        SCAN_KERNELS[threads], grid, args=(x, out), reference=lambda x, out: expected, rtol=rtol, atol=atol, **kwargs
    )


# --------------------------------------------------------------------- errors


@tl.tile_kernel
def bad_reduce_kernel(x, out, WHAT: tl.Constant):
    t = tl.load(x, index=(0,), shape=(4,))
    if WHAT == "axis":
        r = tl.sum(t, axis=1)
    elif WHAT == "scalar":
        r = tl.max(tl.sum(t))
    elif WHAT == "scan_axis":
        r = tl.cumsum(t, axis=-2)
    else:
        r = tl.argmax(t, axis=WHAT)
    tl.store(out, tl.reshape(r, (1,)), index=(0,))


@pytest.mark.parametrize(
    "what, error",
    [
        ("axis", tl.TileValueError),
        ("scalar", tl.TileShapeError),
        ("scan_axis", tl.TileValueError),
        (2, tl.TileValueError),
    ],
)
def test_reduction_errors(what, error):
    with pytest.raises(error):
        bad_reduce_kernel[1](np.ones(4, np.float32), np.zeros(1, np.float32), WHAT=what)
