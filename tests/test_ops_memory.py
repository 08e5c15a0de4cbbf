"""Memory ops against NumPy: load/store (index= and offset=, padding, partial and out-of-bounds
windows, 1-d to 3-d arrays), gather/scatter (masks, out-of-bounds indices), atomics (repeated
indices); plus the grid (block_id/num_blocks), runtime scalar arguments and ``x.shape[d]``.
"""

import numpy as np
import pytest
from _reference import compute
from hypothesis import given
from hypothesis import strategies as st

import tilelang as tl
from tilelang import testing as tlt

SMALL = st.integers(1, 7)


def _grid(shape, tile):
    return tuple(tl.cdiv(s, t) for s, t in zip(shape, tile))


def _padding(d):
    """A padding value for dtype ``d``: a Python scalar (weak) of the array's kind."""
    if d.kind == "b":
        return st.booleans()
    if d.kind == "f":
        return st.sampled_from([0.0, -1.5, 7.0, float("inf"), float("nan")])
    info = np.iinfo(d.np)
    return st.sampled_from(sorted({0, 1, 7, int(info.min), int(info.max)}))


def _window(x, starts, shape, pad):
    """NumPy reference of a load: ``x[starts[0]:starts[0]+shape[0], ...]`` with out-of-bounds elements = pad."""
    out = np.full(shape, pad, dtype=x.dtype)
    for pos in np.ndindex(*shape):
        src = tuple(s + p for s, p in zip(starts, pos))
        if all(0 <= c < n for c, n in zip(src, x.shape)):
            out[pos] = x[src]
    return out


# ----------------------------------------------------------------- load/store


@tl.tile_kernel
def copy_kernel(x, out, PAD: tl.Constant, TILE: tl.Constant):
    """Copy x into out tile by tile (1-d, 2-d or 3-d grids); out may be larger than x (padding shows)."""
    nd = len(TILE)
    index = tuple(tl.block_id(a) for a in range(nd))
    tl.store(out, tl.load(x, index=index, shape=TILE, padding=PAD), index=index)


@given(data=st.data(), d=tlt.dtypes(), tile=st.lists(SMALL, min_size=1, max_size=3).map(tuple))
def test_load_store_by_tile_index(data, d, tile):
    shape = data.draw(tlt.shapes(tile), label="shape")
    x = data.draw(tlt.arrays(d, shape), label="x")
    pad = data.draw(_padding(d), label="padding")
    grid = _grid(shape, tile)
    padded = tuple(g * t for g, t in zip(grid, tile))
    grow = data.draw(st.booleans(), label="out covers whole tiles")  # else out is x's size: the edges are cut
    out = np.zeros(padded if grow else shape, d.np)

    def reference(x, out):
        with np.errstate(over="ignore"):
            return _window(x, (0,) * len(shape), out.shape, np.array(pad).astype(d.np))

    tlt.check_kernel(copy_kernel, grid, args=(x, out), reference=reference, PAD=pad, TILE=tile)


@tl.tile_kernel
def offset_load_kernel(x, out, r0, c0, PAD: tl.Constant, BM: tl.Constant, BN: tl.Constant):
    """out[i-tile, j-tile] = the (BM, BN) window of x at element offset (r0 + i*BM, c0 + j*BN)."""
    i, j = tl.block_id(0), tl.block_id(1)
    t = tl.load(x, offset=(r0 + i * BM, c0 + j * BN), shape=(BM, BN), padding=PAD)
    tl.store(out, t, index=(i, j))


@given(data=st.data(), d=tlt.dtypes(), tile=st.tuples(SMALL, SMALL))
def test_load_at_element_offsets(data, d, tile):
    """Offsets may be negative or past the end: whatever falls outside x reads as padding."""
    shape = data.draw(tlt.shapes(tile, max_tiles=2), label="x shape")
    out_shape = data.draw(tlt.shapes(tile, max_tiles=2), label="out shape")
    x = data.draw(tlt.arrays(d, shape), label="x")
    r0 = data.draw(st.integers(-2 * shape[0] - 2, 2 * shape[0] + 2), label="r0")
    c0 = data.draw(st.integers(-2 * shape[1] - 2, 2 * shape[1] + 2), label="c0")
    pad = data.draw(_padding(d), label="padding")
    out = np.zeros(out_shape, d.np)

    def reference(x, out, r0, c0):
        with np.errstate(over="ignore"):
            return _window(x, (r0, c0), out_shape, np.array(pad).astype(d.np))

    tlt.check_kernel(
        offset_load_kernel,
        _grid(out_shape, tile),
        args=(x, out, r0, c0),
        reference=reference,
        outputs=("out",),
        PAD=pad,
        BM=tile[0],
        BN=tile[1],
    )


