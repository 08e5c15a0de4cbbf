"""tl.reduce and tl.associative_scan with combine functions, against a sequential NumPy fold.

Most combine functions here are associative but do not commute, so a lowering that
combines two runs in the wrong order, or lets a phantom element (past a tile edge that is
not a power of two) into a result, gives a different answer: ``first`` and ``last`` pick
an end of the axis, ``last_max`` breaks ties towards the later element, ``affine``
composes maps ``h -> a*h + b`` (the linear recurrence; exact for integers, which wrap).
``sum`` and ``online`` (an online softmax's merge of (max, sum of exps)) commute: a
reduction takes the builtin reductions' tree, with a flag for phantoms in place of an
identity. Each is written once and run on tiles (traced, ``ns`` = tl) and on NumPy arrays
(the reference, ``ns`` = np).
"""

import numpy as np
import pytest
from _blocks import from_blocks, padded_blocks
from hypothesis import given
from hypothesis import strategies as st

import tilelang as tl
from tilelang import testing as tlt


def first(a, b, ns):
    return a


def last(a, b, ns):
    return b


def last_max(a, i, b, j, ns):
    later = b >= a
    return ns.where(later, b, a), ns.where(later, j, i)


def affine(a1, b1, a2, b2, ns):  # h -> a1*h + b1, then h -> a2*h + b2
    return a1 * a2, b1 * a2 + b2


def sum_(a, b, ns):
    return a + b


def online(m1, s1, m2, s2, ns):
    m = ns.maximum(m1, m2)
    return m, s1 * ns.exp(m1 - m) + s2 * ns.exp(m2 - m)


COMBINES = {"first": first, "last": last, "last_max": last_max, "affine": affine, "sum": sum_, "online": online}
PAIRS = ("affine", "last_max", "online")  # combine two tiles
ROUNDED = ("affine", "sum", "online")  # float results depend on the bracketing
TILES = st.sampled_from([(1, 6), (4, 4), (5, 3), (7, 9), (3, 40), (64, 2), (2, 130), (2, 1000), (600, 1)])


def traced(fn):
    return lambda *args: fn(*args, ns=tl)


def combine_kernel(x, y, out, out2, OP: tl.Constant, KIND: tl.Constant, AXIS: tl.Constant, TILE: tl.Constant):
    i, j = tl.block_id(0), tl.block_id(1)
    a = tl.load(x, index=(i, j), shape=TILE, padding=1)
    inputs = (a,)
    if OP in ("affine", "online"):
        inputs = (a, tl.load(y, index=(i, j), shape=TILE, padding=1))
    elif OP == "last_max":
        at = tl.arange(0, TILE[AXIS])
        inputs = (a, at[:, None] if AXIS == 0 else at[None, :])  # (broadcast to the tile's shape)
    if KIND == "reduce":
        r = tl.reduce(inputs, AXIS, traced(COMBINES[OP]), keepdims=True)
    else:
        r = tl.associative_scan(inputs, AXIS, traced(COMBINES[OP]), reverse=KIND == "reverse")
    tl.store(out, r[0], index=(i, j))
    if len(r) > 1:
        tl.store(out2, r[1], index=(i, j))


# the default threads (32 for these tiles) and more: the axis across warps, elements replicated
KERNELS = {t: tl.tile_kernel(num_threads=t)(combine_kernel) for t in (None, 128, 512)}


def fold(fn, xs, axis, kind):
    """The sequential reference: left to right along ``axis`` (``reverse``: the flipped axis)."""
    xs = [np.moveaxis(x, axis, -1) for x in xs]
    xs = [x[..., ::-1] for x in xs] if kind == "reverse" else xs
    acc, outs = [x[..., 0] for x in xs], []
    with np.errstate(all="ignore"):
        for k in range(xs[0].shape[-1]):
            if k:
                new = fn(*acc, *(x[..., k] for x in xs), np)
                acc = [np.asarray(o).astype(x.dtype) for o, x in zip(new if isinstance(new, tuple) else (new,), xs)]
            outs.append(acc)
    if kind == "reduce":
        results = [a[..., None] for a in acc]
    else:
        results = [np.stack([o[c] for o in outs], axis=-1) for c in range(len(xs))]
        results = [r[..., ::-1] for r in results] if kind == "reverse" else results
    return [np.moveaxis(r, -1, axis) for r in results]


