"""Shape ops (reshape, transpose/permute/.T, expand_dims and t[None, :], broadcast_to, flip,
join/split/interleave, ravel) and tile creation (zeros, full, arange) against NumPy, over every
dtype and non-power-of-two shapes."""

import _blocks as tlb
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tilelang as tl
from tilelang import testing as tlt

SMALL = st.integers(1, 7)


def _grid(shape, tile):
    return tuple(tl.cdiv(s, t) for s, t in zip(shape, tile))


# -------------------------------------------------------------- transpose


@tl.tile_kernel
def transpose_kernel(x, out, HOW: tl.Constant, BM: tl.Constant, BN: tl.Constant):
    """out = x.T, tile by tile: the tile at (i, j) goes to (j, i)."""
    i, j = tl.block_id(0), tl.block_id(1)
    t = tl.load(x, index=(i, j), shape=(BM, BN))
    if HOW == "T":
        r = t.T
    elif HOW == "transpose":
        r = tl.transpose(t)
    elif HOW == "permute":
        r = tl.permute(t, (1, 0))
    else:
        r = tl.transpose(t, 1, 0)
    tl.store(out, r, index=(j, i))


@given(
    data=st.data(),
    d=tlt.dtypes(),
    how=st.sampled_from(["T", "transpose", "permute", "axes"]),
    tile=st.tuples(SMALL, SMALL),
)
def test_transpose_2d_across_the_grid(data, d, how, tile):
    shape = data.draw(tlt.shapes(tile), label="shape")
    x = data.draw(tlt.arrays(d, shape), label="x")
    out = np.zeros(shape[::-1], d.np)
    tlt.check_kernel(
        transpose_kernel,
        _grid(shape, tile),
        args=(x, out),
        reference=lambda x, out: x.T,
        HOW=how,
        BM=tile[0],
        BN=tile[1],
    )


@tl.tile_kernel
def permute3d_kernel(x, out, PERM: tl.Constant, HOW: tl.Constant, SHAPE: tl.Constant):
    t = tl.load(x, offset=(0, 0, 0), shape=SHAPE)
    if HOW == "permute":
        r = tl.permute(t, PERM)
    elif HOW == "transpose_tuple":
        r = tl.transpose(t, PERM)
    elif HOW == "transpose_args":
        r = tl.transpose(t, *PERM)
    else:
        r = tl.transpose(t)  # reverses the axes
    tl.store(out, r, offset=(0, 0, 0))


@given(
    data=st.data(),
    d=tlt.dtypes(),
    perm=st.permutations([0, 1, 2]),
    negative=st.booleans(),
    how=st.sampled_from(["permute", "transpose_tuple", "transpose_args", "reverse"]),
    shape=st.tuples(SMALL, SMALL, SMALL),
)
def test_permute_3d(data, d, perm, negative, how, shape):
    x = data.draw(tlt.arrays(d, shape), label="x")
    perm = tuple(p - 3 for p in perm) if negative else tuple(perm)  # negative axes count from the end
    expected = np.transpose(x, None if how == "reverse" else perm)
    out = np.zeros(expected.shape, d.np)
    tlt.check_kernel(
        permute3d_kernel, 1, args=(x, out), reference=lambda x, out: expected, PERM=perm, HOW=how, SHAPE=shape
    )


# ---------------------------------------------------------------- reshape