@tl.tile_kernel
def offset_store_kernel(x, out, r0, c0, z0, SHAPE: tl.Constant):
    """Store the whole of x (one tile) into out at element offset (z0, r0, c0)."""
    tl.store(out, tl.load(x, offset=(0, 0, 0), shape=SHAPE), offset=(z0, r0, c0))


@given(data=st.data(), d=tlt.dtypes(), shape=st.tuples(SMALL, SMALL, SMALL))
def test_store_at_element_offsets(data, d, shape):
    """Elements of a stored tile that fall outside the array are skipped; the rest of out is untouched."""
    out_shape = data.draw(st.tuples(SMALL, SMALL, SMALL), label="out shape")
    x = data.draw(tlt.arrays(d, shape), label="x")
    out = data.draw(tlt.arrays(d, out_shape), label="out")
    z0, r0, c0 = (data.draw(st.integers(-s - 1, o + 1), label="offset") for s, o in zip(shape, out_shape))

    def reference(x, out, r0, c0, z0):
        for pos in np.ndindex(*shape):
            dst = (z0 + pos[0], r0 + pos[1], c0 + pos[2])
            if all(0 <= c < n for c, n in zip(dst, out_shape)):
                out[dst] = x[pos]
        return out

    tlt.check_kernel(
        offset_store_kernel, 1, args=(x, out, r0, c0, z0), reference=reference, outputs=("out",), SHAPE=shape
    )


@tl.tile_kernel
def runtime_index_kernel(x, out, k, BN: tl.Constant):
    """Tile index from a runtime scalar (and a Python int): out's tile 0 = x's tile k."""
    tl.store(out, tl.load(x, index=(k,), shape=(BN,), padding=-1), index=(0,))


@given(data=st.data(), bn=SMALL, d=tlt.dtypes("i"))
def test_tile_index_from_a_runtime_scalar(data, bn, d):
    (n,) = data.draw(tlt.shapes(bn), label="shape")
    x = data.draw(tlt.arrays(d, (n,)), label="x")
    k = data.draw(st.integers(-2, tl.cdiv(n, bn) + 1), label="k")
    out = np.zeros(bn, d.np)
    tlt.check_kernel(
        runtime_index_kernel,
        1,
        args=(x, out, k),
        reference=lambda x, out, k: _window(x, (k * bn,), (bn,), -1),
        outputs=("out",),
        BN=bn,
    )


@tl.tile_kernel
def strong_padding_kernel(x, out, N: tl.Constant):
    tl.store(out, tl.load(x, index=(0,), shape=(N,), padding=np.float64(1.0)), index=(0,))


def test_padding_must_match_the_array_dtype():
    """A strongly typed padding of another dtype is an error (a Python scalar converts)."""
    with pytest.raises(tl.TileTypeError, match="padding"):
        strong_padding_kernel[1](np.zeros(3, np.float32), np.zeros(4, np.float32), N=4)
    expected = np.array([0.0, 0, 0, 1])
    tlt.check_kernel(strong_padding_kernel, 1, args=(np.zeros(3), np.zeros(4)), reference=lambda *a: expected, N=4)


@tl.tile_kernel
def bad_memory_kernel(x, out, WHAT: tl.Constant):
    if WHAT == "both":
        t = tl.load(x, index=(0,), offset=(0,), shape=(4,))
    elif WHAT == "neither":
        t = tl.load(x, shape=(4,))
    elif WHAT == "no_shape":
        t = tl.load(x, index=(0,))
    elif WHAT == "rank":
        t = tl.load(x, index=(0, 0), shape=(4, 1))
    elif WHAT == "float_index":
        t = tl.load(x, offset=(1.5,), shape=(4,))
    elif WHAT == "store_dtype":
        t = tl.load(x, index=(0,), shape=(4,)).astype(tl.float64)
    elif WHAT == "not_array":
        t = tl.load(tl.zeros((4,)), index=(0,), shape=(4,))
    tl.store(out, t, index=(0,))