@pytest.mark.parametrize("kind", ["reduce", "scan", "reverse"])
@pytest.mark.parametrize("op", sorted(COMBINES))
@given(data=st.data(), axis=st.sampled_from([0, 1]), tile=TILES, threads=st.sampled_from(sorted(KERNELS, key=str)))
def test_combines_in_order_and_without_phantoms(kind, op, data, axis, tile, threads):
    kinds = {"affine": "iuf", "sum": "iuf", "online": "f"}.get(op, "biuf")
    narrow = [tl.float8_e4m3fn, tl.float8_e5m2, tl.float16, tl.bfloat16]
    d = data.draw(tlt.dtypes(kinds, exclude=narrow if op in ROUNDED else []), label="d")
    shape = data.draw(tlt.shapes(tile), label="shape")
    bounds = {"affine": ((0.5, 1.0), (-1.0, 1.0)), "sum": ((-1.0, 1.0),) * 2, "online": ((-5.0, 5.0), (0.5, 1.0))}
    if op in ROUNDED and d.kind == "f":  # (affine: maps that shrink, the compositions stay near 1)
        (lo, hi), (lo2, hi2) = bounds[op]
        x = data.draw(tlt.arrays(d, shape, min_value=lo, max_value=hi), label="x")
        y = data.draw(tlt.arrays(d, shape, min_value=lo2, max_value=hi2), label="y")
    else:
        x = data.draw(tlt.arrays(d, shape, allow_nan_inf=False), label="x")
        y = data.draw(tlt.arrays(d, shape), label="y")
    blocks = [padded_blocks(v, tile, np.array(1).astype(d.np)) for v in (x, y)]
    if op == "last_max":
        n = tile[axis]
        at = np.arange(n, dtype=np.int32).reshape((n, 1) if axis == 0 else (1, n))
        blocks[1] = np.broadcast_to(at, blocks[0].shape)
    results = fold(COMBINES[op], blocks[: 2 if op in PAIRS else 1], 2 + axis, kind)
    gm, gn = blocks[0].shape[:2]
    out_shape = shape if kind != "reduce" else ((gm, shape[1]) if axis == 0 else (shape[0], gn))
    expected = [from_blocks(r, out_shape) for r in results]
    outputs = [np.zeros(out_shape, d.np), np.zeros(out_shape, np.int32 if op == "last_max" else d.np)]
    rtol = atol = None
    if op in ROUNDED and d.kind == "f":  # sequential against a tree: each op rounds once, a few per element
        eps = float(np.finfo(d.np).eps)
        rtol, atol = tlt.tolerance(d)
        rtol, atol = rtol + 8 * tile[axis] * eps, atol + 8 * tile[axis] * eps

    def reference(x, y, out, out2):
        return expected + [out2] * (2 - len(expected))

    tlt.check_kernel(
        KERNELS[threads],
        (gm, gn),
        args=(x, y, *outputs),
        reference=reference,
        outputs=(2, 3),
        rtol=rtol,
        atol=atol,
        OP=op,
        KIND=kind,
        AXIS=axis,
        TILE=tile,
    )


@tl.tile_kernel
def scalar_kernel(x, out, AXIS: tl.Constant, KEEP: tl.Constant, N: tl.Constant):
    t = tl.load(x, index=(0, 0, 0), shape=(3, N, 5))
    # a number's digits, most significant first (associative, not commutative), the base broadcast
    r, _ = tl.reduce(
        (t, tl.full((), 10, tl.int64)), AXIS, lambda v1, p1, v2, p2: (v1 * p2 + v2, p1 * p2), keepdims=KEEP
    )
    tl.store(out, tl.reshape(r, (-1,)), index=(0,))