def _factorizations(n):
    """Shapes of 1 to 3 dims with ``n`` elements."""
    divisors = [k for k in range(1, n + 1) if n % k == 0]
    two = [(a, n // a) for a in divisors]
    three = [(a, b, n // (a * b)) for a in divisors for b in divisors if n % (a * b) == 0]
    return [(n,)] + two + three


@tl.tile_kernel
def reshape_kernel(x, out, SHAPE: tl.Constant, NEW: tl.Constant, HOW: tl.Constant):
    t = tl.load(x, offset=(0,) * len(SHAPE), shape=SHAPE)
    if HOW == "function":
        r = tl.reshape(t, NEW)
    elif HOW == "method_tuple":
        r = t.reshape(NEW)
    else:
        r = t.reshape(*NEW)
    tl.store(out, r, offset=(0,) * len(NEW))


@given(
    data=st.data(),
    d=tlt.dtypes(),
    shape=st.sampled_from([(6,), (12,), (2, 9), (5, 3), (4, 1, 6), (7,)]),
    how=st.sampled_from(["function", "method_tuple", "method_args"]),
    minus_one=st.booleans(),
)
def test_reshape(data, d, shape, how, minus_one):
    size = int(np.prod(shape))
    new = data.draw(st.sampled_from(_factorizations(size)), label="new shape")
    x = data.draw(tlt.arrays(d, shape), label="x")
    expected = x.reshape(new)
    if minus_one:
        k = data.draw(st.integers(0, len(new) - 1), label="-1 at")
        new = new[:k] + (-1,) + new[k + 1 :]
    out = np.zeros(expected.shape, d.np)
    tlt.check_kernel(reshape_kernel, 1, args=(x, out), reference=lambda x, out: expected, SHAPE=shape, NEW=new, HOW=how)


# ---------------------------------------------------- new axes and broadcasting


@tl.tile_kernel
def new_axis_kernel(x, out, HOW: tl.Constant, BN: tl.Constant):
    """A 1-d tile of x, as a row (1, BN) or a column (BN, 1) of out."""
    j = tl.block_id(0)
    t = tl.load(x, index=(j,), shape=(BN,))
    r = {
        "None_first": lambda: t[None, :],
        "ellipsis_first": lambda: t[None, ...],
        "expand_0": lambda: tl.expand_dims(t, 0),
        "expand_-2": lambda: tl.expand_dims(t, -2),
        "None_last": lambda: t[:, None],
        "ellipsis_last": lambda: t[..., None],
        "expand_1": lambda: tl.expand_dims(t, 1),
        "expand_-1": lambda: tl.expand_dims(t, -1),
    }[HOW]()
    tl.store(out, r, index=(0, j) if HOW in ROW_WAYS else (j, 0))


ROW_WAYS = ["None_first", "ellipsis_first", "expand_0", "expand_-2"]
COLUMN_WAYS = ["None_last", "ellipsis_last", "expand_1", "expand_-1"]


@given(data=st.data(), d=tlt.dtypes(), how=st.sampled_from(ROW_WAYS + COLUMN_WAYS), bn=SMALL)
def test_new_axes(data, d, how, bn):
    (n,) = data.draw(tlt.shapes(bn), label="shape")
    x = data.draw(tlt.arrays(d, (n,)), label="x")
    row = how in ROW_WAYS
    out = np.zeros((1, n) if row else (n, 1), d.np)
    tlt.check_kernel(
        new_axis_kernel,
        tl.cdiv(n, bn),
        args=(x, out),
        reference=lambda x, out: x[None, :] if row else x[:, None],
        HOW=how,
        BN=bn,
    )


KEYS = {  # slices are not hashable (so not Constants) before Python 3.12: pass a name
    "None,:,:": (None, slice(None), slice(None)),
    ":,None": (slice(None), None),
    ":,None,:": (slice(None), None, slice(None)),
    "...,None": (Ellipsis, None),
    "None,...": (None, Ellipsis),
    ":,None,...": (slice(None), None, Ellipsis),
}


@tl.tile_kernel
def new_axes_3d_kernel(x, out, KEY: tl.Constant, SHAPE: tl.Constant):
    t = tl.load(x, offset=(0, 0), shape=SHAPE)
    tl.store(out, t[KEYS[KEY]], offset=(0, 0, 0))


@pytest.mark.parametrize("key", sorted(KEYS))
def test_new_axes_on_2d_tiles(key):
    x = np.arange(15, dtype=np.int16).reshape(3, 5)
    expected = x[KEYS[key]]
    out = np.zeros(expected.shape, np.int16)
    tlt.check_kernel(new_axes_3d_kernel, 1, args=(x, out), reference=lambda x, out: expected, KEY=key, SHAPE=(3, 5))


@tl.tile_kernel
def broadcast_kernel(x, out, FROM: tl.Constant, BM: tl.Constant, BN: tl.Constant):
    """Broadcast a piece of x to the (BM, BN) tile at (i, j) of out."""
    i, j = tl.block_id(0), tl.block_id(1)
    if FROM == "row":  # x is (1, N)
        t = tl.load(x, index=(0, j), shape=(1, BN))
    elif FROM == "vector":  # x is (N,)
        t = tl.load(x, index=(j,), shape=(BN,))
    elif FROM == "column":  # x is (M, 1)
        t = tl.load(x, index=(i, 0), shape=(BM, 1))
    else:  # x is (1,): a 0-d tile
        t = tl.reshape(tl.load(x, index=(0,), shape=(1,)), ())
    tl.store(out, tl.broadcast_to(t, (BM, BN)), index=(i, j))


@given(
    data=st.data(),
    d=tlt.dtypes(),
    source=st.sampled_from(["row", "vector", "column", "scalar"]),
    tile=st.tuples(SMALL, SMALL),
)
def test_broadcast_to(data, d, source, tile):
    m, n = shape = data.draw(tlt.shapes(tile), label="shape")
    x_shape = {"row": (1, n), "vector": (n,), "column": (m, 1), "scalar": (1,)}[source]
    x = data.draw(tlt.arrays(d, x_shape), label="x")
    out = np.zeros(shape, d.np)
    source_view = x.reshape(()) if source == "scalar" else x
    tlt.check_kernel(
        broadcast_kernel,
        _grid(shape, tile),
        args=(x, out),
        reference=lambda x, out: np.broadcast_to(source_view, shape),
        FROM=source,
        BM=tile[0],
        BN=tile[1],
    )


# ------------------------------------------------ flip, join, split, interleave


@tl.tile_kernel
def flip_kernel(x, out, AXIS: tl.Constant, BM: tl.Constant, REST: tl.Constant):
    """Block i flips its BM rows (padded with zeros past the end) along AXIS and stores them back."""
    i = tl.block_id(0)
    start = (i * BM,) + (0,) * len(REST)
    t = tl.load(x, offset=start, shape=(BM, *REST))
    tl.store(out, tl.flip(t, AXIS) if AXIS != "default" else tl.flip(t), offset=start)


@given(
    data=st.data(),
    d=tlt.dtypes(),
    bm=st.integers(1, 9),
    rest=st.lists(st.integers(1, 40), min_size=0, max_size=2),
)
def test_flip(data, d, bm, rest):
    ndim = 1 + len(rest)
    axis = data.draw(
        st.one_of(
            st.integers(-ndim, ndim - 1),
            st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim, unique=True).map(tuple),
            st.just(None),
            st.just("default"),
        ),
        label="axis",
    )
    m = data.draw(st.integers(1, 3 * bm), label="rows")
    x = data.draw(tlt.arrays(d, (m, *rest)), label="x")
    g = tl.cdiv(m, bm)

    def reference(x, out):
        padded = np.zeros((g * bm, *rest), d.np)
        padded[:m] = x
        blocks = padded.reshape(g, bm, *rest)
        axes = (ndim - 1,) if axis == "default" else range(ndim) if axis is None else np.atleast_1d(axis) % ndim
        flipped = np.flip(blocks, tuple(1 + a for a in axes))
        return flipped.reshape(g * bm, *rest)[:m]

    out = np.zeros_like(x)
    tlt.check_kernel(flip_kernel, g, args=(x, out), reference=reference, AXIS=axis, BM=bm, REST=tuple(rest))


def _index_key(spec):
    """A tile index from its hashable description (a Constant): ("s", start, stop, step) a
    slice, ("i", k) an integer, ("n",) None, ("e",) an ellipsis."""
    parts = {"s": lambda *b: slice(*b), "i": lambda k: k, "n": lambda: None, "e": lambda: Ellipsis}
    return tuple(parts[kind](*rest) for kind, *rest in spec)


@tl.tile_kernel
def index_kernel(x, out, SHAPE: tl.Constant, KEY: tl.Constant):
    t = tl.load(x, offset=(0,) * len(SHAPE), shape=SHAPE)
    r = t[_index_key(KEY)]
    tl.store(out, r.reshape((1,)) if r.ndim == 0 else r, offset=(0,) * max(r.ndim, 1))


def _index_specs(ndim):
    bound = st.one_of(st.none(), st.integers(-25, 25))
    axis = st.one_of(
        st.tuples(st.just("s"), bound, bound, st.one_of(st.none(), st.sampled_from([1, 2, 3, -1, -2, 5]))),
        st.tuples(st.just("i"), st.integers(-6, 5)),
    )
    extra = st.lists(st.sampled_from([("n",), ("e",)]), max_size=2)
    return st.tuples(st.lists(axis, min_size=0, max_size=ndim), extra, st.randoms()).map(
        lambda p: _mixed(p[0], p[1], p[2])
    )


def _mixed(axes, extra, rng):
    spec = list(axes)
    if ("e",) in extra:
        spec.insert(rng.randint(0, len(spec)), ("e",))
    if ("n",) in extra:
        spec.insert(rng.randint(0, len(spec)), ("n",))
    return tuple(spec)


@given(data=st.data(), d=tlt.dtypes(), shape=st.lists(st.integers(1, 20), min_size=1, max_size=3).map(tuple))
def test_static_indexing_and_slicing(data, d, shape):
    """Integers, slices of any step (``t[::-1]`` a flip, ``t[1::3]`` a stride, ``t[2:5]`` a crop),
    new axes and an ellipsis, as NumPy indexes."""
    spec = data.draw(_index_specs(len(shape)), label="key")
    x = data.draw(tlt.arrays(d, shape), label="x")
    try:
        want = x[_index_key(spec)]
    except IndexError:  # (an integer out of range)
        want = None
    if want is None or want.size == 0:
        error = tl.TileShapeError
        with pytest.raises(error):
            index_kernel[1](x, np.zeros(1, d.np), SHAPE=shape, KEY=spec, backend="interpret")
        return
    out = np.zeros(want.shape or (1,), d.np)
    tlt.check_kernel(
        index_kernel, 1, args=(x, out), reference=lambda x, out: want.reshape(out.shape), SHAPE=shape, KEY=spec
    )


@pytest.mark.parametrize(
    "tile, axis, paths",
    [((4, 64), 1, {"shuffle"}), ((64, 4), None, {"shuffle"}), ((2, 1024), 0, set()), ((64, 64), 0, {"shared"})],
)  # (paths of float16 layouts: 8 consecutive elements a thread; (2, 1024): 16 a thread, its rows in registers)
@pytest.mark.parametrize("d", [tl.float16, tl.int64, tl.bool_])
def test_flip_of_a_power_of_two_axis_stays_in_registers_and_lanes(tile, axis, paths, d):
    """Reversing a power-of-two axis complements its index bits: register slots renamed, lanes
    by one shuffle (no shared memory); only warp bits go through shared memory."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(tile) * 50).astype(d.np)
    flip = np.flip(x, axis)
    tlt.check_kernel(flip_kernel, 1, args=(x, np.zeros_like(x)), reference=lambda x, out: flip, AXIS=axis,
                     BM=tile[0], REST=tile[1:])  # fmt: skip
    program = tl.explain(flip_kernel, x, x, AXIS=axis, BM=tile[0], REST=tile[1:])["thread_ir"]
    assert d != tl.float16 or tlb.paths(program) == paths


@pytest.mark.parametrize(
    "shape, key, paths",
    [
        ((2, 1024), (("i", 1), ("s", None, None, None)), set()),
        ((2, 256), (("s", None, None, None), ("s", 128, 256, None)), {"shuffle"}),
        ((2, 1024), (("s", 0, 1, None), ("s", 256, 512, None)), {"shared"}),
    ],
)  # (float16: 8 elements of a row a thread, then lanes, warps (from 1024 elements on), then the rows in registers)
@pytest.mark.parametrize("d", [tl.float16, tl.int32, tl.bool_])
def test_a_slice_of_an_aligned_run_moves_through_registers_and_lanes(shape, key, paths, d):
    """A run of a power-of-two length at a multiple of it (or one index): register bits fixed
    are a pick of slots, lane bits fixed a shuffle from the partner lane; shared memory only
    where warps hold the run's fixed bits."""
    x = np.random.default_rng(1).integers(-1, 2, shape).astype(d.np)  # (a third of the bools False)
    want = x[_index_key(key)]
    out = np.zeros(want.shape, d.np)
    tlt.check_kernel(index_kernel, 1, args=(x, out), reference=lambda x, out: want, SHAPE=shape, KEY=key)
    program = tl.explain(index_kernel, x, out, SHAPE=shape, KEY=key)["thread_ir"]
    assert d != tl.float16 or tlb.paths(program) == paths


@tl.tile_kernel
def pairs_kernel(x, y, z, joined, first, second, woven, SHAPE: tl.Constant, OTHER: tl.Constant):
    """join(x, y) (y a tile of x's shape, a row broadcast over it, or a scalar), split of the
    pairs z, interleave of x and y; every result stored."""
    zeros = (0,) * len(SHAPE)
    a = tl.load(x, offset=zeros, shape=SHAPE)
    if OTHER == "tile":
        b = tl.load(y, offset=zeros, shape=SHAPE)
    elif OTHER == "row":
        b = tl.load(y, offset=(0,), shape=SHAPE[-1:])
    else:
        b = tl.full((), 3, x.dtype)
    tl.store(joined, tl.join(a, b), offset=zeros + (0,))
    p, q = tl.split(tl.load(z, offset=zeros + (0,), shape=SHAPE + (2,)))
    tl.store(first, p, offset=zeros)
    tl.store(second, q, offset=zeros)
    tl.store(woven, tl.interleave(a, b), offset=zeros)


@given(data=st.data(), d=tlt.dtypes(), other=st.sampled_from(["tile", "row", "scalar"]))
def test_join_split_interleave(data, d, other):
    shape = data.draw(st.sampled_from([(1,), (5,), (2, 3), (7, 40), (3, 1, 6), (1, 33)]), label="shape")
    x = data.draw(tlt.arrays(d, shape), label="x")
    y = data.draw(tlt.arrays(d, shape if other == "tile" else shape[-1:]), label="y")
    z = data.draw(tlt.arrays(d, shape + (2,)), label="z")
    outs = (
        np.zeros(shape + (2,), d.np),
        np.zeros(shape, d.np),
        np.zeros(shape, d.np),
        np.zeros(shape[:-1] + (2 * shape[-1],), d.np),
    )

    def reference(x, y, z, *_):
        b = np.broadcast_to(y if other != "scalar" else np.array(3).astype(d.np), shape)
        pairs = np.stack([x, b], axis=-1)
        return pairs, z[..., 0], z[..., 1], pairs.reshape(outs[3].shape)

    tlt.check_kernel(
        pairs_kernel,
        1,
        args=(x, y, z, *outs),
        reference=reference,
        outputs=("joined", "first", "second", "woven"),
        SHAPE=shape,
        OTHER=other,
    )


@tl.tile_kernel
def cat_kernel(x, y, out, A: tl.Constant, B: tl.Constant, AXIS: tl.Constant):
    a = tl.load(x, offset=(0,) * len(A), shape=A)
    b = tl.load(y, offset=(0,) * len(B), shape=B)
    tl.store(out, tl.cat(a, b, axis=AXIS), offset=(0,) * len(A))


@given(data=st.data(), d=tlt.dtypes(), other=tlt.dtypes(), shape=st.lists(st.integers(1, 9), min_size=1, max_size=3))
def test_cat(data, d, other, shape):
    """np.concatenate of two tiles along any axis, lengths not powers of two, dtypes promoted."""
    axis = data.draw(st.integers(-len(shape), len(shape) - 1), label="axis")
    second = list(shape)
    second[axis] = data.draw(st.integers(1, 9), label="length")
    x = data.draw(tlt.arrays(d, tuple(shape)), label="x")
    y = data.draw(tlt.arrays(other, tuple(second)), label="y")
    result = tl.dtypes.promote_strong(d, other)
    want = np.concatenate([x.astype(result.np), y.astype(result.np)], axis)
    tlt.check_kernel(cat_kernel, 1, args=(x, y, np.zeros(want.shape, result.np)), reference=lambda *_: want,
                     A=tuple(shape), B=tuple(second), AXIS=axis)  # fmt: skip


@tl.tile_kernel
def joined_scalars_kernel(out, swapped, v, HOW: tl.Constant):
    pair = tl.join(v, 2.5) if HOW == "join" else tl.interleave(v, 2.5)
    tl.store(out, pair * 2, index=(0,))
    a, b = tl.split(tl.arange(0, 2) * 3 + 1)  # (0-d halves of an open value: the pairs take the default layout)
    tl.store(swapped, tl.join(b, a), index=(0,))


@pytest.mark.parametrize("backend", tlt.default_backends())
@pytest.mark.parametrize("how", ["join", "interleave"])
def test_pairs_of_scalars(backend, how):
    out, swapped = np.zeros(2, np.float32), np.zeros(2, np.int32)
    joined_scalars_kernel[1](out, swapped, 1.25, HOW=how, backend=backend)
    np.testing.assert_array_equal(out, [2.5, 5.0])
    np.testing.assert_array_equal(swapped, [4, 1])


@tl.tile_kernel
def rotary_kernel(x, cos, sin, out, M: tl.Constant, D: tl.Constant):
    """Rotary embedding of interleaved pairs, the docstring's example of tl.split."""
    t = tl.load(x, index=(0, 0), shape=(M, D)).astype(tl.float32)
    c = tl.load(cos, index=(0, 0), shape=(M, D // 2))
    s = tl.load(sin, index=(0, 0), shape=(M, D // 2))
    even, odd = tl.split(t.reshape((M, D // 2, 2)))
    tl.store(out, tl.join(even * c - odd * s, even * s + odd * c).reshape((M, D)).astype(out.dtype), index=(0, 0))


@pytest.mark.parametrize("m, d", [(4, 64), (3, 20)])  # (20: a non-power-of-two row; misaligned rows of cos)
def test_rotary_embedding_with_split_and_join(m, d):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, d)).astype(np.float32)
    angle = rng.uniform(0, 6, (m, d // 2)).astype(np.float32)
    cos, sin = np.cos(angle), np.sin(angle)

    def reference(x, cos, sin, out):
        even, odd = x[:, 0::2].astype(np.float64), x[:, 1::2].astype(np.float64)
        return np.stack([even * cos - odd * sin, even * sin + odd * cos], axis=-1).reshape(m, d)

    tlt.check_kernel(rotary_kernel, 1, args=(x, cos, sin, np.zeros_like(x)), reference=reference, M=m, D=d)
    if d == 64:  # the pairs are split and joined in registers: only cos and sin, loaded 4 to a thread, are converted
        assert tl.explain(rotary_kernel, x, cos, sin, x, M=m, D=d)["layouts"].count("convert_layout") == 2


@tl.tile_kernel
def ravel_kernel(x, out, SHAPE: tl.Constant):
    tl.store(out, tl.ravel(tl.load(x, offset=(0, 0), shape=SHAPE)), index=(0,))


@given(d=tlt.dtypes(), shape=st.tuples(SMALL, SMALL))
def test_ravel(d, shape):
    x = np.arange(np.prod(shape)).reshape(shape).astype(d.np)
    out = np.zeros(x.size, d.np)
    tlt.check_kernel(ravel_kernel, 1, args=(x, out), reference=lambda x, out: x.ravel(), SHAPE=shape)


# -------------------------------------------------------------- shape errors


@tl.tile_kernel
def bad_shape_kernel(x, out, WHAT: tl.Constant):
    t = tl.load(x, offset=(0, 0), shape=(4, 6))
    if WHAT == "reshape_size":
        t = tl.reshape(t, (5, 5))
    elif WHAT == "permute_repeat":
        t = tl.permute(t, (0, 0))
    elif WHAT == "permute_axis":
        t = tl.permute(t, (0, 2))
    elif WHAT == "broadcast":
        t = tl.broadcast_to(t, (4, 7))
    elif WHAT == "broadcast_fewer_dims":
        t = tl.broadcast_to(t, (6,))
    elif WHAT == "runtime_index":
        t = t[tl.block_id(0)]
    elif WHAT == "float_index":
        t = t[1.5:]
    elif WHAT == "index_range":
        t = t[4]
    elif WHAT == "empty_slice":
        t = t[:, 3:3]
    elif WHAT == "zero_step":
        t = t[::0]
    elif WHAT == "too_many":
        t = t[:, :, :]
    elif WHAT == "two_ellipses":
        t = t[..., None, ...]
    elif WHAT == "expand_axis":
        t = tl.expand_dims(t, 3)
    elif WHAT == "broadcast_mismatch":
        t = t + tl.load(x, offset=(0, 0), shape=(4, 5))
    elif WHAT == "split_not_pairs":
        t, _ = tl.split(t)
    elif WHAT == "flip_axis":
        t = tl.flip(t, 2)
    elif WHAT == "join_shapes":
        t = tl.join(t, tl.load(x, offset=(0, 0), shape=(4, 5)))[..., 0]
    elif WHAT == "cat_off_axis":
        t = tl.cat(t, tl.load(x, offset=(0, 0), shape=(4, 5)), axis=0)[:4, :]
    elif WHAT == "cat_rank":
        t = tl.cat(t, tl.load(x, offset=(0,), shape=(6,)))[:4, :]
    tl.store(out, t, offset=(0, 0))


@pytest.mark.parametrize(
    "what, error",
    [
        ("reshape_size", tl.TileShapeError),
        ("permute_repeat", tl.TileValueError),
        ("permute_axis", tl.TileValueError),
        ("broadcast", tl.TileShapeError),
        ("broadcast_fewer_dims", tl.TileShapeError),
        ("runtime_index", tl.TileSyntaxError),
        ("float_index", tl.TileTypeError),
        ("index_range", tl.TileShapeError),
        ("empty_slice", tl.TileShapeError),
        ("zero_step", tl.TileValueError),
        ("too_many", tl.TileShapeError),
        ("two_ellipses", tl.TileSyntaxError),
        ("expand_axis", tl.TileValueError),
        ("broadcast_mismatch", tl.TileShapeError),
        ("split_not_pairs", tl.TileShapeError),
        ("flip_axis", tl.TileValueError),
        ("join_shapes", tl.TileShapeError),
        ("cat_off_axis", tl.TileShapeError),
        ("cat_rank", tl.TileShapeError),
    ],
)
def test_shape_errors(what, error):
    with pytest.raises(error):
        bad_shape_kernel[1](np.zeros((4, 6), np.float32), np.zeros((4, 6), np.float32), WHAT=what)


# ----------------------------------------------------------------- creation


@tl.tile_kernel
def creation_kernel(out, WHAT: tl.Constant, VALUE: tl.Constant, DT: tl.Constant, BM: tl.Constant, BN: tl.Constant):
    i, j = tl.block_id(0), tl.block_id(1)
    if WHAT == "zeros":
        t = tl.zeros((BM, BN), DT) if DT is not None else tl.zeros((BM, BN))
    elif WHAT == "full":
        t = tl.full((BM, BN), VALUE, DT)
    elif WHAT == "like":  # (of an int8 tile: the dtype given, or out's)
        like = tl.zeros((BM, BN), tl.int8)
        t = tl.full_like(like, VALUE, DT or out.dtype) if VALUE != 0 else tl.zeros_like(like, DT or out.dtype)
    else:  # full from a 0-d tile
        t = tl.full((BM, BN), tl.reshape(tl.full((1,), VALUE, DT), ()))
    tl.store(out, t, index=(i, j))


@given(
    data=st.data(),
    what=st.sampled_from(["zeros", "full", "full_tile", "like"]),
    d=st.one_of(st.none(), tlt.dtypes()),
    tile=st.tuples(SMALL, SMALL),
)
def test_zeros_and_full(data, what, d, tile):
    shape = data.draw(tlt.shapes(tile, max_tiles=2), label="shape")
    if what not in ("zeros", "like"):
        d = d or tl.float32
    if d is None or d.kind == "f":
        value = data.draw(st.sampled_from([0.0, -2.5, 1e30, float("inf"), float("nan"), 3]), label="value")
    elif d.kind == "b":
        value = data.draw(st.booleans(), label="value")
    else:
        info = np.iinfo(d.np)
        value = data.draw(st.integers(int(info.min), int(info.max)), label="value")
    result = d or tl.float32
    out = np.full(shape, 1, result.np)
    with np.errstate(over="ignore"):
        fill = np.array(0 if what == "zeros" else value).astype(result.np)
    tlt.check_kernel(
        creation_kernel,
        _grid(shape, tile),
        args=(out,),
        reference=lambda out: np.full(shape, fill, result.np),
        outputs=(0,),
        WHAT=what,
        VALUE=value,
        DT=d,
        BM=tile[0],
        BN=tile[1],
    )


@tl.tile_kernel
def full_default_dtype_kernel(out, VALUE: tl.Constant, N: tl.Constant):
    tl.store(out, tl.full((N,), VALUE), index=(0,))


@pytest.mark.parametrize(
    "value, dtype", [(1.5, np.float32), (7, np.int32), (True, np.bool_), (2**40, np.int64), (2**63, np.uint64)]
)
def test_full_takes_the_python_scalars_dtype(value, dtype):
    expected = np.full(5, value, dtype)
    tlt.check_kernel(
        full_default_dtype_kernel, 1, args=(np.zeros(5, dtype),), reference=lambda out: expected, VALUE=value, N=5
    )


@tl.tile_kernel
def arange_kernel(out, START: tl.Constant, STOP: tl.Constant, ONE_ARG: tl.Constant):
    i = tl.block_id(0)
    r = tl.arange(STOP) if ONE_ARG else tl.arange(START, STOP)
    tl.store(out, r + i * (STOP - START), index=(i,))


@given(start=st.integers(-20, 20), length=st.integers(1, 17), blocks=st.integers(1, 4), one_arg=st.booleans())
def test_arange(start, length, blocks, one_arg):
    if one_arg:
        start = 0
    n = length * blocks - (1 if length > 1 else 0)  # the last tile is partial
    out = np.zeros(n, np.int32)
    tlt.check_kernel(
        arange_kernel,
        blocks,
        args=(out,),
        reference=lambda out: (np.arange(n) + start).astype(np.int32),
        outputs=(0,),
        START=start,
        STOP=start + length,
        ONE_ARG=one_arg,
    )


@pytest.mark.parametrize("start, stop", [(3, 3), (5, 2)])
def test_empty_arange_is_an_error(start, stop):
    with pytest.raises(tl.TileValueError, match="empty"):
        arange_kernel[1](np.zeros(4, np.int32), START=start, STOP=stop, ONE_ARG=False)