@pytest.mark.parametrize(
    "what, error",
    [
        ("both", tl.TileValueError),
        ("neither", tl.TileValueError),
        ("no_shape", tl.TileValueError),
        ("rank", tl.TileShapeError),
        ("float_index", tl.TileTypeError),
        ("store_dtype", tl.TileTypeError),
        ("not_array", tl.TileTypeError),
    ],
)
def test_load_store_errors(what, error):
    with pytest.raises(error):
        bad_memory_kernel[1](np.zeros(4, np.float32), np.zeros(4, np.float32), WHAT=what)


# -------------------------------------------------------------- gather/scatter


@tl.tile_kernel
def gather_kernel(table, idx, mask, out, PAD: tl.Constant, MASKED: tl.Constant, BN: tl.Constant):
    j = tl.block_id(0)
    ids = tl.load(idx, index=(j,), shape=(BN,))
    if MASKED:
        m = tl.load(mask, index=(j,), shape=(BN,))
        t = tl.gather(table, ids, mask=m, padding=PAD)
    else:
        t = tl.gather(table, ids, padding=PAD)
    tl.store(out, t, index=(j,))


@given(data=st.data(), d=tlt.dtypes(), di=tlt.dtypes("iu"), masked=st.booleans(), bn=SMALL)
def test_gather_1d(data, d, di, masked, bn):
    """Masked-off elements and out-of-bounds indices (negative too) read as padding."""
    size = data.draw(st.integers(1, 20), label="table size")
    table = data.draw(tlt.arrays(d, (size,)), label="table")
    (n,) = data.draw(tlt.shapes(bn), label="shape")
    idx = data.draw(tlt.arrays(di, (n,), min_value=-3, max_value=size + 2), label="idx")
    mask = data.draw(tlt.arrays(tl.bool_, (n,)), label="mask")
    pad = data.draw(_padding(d), label="padding")
    out = np.zeros(n, d.np)

    def reference(table, idx, mask, out):
        with np.errstate(over="ignore"):
            res = np.full(n, np.array(pad).astype(d.np), d.np)
        for p, k in enumerate(idx.astype(np.int64)):
            if 0 <= k < size and (mask[p] or not masked):
                res[p] = table[k]
        return res

    tlt.check_kernel(
        gather_kernel,
        tl.cdiv(n, bn),
        args=(table, idx, mask, out),
        reference=reference,
        PAD=pad,
        MASKED=masked,
        BN=bn,
    )


@tl.tile_kernel
def gather_rows_kernel(table, rows, out, BM: tl.Constant, BN: tl.Constant):
    """out[p, q] = table[rows[p], q] (row and column index tiles broadcast together; arange columns)."""
    i, j = tl.block_id(0), tl.block_id(1)
    r = tl.load(rows, index=(i,), shape=(BM,))
    cols = tl.arange(0, BN) + j * BN
    tl.store(out, tl.gather(table, r[:, None], cols[None, :], padding=-7), index=(i, j))


@given(data=st.data(), d=tlt.dtypes("if"), tile=st.tuples(SMALL, SMALL))
def test_gather_2d_with_broadcast_indices(data, d, tile):
    r, c = data.draw(st.tuples(st.integers(1, 9), st.integers(1, 9)), label="table shape")
    table = data.draw(tlt.arrays(d, (r, c)), label="table")
    m, n = data.draw(tlt.shapes(tile), label="out shape")
    rows = data.draw(tlt.arrays(tl.int32, (m,), min_value=-2, max_value=r + 1), label="rows")
    out = np.zeros((m, n), d.np)

    def reference(table, rows, out):
        res = np.full((m, n), -7, d.np)
        for p in range(m):
            for q in range(n):
                if 0 <= rows[p] < r and q < c:
                    res[p, q] = table[rows[p], q]
        return res

    tlt.check_kernel(
        gather_rows_kernel, _grid((m, n), tile), args=(table, rows, out), reference=reference, BM=tile[0], BN=tile[1]
    )