@pytest.mark.parametrize("axis, keep", [(None, False), (None, True), (1, False), (1, True), (0, False), (2, True)])
def test_reduce_axes_and_keepdims(axis, keep):
    x = np.random.default_rng(1).integers(0, 7, (3, 37, 5)).astype(np.int64)
    flat = x.reshape(-1) if axis is None else np.moveaxis(x, axis, -1)
    acc = flat[..., 0]
    for k in range(1, flat.shape[-1]):
        acc = acc * 10 + flat[..., k]  # (int64 wraps: both sides alike)
    expected = np.asarray(acc).reshape(-1)
    out = np.zeros(expected.size, np.int64)
    tlt.check_kernel(scalar_kernel, (1,), args=(x, out), reference=lambda x, out: expected, AXIS=axis, KEEP=keep, N=37)


@tl.tile_kernel
def recurrence(a, b, h, T: tl.Constant):
    """h[t] = a[t] * h[t-1] + b[t] along the rows, one row a block."""
    i = tl.block_id(0)
    _, r = tl.associative_scan((tl.load(a, index=(i, 0), shape=(1, T)), tl.load(b, index=(i, 0), shape=(1, T))), 1,
                               lambda a1, b1, a2, b2: (a1 * a2, b1 * a2 + b2))  # fmt: skip
    tl.store(h, r, index=(i, 0))


def test_the_scan_compiles_to_shuffles_without_local_memory():
    e = tl.explain(recurrence, "f32[:, :]", "f32[:, :]", "f32[:, :]", T=4096)
    assert "combine={ lambda" in e["tile_ir"]  # the traced combine function, printed under its scan
    assert "shfl.sync.up.b32" in e["ptx"] and "bar.sync" in e["ptx"]  # lanes by shuffles, warps through smem
    assert "stack 0 bytes, spills 0 bytes stored / 0 bytes loaded" in e["resources"], e["resources"]


def test_the_cost_estimate_counts_the_combine_functions_float_ops():
    from tilelang._passes.estimate_cost import estimate_cost

    a = np.zeros((3, 64), np.float32)
    arguments = recurrence.bind((a, a, a), dict(T=64))
    program = recurrence.compile(recurrence.specialize(arguments)[0], "interpret").program
    assert estimate_cost(program, (3,), arguments).flops == 3 * 64 * 3  # a1*a2, b1*a2, + b2 an element


def test_fast_math_relaxes_the_combine_functions_math_too():
    @tl.tile_kernel(fast_math=True)
    def softmax_merge(m, s, out, N: tl.Constant):
        mt, st_ = tl.load(m, index=(0,), shape=(N,)), tl.load(s, index=(0,), shape=(N,))
        _, total = tl.reduce((mt, st_), 0, lambda m1, s1, m2, s2: online(m1, s1, m2, s2, tl))
        tl.store(out, tl.reshape(total, (1,)), index=(0,))

    e = tl.explain(softmax_merge, "f32[:]", "f32[:]", "f32[:]", N=64, backend="cpu")
    combine = e["fast_math"][e["fast_math"].index("combine={") :]
    assert " exp2 " in combine and " exp " not in combine, combine


@tl.tile_kernel(num_threads=256)
def every_copy(m, s, out, N: tl.Constant):
    mt, st_ = tl.load(m, index=(0,), shape=(N,)), tl.load(s, index=(0,), shape=(N,))
    _, total = tl.reduce((mt, st_), 0, lambda m1, s1, m2, s2: online(m1, s1, m2, s2, tl))
    tl.store(out, tl.zeros((N,), tl.float32) + total, index=(0,))  # (each element from its own thread's copy)