@tl.tile_kernel
def scatter_kernel(out, idx, vals, mask, MASKED: tl.Constant, BN: tl.Constant):
    j = tl.block_id(0)
    ids = tl.load(idx, index=(j,), shape=(BN,), padding=-1)  # the padded lanes write out of bounds: skipped
    v = tl.load(vals, index=(j,), shape=(BN,))
    if MASKED:
        tl.scatter(out, ids, v, mask=tl.load(mask, index=(j,), shape=(BN,)))
    else:
        tl.scatter(out, ids, v)


@given(data=st.data(), d=tlt.dtypes(), di=tlt.dtypes("i"), masked=st.booleans(), bn=SMALL)
def test_scatter_1d(data, d, di, masked, bn):
    """Unique indices, some out of bounds: those and the masked-off lanes write nothing."""
    size = data.draw(st.integers(1, 20), label="out size")
    targets = data.draw(st.permutations(range(-3, min(size + 3, int(np.iinfo(di.np).max)))), label="targets")
    n = data.draw(st.integers(1, len(targets)), label="n")
    idx = np.array(targets[:n], di.np)
    vals = data.draw(tlt.arrays(d, (n,)), label="values")
    mask = data.draw(tlt.arrays(tl.bool_, (n,)), label="mask")
    out = data.draw(tlt.arrays(d, (size,)), label="out")

    def reference(out, idx, vals, mask):
        for p, k in enumerate(idx):
            if 0 <= k < size and (mask[p] or not masked):
                out[k] = vals[p]
        return out

    tlt.check_kernel(
        scatter_kernel,
        tl.cdiv(n, bn),
        args=(out, idx, vals, mask),
        reference=reference,
        outputs=(0,),
        MASKED=masked,
        BN=bn,
    )


def test_scatter_with_repeated_indices_writes_one_of_the_values():
    idx = np.array([2, 2, 2, 0, 5, 5], np.int32)
    vals = np.array([10, 20, 30, 40, 50, 60], np.int32)
    for backend in tlt.default_backends():
        out = np.full(6, -1, np.int32)
        scatter_kernel[2](out, idx, vals, np.ones(6, bool), MASKED=False, BN=3, backend=backend)
        assert out[2] in (10, 20, 30) and out[5] in (50, 60) and out[0] == 40, backend
        assert list(out[[1, 3, 4]]) == [-1, -1, -1], backend


@tl.tile_kernel
def scatter_2d_kernel(out, rows, vals, BM: tl.Constant, BN: tl.Constant):
    """out[rows[p], q] = vals[p, q]: a 2-d scatter of broadcast index tiles."""
    i, j = tl.block_id(0), tl.block_id(1)
    r = tl.load(rows, index=(i,), shape=(BM,), padding=-1)
    cols = tl.arange(0, BN) + j * BN
    v = tl.load(vals, index=(i, j), shape=(BM, BN))
    tl.scatter(out, r[:, None], cols[None, :], v, mask=cols[None, :] < vals.shape[1])  # the padded lanes: no


@given(data=st.data(), d=tlt.dtypes("uf"), tile=st.tuples(SMALL, SMALL))
def test_scatter_2d(data, d, tile):
    m, n = data.draw(tlt.shapes(tile, max_tiles=2), label="values shape")
    r = data.draw(st.integers(1, 9), label="out rows")
    targets = data.draw(st.permutations(range(-2, max(r, m) + 2)), label="targets")
    rows = np.array(targets[:m], np.int64)
    c = data.draw(st.integers(1, n + 2), label="out cols")
    vals = data.draw(tlt.arrays(d, (m, n)), label="values")
    out = np.zeros((r, c), d.np)

    def reference(out, rows, vals):
        for p in range(m):
            if 0 <= rows[p] < r:
                k = min(n, c)
                out[rows[p], :k] = vals[p, :k]
        return out

    tlt.check_kernel(
        scatter_2d_kernel,
        _grid((m, n), tile),
        args=(out, rows, vals),
        reference=reference,
        outputs=(0,),
        BM=tile[0],
        BN=tile[1],
    )


# --------------------------------------------------------------------- atomics

ATOMICS = {"add": tl.atomic_add, "max": tl.atomic_max, "min": tl.atomic_min}
NP_ATOMIC = {"add": np.add, "max": np.maximum, "min": np.minimum}


@tl.tile_kernel
def atomic_kernel(out, idx, vals, mask, OP: tl.Constant, MASKED: tl.Constant, SCALAR: tl.Constant, BN: tl.Constant):
    j = tl.block_id(0)
    ids = tl.load(idx, index=(j,), shape=(BN,), padding=-1)
    v = SCALAR if SCALAR is not None else tl.load(vals, index=(j,), shape=(BN,))
    m = tl.load(mask, index=(j,), shape=(BN,)) if MASKED else None
    ATOMICS[OP](out, ids, v, mask=m)


@pytest.mark.parametrize("op", sorted(ATOMICS))
@given(
    data=st.data(),
    d=tlt.dtypes("iuf", exclude=[tl.float8_e4m3fn, tl.float8_e5m2]),  # (no float8 atomics)
    masked=st.booleans(),
    scalar=st.sampled_from([None, None, 1, 3]),
    bn=SMALL,
)
def test_atomics_with_repeated_indices(op, data, d, masked, scalar, bn):
    """Every lane takes effect, repeated indices included; out-of-bounds and masked-off lanes are skipped.

    Values are small integers (also for floats), so the result does not depend on the order of the adds.
    """
    size = data.draw(st.integers(1, 8), label="out size")
    n = data.draw(st.integers(1, 40), label="n")
    idx = data.draw(tlt.arrays(tl.int32, (n,), min_value=-2, max_value=size + 1), label="idx")
    vals = data.draw(tlt.arrays(tl.int8, (n,), min_value=-8, max_value=8), label="values").astype(d.np)
    mask = data.draw(tlt.arrays(tl.bool_, (n,)), label="mask")
    out = data.draw(tlt.arrays(tl.int8, (size,), min_value=-20, max_value=20), label="out").astype(d.np)

    def reference(out, idx, vals, mask):
        with np.errstate(over="ignore"):
            v = np.full(n, scalar).astype(d.np) if scalar is not None else vals
            for p in range(n):
                if 0 <= idx[p] < size and (mask[p] or not masked):
                    out[idx[p]] = NP_ATOMIC[op](out[idx[p]], v[p])
        return out

    tlt.check_kernel(
        atomic_kernel,
        tl.cdiv(n, bn),
        args=(out, idx, vals, mask),
        reference=reference,
        outputs=(0,),
        OP=op,
        MASKED=masked,
        SCALAR=scalar,
        BN=bn,
    )


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_atomic_max_min_let_nan_win(op, dtype):
    """As NumPy's maximum/minimum, on every backend (numba's GPU float atomics drop NaN):
    a NaN value makes its slot NaN, a NaN already stored stays; infinities compare."""
    rng = np.random.default_rng(5)
    n, size = 300, 8
    idx = rng.integers(0, size, n).astype(np.int32)
    vals = rng.standard_normal(n).astype(dtype)
    vals[idx == 1] = np.nan
    vals[np.flatnonzero(idx == 2)[::3]] = np.nan  # NaN among numbers
    vals[idx == 3] = np.inf if op == "max" else -np.inf
    out = rng.standard_normal(size).astype(dtype)
    out[4] = np.nan

    def reference(out, idx, vals, mask):
        for i, v in zip(idx, vals):
            out[i] = NP_ATOMIC[op](out[i], v)
        return out

    tlt.check_kernel(
        atomic_kernel,
        tl.cdiv(n, 64),
        args=(out, idx, vals, np.ones(n, bool)),
        reference=reference,
        outputs=(0,),
        OP=op,
        MASKED=False,
        SCALAR=None,
        BN=64,
    )
    assert np.isnan(reference(out.copy(), idx, vals, None)[[1, 2, 4]]).all()


@tl.tile_kernel
def histogram_2d_kernel(hist, rows, cols, BN: tl.Constant):
    j = tl.block_id(0)
    r = tl.load(rows, index=(j,), shape=(BN,), padding=-1)
    c = tl.load(cols, index=(j,), shape=(BN,), padding=-1)
    tl.atomic_add(hist, r, c, 1)