def test_every_thread_holds_the_same_bits_of_a_commuting_reduction():
    """The online-softmax merge commutes in exact arithmetic, not in rounded (on the GPU
    ``s1*e1 + s2*e2`` contracts to an fma of either product): lanes combine in one order."""
    rng = np.random.default_rng(3)
    m, s = rng.uniform(-5, 5, 1000).astype(np.float32), rng.uniform(0.5, 1, 1000).astype(np.float32)
    want = np.sum(s * np.exp(m.astype(np.float64) - m.max()))
    out = np.zeros(1000, np.float32)
    for backend in tlt.default_backends():
        every_copy[1](m, s, out, N=1000, backend=backend)
        assert np.all(out == out[0]) and abs(out[0] - want) <= 1e-5 * want, (backend, np.unique(out))


@tl.tile_kernel(num_threads=32)
def zero_d_mask(x, out):
    first = tl.reduce(tl.load(x, index=(0,), shape=(8,)), None, lambda a, b: a)
    tl.store(out, tl.gather(x, 3, mask=first)[None], index=(0,))


def test_a_reduction_to_0d_is_0d_in_the_interpreter():
    """Found by the fuzzer: the interpreter gave a (1,) array (np.ascontiguousarray), which a
    gather's 0-d mask then indexed as 1-d and failed."""
    x, out = np.array([True, False, False, True, False, False, False, False]), np.zeros(1, bool)
    tlt.check_kernel(zero_d_mask, (1,), args=(x, out), reference=lambda x, out: np.array([True]))


def _reads_outside(a, b):  # (a tile of the kernel, through a global)
    return a + OUTSIDE[0]


OUTSIDE = []


@tl.tile_kernel
def bad_combine_kernel(x, out, WHAT: tl.Constant):
    t = tl.load(x, index=(0,), shape=(8,))
    OUTSIDE[:] = [tl.sum(t)] if WHAT == "outside" else []
    fns = {
        "count": lambda a, b: (a, b),
        "dtype": lambda a, b: a > b,
        "shape": lambda a, b: tl.full((2,), 1.0, tl.float32),
        "load": lambda a, b: a + tl.reshape(tl.load(x, index=(0,), shape=(1,)), ()),
        "sum": lambda a, b: tl.sum(tl.full((4,), 1.0, tl.float32)) + a,
        "outside": _reads_outside,
        "outer_tile": lambda a, b: a + b + t,
        "arity": lambda a: a,
    }
    if WHAT == "axis":
        r = tl.reduce(t, 1, lambda a, b: a + b)
    elif WHAT == "float_for_int":  # (not truncated to 1)
        r = tl.reduce(t.astype(tl.int32), 0, lambda a, b: 1.5).astype(tl.float32)
    elif WHAT == "scalar":
        r = tl.reduce(tl.sum(t), 0, lambda a, b: a + b)
    else:
        r = tl.reduce(t, 0, fns[WHAT])
    tl.store(out, tl.reshape(r, (1,)), index=(0,))


@pytest.mark.parametrize(
    "what, error, message",
    [
        ("count", tl.TileValueError, "returned 2 values for 1 input tiles"),
        ("dtype", tl.TileTypeError, "result 0 is bool\\[\\], its input 0 is f32\\[\\]"),
        ("shape", tl.TileTypeError, "result 0 is f32\\[2\\]"),
        ("load", tl.TileValueError, "only elementwise operations .* it uses `load`"),
        ("sum", tl.TileValueError, "only elementwise operations"),
        ("outside", tl.TileValueError, "a tile made outside it"),
        ("outer_tile", tl.TileValueError, "a tile made outside it"),
        ("arity", tl.TileValueError, "must take 2 scalars, .* as f\\(a0, b0\\)"),
        ("float_for_int", tl.TileTypeError, "result 0 is f32\\[\\], its input 0 is i32\\[\\]"),
        ("axis", tl.TileValueError, "axis 1 is out of range"),
        ("scalar", tl.TileShapeError, "reduce of a 0-d tile"),
    ],
)
def test_bad_combine_functions_are_reported_at_their_line(what, error, message):
    with pytest.raises(error, match=message) as info:
        bad_combine_kernel[1](np.ones(8, np.float32), np.zeros(1, np.float32), WHAT=what, backend="interpret")
    assert info.value.loc is not None and info.value.loc.file.endswith("test_combine.py"), info.value