def test_atomic_add_2d_histogram():
    rng = np.random.default_rng(1)
    rows, cols = rng.integers(-1, 5, 101).astype(np.int32), rng.integers(0, 7, 101).astype(np.int64)
    hist = np.zeros((4, 6), np.int32)
    expected = np.zeros((4, 6), np.int32)
    ok = (rows >= 0) & (rows < 4) & (cols < 6)
    np.add.at(expected, (rows[ok], cols[ok]), 1)
    tlt.check_kernel(
        histogram_2d_kernel,
        tl.cdiv(101, 16),
        args=(hist, rows, cols),
        reference=lambda *a: expected,
        outputs=(0,),
        BN=16,
    )


@pytest.mark.parametrize("op", sorted(ATOMICS))
def test_atomics_on_bool_arrays_are_errors(op):
    out = np.zeros(4, bool)
    with pytest.raises(tl.TileTypeError):
        atomic_kernel[1](out, np.zeros(4, np.int32), np.zeros(4, bool), out, OP=op, MASKED=False, SCALAR=None, BN=4)


@tl.tile_kernel
def bad_indexed_kernel(out, WHAT: tl.Constant):
    ids = tl.arange(0, 4)
    if WHAT == "float_index":
        tl.scatter(out, ids.astype(tl.float32), tl.zeros((4,)))
    elif WHAT == "int_mask":
        tl.scatter(out, ids, tl.zeros((4,)), mask=ids)
    elif WHAT == "values_dtype":
        tl.scatter(out, ids, tl.zeros((4,), tl.float64))
    elif WHAT == "index_count":
        tl.gather(out, ids, ids)
    elif WHAT == "shapes":
        tl.scatter(out, ids, tl.zeros((5,)))


@pytest.mark.parametrize(
    "what, error",
    [
        ("float_index", tl.TileTypeError),
        ("int_mask", tl.TileTypeError),
        ("values_dtype", tl.TileTypeError),
        ("index_count", tl.TileShapeError),
        ("shapes", tl.TileShapeError),
    ],
)
def test_gather_scatter_errors(what, error):
    with pytest.raises(error):
        bad_indexed_kernel[1](np.zeros(8, np.float32), WHAT=what)


# ------------------------------------------------------------------------ grid


@tl.tile_kernel
def grid_kernel(ids, counts):
    """ids[b0, b1, b2, a] = block_id(a); counts[b0, b1, b2, a] = num_blocks(a)."""
    b = (tl.block_id(0), tl.block_id(1), tl.block_id(2))
    a = tl.arange(0, 3)[None, None, None, :]
    own = tl.where(a == 0, b[0], tl.where(a == 1, b[1], b[2]))
    n = tl.where(a == 0, tl.num_blocks(0), tl.where(a == 1, tl.num_blocks(1), tl.num_blocks(2)))
    tl.store(ids, own, index=(b[0], b[1], b[2], 0))
    tl.store(counts, n, index=(b[0], b[1], b[2], 0))


@given(
    grid=st.one_of(st.tuples(st.integers(1, 5)), st.tuples(SMALL, SMALL), st.tuples(SMALL, st.integers(1, 3), SMALL))
)
def test_block_id_and_num_blocks(grid):
    full = tuple(grid) + (1,) * (3 - len(grid))
    ids, counts = np.full(full + (3,), -1, np.int32), np.full(full + (3,), -1, np.int32)
    expected_ids = np.stack(np.meshgrid(*(np.arange(g) for g in full), indexing="ij"), axis=-1).astype(np.int32)
    expected_counts = np.broadcast_to(np.array(full, np.int32), full + (3,))
    launch_grid = grid[0] if len(grid) == 1 and grid[0] % 2 else grid  # an int grid too
    tlt.check_kernel(
        grid_kernel,
        launch_grid,
        args=(ids, counts),
        reference=lambda ids, counts: (expected_ids, expected_counts),
        outputs=("ids", "counts"),
    )


def test_an_empty_grid_runs_no_block():
    ids, counts = np.full((1, 1, 1, 3), -1, np.int32), np.full((1, 1, 1, 3), -1, np.int32)
    tlt.check_kernel(
        grid_kernel, (0, 4), args=(ids, counts), reference=lambda ids, counts: (ids, counts), outputs=(0, 1)
    )


# ------------------------------------------------------- runtime scalars and shapes


@tl.tile_kernel
def axpy_kernel(x, y, out, alpha, beta, n, BN: tl.Constant):
    """out = alpha * x + y + beta over the first n elements (n a runtime int: a mask, not a shape)."""
    j = tl.block_id(0)
    offs = tl.arange(0, BN) + j * BN
    a = tl.load(x, index=(j,), shape=(BN,))
    b = tl.load(y, index=(j,), shape=(BN,))
    keep = offs < n
    tl.store(out, tl.where(keep, alpha * a + b + beta, tl.load(out, index=(j,), shape=(BN,))), index=(j,))


@given(data=st.data(), d=tlt.dtypes("f"), bn=SMALL)
def test_runtime_int_and_float_scalars(data, d, bn):
    (size,) = data.draw(tlt.shapes(bn), label="shape")
    x = data.draw(tlt.arrays(d, (size,), min_value=-100, max_value=100), label="x")
    y = data.draw(tlt.arrays(d, (size,), min_value=-100, max_value=100), label="y")
    out = data.draw(tlt.arrays(d, (size,), min_value=-100, max_value=100), label="out")
    alpha = data.draw(st.sampled_from([0.5, -2.0, 3.0]), label="alpha")  # exact in every float dtype
    beta = data.draw(st.integers(-5, 5), label="beta")
    n = data.draw(st.integers(-1, size + 1), label="n")

    def reference(x, y, out, alpha, beta, n):
        r = compute_axpy(x, y, alpha, beta, d)
        return np.where(np.arange(size) < n, r, out)

    tlt.check_kernel(
        axpy_kernel, tl.cdiv(size, bn), args=(x, y, out, alpha, beta, n), reference=reference, outputs=("out",), BN=bn
    )


def compute_axpy(x, y, alpha, beta, d):
    """alpha * x + y + beta, one op at a time (the scalars are exact in every float dtype)."""
    return compute(np.add, d, compute(np.add, d, compute(np.multiply, d, alpha, x), y), beta)


@tl.tile_kernel
def row_sums_kernel(x, out, shapes, BM: tl.Constant, BN: tl.Constant):
    """Row sums with the number of column tiles from x.shape[1] (a runtime int64); x.shape is recorded too."""
    i = tl.block_id(0)
    acc = tl.zeros((BM,), tl.int64)
    for k in tl.range(0, tl.cdiv(x.shape[1], BN)):
        acc += tl.sum(tl.load(x, index=(i, k), shape=(BM, BN)).astype(tl.int64), axis=1)
    tl.store(out, acc, index=(i,))
    m, n = x.shape
    tl.scatter(shapes, tl.arange(0, 2), tl.where(tl.arange(0, 2) == 0, m, n), mask=i == 0)  # block 0 only


@given(data=st.data(), tile=st.tuples(SMALL, SMALL))
def test_runtime_array_shapes(data, tile):
    m, n = data.draw(tlt.shapes(tile), label="shape")
    x = data.draw(tlt.arrays(tl.int32, (m, n), min_value=-1000, max_value=1000), label="x")
    out, shapes = np.zeros(m, np.int64), np.zeros(2, np.int64)
    tlt.check_kernel(
        row_sums_kernel,
        tl.cdiv(m, tile[0]),
        args=(x, out, shapes),
        reference=lambda x, out, shapes: (x.astype(np.int64).sum(axis=1), np.array([m, n])),
        outputs=("out", "shapes"),
        BM=tile[0],
        BN=tile[1],
    )


# ---------------------------------------------- offsets and indices beyond int64 (issue 19, item 4)

# The interpreter is the reference; TILELANG_TEST_BACKENDS=interpret,cuda adds the GPU on a machine with one.
BACKENDS = ("interpret", "cpu") + (("cuda",) if "cuda" in tlt.default_backends() else ())


@tl.tile_kernel
def far_window_kernel(x, loaded, by_index, stored, off):
    """Windows at ``off`` (elements) and at tile index ``off`` (``off * 4`` elements)."""
    tl.store(loaded, tl.load(x, offset=(off,), shape=(8,), padding=-1.0), index=(0,))
    tl.store(by_index, tl.load(x, index=(off,), shape=(4,), padding=-1.0), index=(0,))
    tl.store(stored, tl.full((4,), 9.0, tl.float32), offset=(off,))


def _far(dtype):
    info = np.iinfo(dtype)
    values = {0, 2, int(info.max), int(info.max) - 1, int(info.min), int(info.min) + 3, -2, 2**62, 2**61 + 1, 2**63}
    return [dtype(v) for v in sorted(v for v in values if info.min <= v <= info.max)]


@pytest.mark.parametrize("dtype", [np.uint64, np.int64, np.uint32, np.int32, np.uint8])
def test_windows_far_out_are_skipped_whatever_the_offset_dtype(dtype):
    """uint64 offsets of 2**63 or more were converted to negative int64 (2**64 - 2 wrote out[0:2]),
    an int64 tile index times the tile size wrapped: bounds are decided on the true value."""
    x = np.arange(8, dtype=np.float32)
    for off in _far(dtype):
        true = int(off)
        want = {
            "loaded": np.array([x[true + i] if 0 <= true + i < 8 else -1.0 for i in range(8)], np.float32),
            "by_index": np.array([x[4 * true + i] if 0 <= 4 * true + i < 8 else -1.0 for i in range(4)], np.float32),
            "stored": np.array([9.0 if 0 <= i - true < 4 else 0.0 for i in range(8)], np.float32),
        }
        for backend in BACKENDS:
            outs = [np.zeros(8, np.float32), np.zeros(4, np.float32), np.zeros(8, np.float32)]
            far_window_kernel[1](x, *outs, off, backend=backend)
            for (name, want_it), got in zip(want.items(), outs):
                np.testing.assert_array_equal(got, want_it, err_msg=f"{name} at {dtype.__name__}({true}) on {backend}")


@tl.tile_kernel
def far_indices_kernel(x, idx, gathered, out):
    ids = tl.load(idx, index=(0,), shape=(8,))
    tl.store(gathered, tl.gather(x, ids, padding=-1.0), index=(0,))
    tl.scatter(out, ids, tl.full((8,), 9.0, tl.float32))
    tl.atomic_add(out, ids, tl.full((8,), 1.0, tl.float32))


def test_uint64_indices_beyond_int64_are_out_of_bounds():
    x = np.arange(8, dtype=np.float32)
    idx = np.array([2**64 - 1, 2**63, 2**63 + 3, 3, 2**64 - 8, 0, 2**62, 7], np.uint64)
    inside = idx < 8
    want_gathered = np.where(inside, x[np.where(inside, idx, 0).astype(np.int64)], -1.0).astype(np.float32)
    want_out = np.zeros(8, np.float32)
    want_out[idx[inside].astype(np.int64)] = 10.0
    for backend in BACKENDS:
        gathered, out = np.zeros(8, np.float32), np.zeros(8, np.float32)
        far_indices_kernel[1](x, idx, gathered, out, backend=backend)
        np.testing.assert_array_equal(gathered, want_gathered, err_msg=backend)
        np.testing.assert_array_equal(out, want_out, err_msg=backend)


@tl.tile_kernel
def scatter_and_add_by_keyword(out, counts):
    idx = tl.arange(0, 8) % 4
    tl.scatter(out, idx, values=idx.astype(tl.float32) * 2, mask=idx < 3)
    tl.atomic_add(counts, idx, values=tl.full((8,), 1, tl.int32))


def test_values_by_keyword():
    """`tl.scatter(out, idx, values=v)` as its docstring reads raised Python's TypeError."""
    for backend in tlt.default_backends():
        out, counts = np.full(4, -1.0, np.float32), np.zeros(4, np.int32)
        scatter_and_add_by_keyword[1](out, counts, backend=backend)
        np.testing.assert_array_equal(out, [0.0, 2.0, 4.0, -1.0], err_msg=backend)
        np.testing.assert_array_equal(counts, [2, 2, 2, 2], err_msg=backend)
