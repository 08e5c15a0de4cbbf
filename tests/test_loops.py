"""``for k in tl.range(...)`` loops: runtime trip counts, every spelling of a loop-carried
value, nesting, scalar promotion, stores in the body, Python loops that unroll, and
kernels defined in unusual places. Results are compared with NumPy."""

import functools
import importlib.util
import os
import re
import textwrap
import types

import numpy as np
import pytest

import tilelang as tl

T = 8
DATA = (np.arange(20 * T) % 7).astype(np.float32)  # small integers: float sums are exact


def chunks(x, ks, t=T):
    return [x[k * t : (k + 1) * t] for k in ks]


def tile_ir(kernel, *args, **kwargs):
    return tl.explain(kernel, *args, backend="interpret", **kwargs)["tile_ir"]


def _backends():
    """The interpreter (the reference) and the default backend (CPU, or CUDA with a GPU)."""
    chosen = [b.strip() for b in os.environ.get("TILELANG_TEST_BACKENDS", "").split(",") if b.strip()]
    default = tl.kernel.default_backend()
    return chosen or ["interpret"] + ([default] if default != "interpret" else [])


@pytest.fixture(params=_backends())
def backend(request):
    return request.param


def carried_types(text):
    """The types of the values the (first) range_loop of a printed program carries."""
    loop = next(line for line in text.splitlines() if "= range_loop" in line)
    return [out.split(":", 1)[1] for out in loop.split(" = ")[0].split()]


# ------------------------------------------------------------------- trip counts


@tl.tile_kernel
def chunk_sum(x, out, start, stop, step, T: tl.Constant):
    acc = tl.zeros((T,), tl.float32)
    count = 0
    for k in tl.range(start, stop, step):
        acc += tl.load(x, index=(k,), shape=(T,))
        count += 1
    tl.store(out, acc, index=(0,))
    tl.store(out, tl.zeros((T,)) + count, index=(1,))


@pytest.mark.parametrize(
    "start, stop, step",
    [
        (0, 8, 1),
        (0, 0, 1),
        (3, 3, 1),
        (5, 2, 1),
        (1, 20, 3),
        (7, -1, -1),
        (7, 0, -2),
        (0, 5, -1),
        (19, 0, -7),
        (2, 3, 5),
    ],
)
def test_runtime_trip_counts(start, stop, step, backend):
    out = np.full(2 * T, -1.0, np.float32)
    chunk_sum[1](DATA, out, start, stop, step, T=T, backend=backend)
    ks = range(start, stop, step)
    np.testing.assert_array_equal(out[:T], sum(chunks(DATA, ks), np.zeros(T, np.float32)))
    np.testing.assert_array_equal(out[T:], len(ks))


def test_runtime_trip_counts_share_one_compile(backend):
    assert "range_loop" in tile_ir(chunk_sum, DATA, DATA, 0, 8, 1, T=T)
    chunk_sum[1](DATA, np.zeros(2 * T, np.float32), 0, 8, 1, T=T, backend=backend)
    before = len(chunk_sum._compiled)
    for stop in (0, 1, 5):
        chunk_sum[1](DATA, np.zeros(2 * T, np.float32), 0, stop, 1, T=T, backend=backend)
    assert len(chunk_sum._compiled) == before


@tl.tile_kernel
def one_bound(x, out, n, T: tl.Constant):
    acc = tl.zeros((T,), tl.float32)
    for k in tl.range(n):
        acc = acc + tl.load(x, index=(k,), shape=(T,))
    tl.store(out, acc, index=(0,))


@tl.tile_kernel
def shape_bound(x, out, T: tl.Constant):
    acc = tl.zeros((T,), tl.float32)
    for k in tl.range(tl.cdiv(x.shape[0], T)):  # an int64 trip count; the last tile is partial
        acc = acc + tl.load(x, index=(k,), shape=(T,))
    tl.store(out, acc, index=(0,))


def test_single_bound_and_array_shape_bound(backend):
    out = np.zeros(T, np.float32)
    one_bound[1](DATA, out, 5, T=T, backend=backend)
    np.testing.assert_array_equal(out, sum(chunks(DATA, range(5))))
    one_bound[1](DATA, out, np.int64(0), T=T, backend=backend)
    np.testing.assert_array_equal(out, 0)
    x = DATA[: 5 * T + 3]
    shape_bound[1](x, out, T=T, backend=backend)
    np.testing.assert_array_equal(out, np.pad(x, (0, 5)).reshape(-1, T).sum(0))
    assert re.search(r"range_loop 0:i64\[\] \w+ 1:i64\[\]", tile_ir(shape_bound, x, out, T=T))  # an i64 index


def test_constant_trip_count(backend):
    out = np.zeros(T, np.float32)
    one_bound[1](DATA, out, 3, T=T, backend=backend)
    np.testing.assert_array_equal(out, sum(chunks(DATA, range(3))))


# --------------------------------------------------------- loop-carried spellings


@tl.tile_kernel
def spellings(x, out, n, T: tl.Constant):
    a = tl.zeros((T,), tl.float32)  # a += t
    b = tl.zeros((T,), tl.float32)  # b = b + t
    c = tl.full((T,), 1.0)  # c *= 2 ; c -= 1
    d = tl.zeros((T,), tl.float32)  # d, e = d2, e2
    e = tl.zeros((T,), tl.float32)
    for k in tl.range(n):
        t = tl.load(x, index=(k,), shape=(T,))
        a += t
        b = b + t
        c *= 2.0
        c -= 1.0
        d2 = d + t * k
        e2 = tl.maximum(e, t)
        d, e = d2, e2
    tl.store(out, a, index=(0,))
    tl.store(out, b, index=(1,))
    tl.store(out, c, index=(2,))
    tl.store(out, d, index=(3,))
    tl.store(out, e, index=(4,))


@pytest.mark.parametrize("n", [0, 1, 4])
def test_carried_spellings(n, backend):
    out = np.zeros(5 * T, np.float32)
    spellings[1](DATA, out, n, T=T, backend=backend)
    parts = chunks(DATA, range(n))
    total = sum(parts, np.zeros(T, np.float32))
    c = np.ones(T, np.float32)
    for _ in range(n):
        c = c * 2 - 1
    weighted = sum((p * k for k, p in enumerate(parts)), np.zeros(T, np.float32))
    biggest = np.max(parts, axis=0) if n else np.zeros(T, np.float32)
    expected = np.concatenate([total, total, c, weighted, np.maximum(biggest, 0)])
    np.testing.assert_array_equal(out, expected)


@tl.tile_kernel
def swaps(out, n, T: tl.Constant):
    a = tl.full((T,), 1.0)
    b = tl.full((T,), 2.0)
    p = tl.full((T,), 10.0)
    q = tl.full((T,), 20.0)
    r = tl.full((T,), 30.0)
    for _ in tl.range(n):
        a, b = b, a
        p, q, r = q, r, p
    tl.store(out, a, index=(0,))
    tl.store(out, b, index=(1,))
    tl.store(out, p, index=(2,))
    tl.store(out, q, index=(3,))
    tl.store(out, r, index=(4,))


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4])
def test_tuple_swaps(n, backend):
    out = np.zeros(5 * T, np.float32)
    swaps[1](out, n, T=T, backend=backend)
    a, b, p, q, r = 1.0, 2.0, 10.0, 20.0, 30.0
    for _ in range(n):
        a, b = b, a
        p, q, r = q, r, p
    np.testing.assert_array_equal(out.reshape(5, T), np.repeat([[a], [b], [p], [q], [r]], T, axis=1))


@tl.tile_kernel
def online_softmax_stats(x, out, n_cols, BM: tl.Constant, BN: tl.Constant):
    i = tl.block_id(0)
    m = tl.full((BM,), float("-inf"))
    l = tl.zeros((BM,), tl.float32)
    for k in tl.range(tl.cdiv(n_cols, BN)):
        t = tl.load(x, index=(i, k), shape=(BM, BN), padding=float("-inf"))
        m2 = tl.maximum(m, tl.max(t, axis=1))
        l2 = l * tl.exp(m - m2) + tl.sum(tl.exp(t - m2[:, None]), axis=1)
        m, l = m2, l2
    tl.store(out, tl.reshape(m, (BM, 1)), index=(i, 0))
    tl.store(out, tl.reshape(l, (BM, 1)), index=(i, 1))


def test_online_softmax_carries_two_values(backend):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((10, 37)).astype(np.float32)
    out = np.zeros((10, 2), np.float32)
    online_softmax_stats[tl.cdiv(10, 4)](x, out, 37, BM=4, BN=8, backend=backend)
    m = x.max(axis=1)
    np.testing.assert_array_equal(out[:, 0], m)
    np.testing.assert_allclose(out[:, 1], np.exp(x - m[:, None]).sum(axis=1), rtol=1e-5)


@tl.tile_kernel
def matmul(a, b, c, K, BM: tl.Constant, BN: tl.Constant, BK: tl.Constant):
    i, j = tl.block_id(0), tl.block_id(1)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in tl.range(tl.cdiv(K, BK)):
        acc = tl.dot(tl.load(a, index=(i, k), shape=(BM, BK)), tl.load(b, index=(k, j), shape=(BK, BN)), acc)
    tl.store(c, acc, index=(i, j))


def test_dot_accumulator_is_carried(backend):
    rng = np.random.default_rng(1)
    a = rng.integers(-3, 4, (20, 30)).astype(np.float16)
    b = rng.integers(-3, 4, (30, 12)).astype(np.float16)
    c = np.zeros((20, 12), np.float32)
    matmul[tl.cdiv(20, 8), tl.cdiv(12, 8)](a, b, c, 30, BM=8, BN=8, BK=16, backend=backend)
    np.testing.assert_array_equal(c, a.astype(np.float32) @ b.astype(np.float32))


# ----------------------------------------------------------------------- nesting


@tl.tile_kernel
def nested(x, out, n, m, T: tl.Constant):
    acc = tl.zeros((T,), tl.float32)
    for i in tl.range(n):
        s = tl.zeros((T,), tl.float32)
        for j in tl.range(m):
            s += tl.load(x, index=(i * m + j,), shape=(T,))
        acc = acc + s * (i + 1)
    tl.store(out, acc, index=(0,))


@tl.tile_kernel
def triangular(x, out, n, T: tl.Constant):
    acc = tl.zeros((T,), tl.float32)
    pairs = 0
    for i in tl.range(n):
        for j in tl.range(i + 1):  # the inner bound depends on the outer index
            acc += tl.load(x, index=(j,), shape=(T,)) * i
            pairs += 1
    tl.store(out, acc, index=(0,))
    tl.store(out, tl.zeros((T,)) + pairs, index=(1,))


@pytest.mark.parametrize("n, m", [(0, 3), (3, 0), (2, 3), (4, 1)])
def test_nested_loops(n, m, backend):
    out = np.zeros(T, np.float32)
    nested[1](DATA, out, n, m, T=T, backend=backend)
    expected = np.zeros(T, np.float32)
    for i in range(n):
        expected += sum(chunks(DATA, [i * m + j for j in range(m)]), np.zeros(T, np.float32)) * (i + 1)
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("n", [0, 1, 4])
def test_triangular_nested_loops(n, backend):
    out = np.zeros(2 * T, np.float32)
    triangular[1](DATA, out, n, T=T, backend=backend)
    expected = sum((DATA[j * T : (j + 1) * T] * i for i in range(n) for j in range(i + 1)), np.zeros(T, np.float32))
    np.testing.assert_array_equal(out[:T], expected)
    np.testing.assert_array_equal(out[T:], n * (n + 1) // 2)
    assert tile_ir(triangular, DATA, out, n, T=T).count("range_loop") == 2


# ------------------------------------------------------------ promoted Python scalars


@tl.tile_kernel
def scalar_state(x, out, n, T: tl.Constant):
    count = 0
    total = 0.0
    best = 0
    found = False
    peak = tl.full((), float("-inf"))
    for k in tl.range(n):
        t = tl.load(x, index=(k,), shape=(T,))
        count += 1
        total = total + tl.sum(t)
        best = tl.maximum(best, k)
        found = found | tl.max(t > 5.0)
        peak = tl.maximum(peak, tl.max(t))
    tl.store(out, tl.zeros((T,)) + count, index=(0,))
    tl.store(out, tl.zeros((T,)) + total, index=(1,))
    tl.store(out, tl.zeros((T,)) + best, index=(2,))
    tl.store(out, tl.zeros((T,)) + found.astype(tl.float32), index=(3,))
    tl.store(out, tl.zeros((T,)) + peak, index=(4,))


@pytest.mark.parametrize("n", [0, 1, 2, 5])
def test_python_scalars_promoted_to_tiles(n, backend):
    out = np.zeros(5 * T, np.float32)
    scalar_state[1](DATA, out, n, T=T, backend=backend)
    seen = DATA[: n * T]
    want = [n, seen.sum(), max(n - 1, 0), float((seen > 5).any()), seen.max() if n else -np.inf]
    np.testing.assert_array_equal(out.reshape(5, T), np.repeat(np.array(want, np.float32)[:, None], T, axis=1))


def test_promoted_scalars_have_the_python_dtype():
    text = tile_ir(scalar_state, DATA, DATA, 3, T=T)
    # count (int: i32), total (float: f32), best (i32, the max of 0 and the int32 index), found (bool), peak
    assert carried_types(text) == ["i32[]", "f32[]", "i32[]", "bool[]", "f32[]"]


@tl.tile_kernel
def unchanged_scalars(x, out, n, SCALE: tl.Constant, T: tl.Constant):
    acc = tl.zeros((T,), tl.float32)
    factor = 2.0
    for k in tl.range(n):
        factor = 2.0  # rebinding a Python scalar to the same value keeps it a Python scalar
        step = SCALE * factor  # assigned only inside the body, used only inside it
        acc += tl.load(x, index=(k,), shape=(T,)) * step
    tl.store(out, acc * factor, index=(0,))


def test_unchanged_python_scalars_stay_python(backend):
    out = np.zeros(T, np.float32)
    unchanged_scalars[1](DATA, out, 3, SCALE=3.0, T=T, backend=backend)
    np.testing.assert_array_equal(out, sum(chunks(DATA, range(3))) * 12)
    text = tile_ir(unchanged_scalars, DATA, out, 3, SCALE=3.0, T=T)
    assert carried_types(text) == ["f32[8]"]  # only acc is carried


@tl.tile_kernel
def carries_runtime_scalars(x, s, n, out):
    m = tl.full((), 0.0, tl.float64)
    c = tl.full((), 0, tl.int64)
    for _ in tl.range(2):
        m = s  # a runtime Python float into a float64 tile: its double
        c = n  # a runtime Python int into an int64 tile
    tl.store(out, tl.load(x, index=(0,), shape=(4,)) * m + c, index=(0,))


def test_a_runtime_scalar_assigned_to_a_carried_tile_takes_its_dtype(backend):
    """As a literal does: it raised "loop-carried `m` is f64[] before the loop but f32[] after the body"."""
    out = np.zeros(4)
    carries_runtime_scalars[1](np.ones(4), 0.1, 2**40, out, backend=backend)
    np.testing.assert_array_equal(out, 0.1 + 2**40)


# ----------------------------------------------------- invariants, stores, grids


@tl.tile_kernel
def scaled_copy(x, out, scale_src, n, T: tl.Constant):
    i = tl.block_id(0)
    scale = tl.load(scale_src, index=(i,), shape=(1,))  # loop-invariant tile
    offset = tl.arange(0, T).astype(tl.float32)  # loop-invariant tile
    for k in tl.range(n):
        row = i * n + k
        t = tl.load(x, index=(row,), shape=(T,))
        tl.store(out, t * scale + offset + T, index=(row,))  # a store in the body, nothing carried


def test_invariants_and_stores_in_the_body(backend):
    grid, n = 3, 4
    x = (np.arange(grid * n * T) % 11).astype(np.float32)
    scales = np.array([1.0, 2.0, 3.0], np.float32)
    out = np.zeros_like(x)
    scaled_copy[grid](x, out, scales, n, T=T, backend=backend)
    expected = x.reshape(grid, n, T) * scales[:, None, None] + np.arange(T) + T
    np.testing.assert_array_equal(out, expected.reshape(-1))
    text = tl.explain(scaled_copy, x, out, scales, n, T=T, backend="interpret")["simplified"]
    assert "store" in text and "range_loop" in text


@tl.tile_kernel
def conditional_in_body(x, out, n, ADD: tl.Constant, T: tl.Constant):
    acc = tl.full((T,), 100.0)
    for k in tl.range(n):
        if ADD:  # Python control flow on a Constant is fine
            acc = acc + tl.load(x, index=(k,), shape=(T,))
        else:
            tl.store(out, acc, index=(k,))
    tl.store(out, acc, index=(0,))


def test_python_if_on_constant_in_body(backend):
    out = np.zeros(4 * T, np.float32)
    conditional_in_body[1](DATA, out, 3, ADD=True, T=T, backend=backend)
    np.testing.assert_array_equal(out[:T], 100 + sum(chunks(DATA, range(3))))
    out[:] = 0
    conditional_in_body[1](DATA, out, 3, ADD=False, T=T, backend=backend)
    np.testing.assert_array_equal(out[: 3 * T], 100.0)


# ---------------------------------------------------------- Python loops unroll


@tl.tile_kernel
def unrolled(x, out, REPS: tl.Constant, T: tl.Constant):
    acc = tl.zeros((T,), tl.float32)
    for r in range(REPS):
        acc = acc + tl.load(x, index=(r,), shape=(T,)) * (r + 1)
    parts = [tl.load(x, index=(j,), shape=(T,)) for j in (0, 2)]
    for p in parts:
        acc = acc - p
    for w, j in zip([1.0, 10.0], [1, 3]):
        acc += w * tl.load(x, index=(j,), shape=(T,))
    tl.store(out, acc, index=(0,))


def test_python_loops_unroll(backend):
    out = np.zeros(T, np.float32)
    unrolled[1](DATA, out, REPS=3, T=T, backend=backend)
    c = chunks(DATA, range(4))
    np.testing.assert_array_equal(out, c[0] + 2 * c[1] + 3 * c[2] - c[0] - c[2] + c[1] + 10 * c[3])
    text = tile_ir(unrolled, DATA, out, REPS=3, T=T)
    assert "range_loop" not in text and text.count("= load") == 3 + 2 + 2


# ------------------------------------------------------- where kernels are defined


def make_kernel(scale, T):
    def helper(t):
        return t * scale

    @tl.tile_kernel
    def closure_kernel(x, out, n):
        acc = tl.zeros((T,), tl.float32)
        for k in tl.range(n):
            acc += helper(tl.load(x, index=(k,), shape=(T,)))
        tl.store(out, acc + scale, index=(0,))

    return closure_kernel


def test_kernel_defined_in_a_function_uses_closure_variables(backend):
    for scale, t in [(2.0, 8), (-1.0, 4)]:
        kernel = make_kernel(scale, t)
        out = np.zeros(t, np.float32)
        kernel[1](DATA, out, 3, backend=backend)
        np.testing.assert_array_equal(out, sum(chunks(DATA, range(3), t)) * scale + scale)


def test_a_loop_kernel_reads_its_closure_when_traced(backend):
    """The rewritten kernel copied the closure's values at its first launch: a variable
    assigned only after the kernel was made raised `ValueError: Cell is empty`, and a later
    specialization used the old value of one that changed (a plain kernel the new one)."""
    scale = 2.0

    @tl.tile_kernel
    def scaled(x, out, n, T: tl.Constant):
        acc = tl.zeros((T,), tl.float32)
        for k in tl.range(n):
            acc += tl.load(x, index=(k,), shape=(T,))
        tl.store(out, acc * scale if T > 4 else later(acc), index=(0,))

    out = np.zeros(8, np.float32)
    scaled[1](DATA, out, 2, T=8, backend=backend)
    np.testing.assert_array_equal(out, sum(chunks(DATA, range(2))) * 2.0)
    later = lambda t: t * 3.0  # noqa: E731 (assigned after the kernel was made: read when traced)
    scaled[1](DATA, out, 2, T=4, backend=backend)
    np.testing.assert_array_equal(out[:4], sum(chunks(DATA, range(2), 4)) * 3.0)
    scale = 5.0  # (what was read when compiled changed: refused, as for any kernel)
    with pytest.raises(tl.TileArgumentError, match="closure variable `scale` .* is 5.0, not 2.0"):
        scaled[1](DATA, out, 2, T=2, backend=backend)


EDITED_MODULE = """
import tilelang as tl


@tl.tile_kernel
def summed(x, out, T: tl.Constant):
    acc = tl.zeros((T,), x.dtype)
    for k in tl.range(0, 2):
        acc = acc + tl.load(x, index=(k,), shape=(T,))
    tl.store(out, acc, index=(0,))


@tl.tile_kernel
def doubled(x, out, T: tl.Constant):
    tl.store(out, tl.load(x, index=(0,), shape=(T,)) * 2.0, index=(0,))
"""


def test_a_kernel_file_edited_after_import(tmp_path, backend):
    """The source was read at the first launch, at the imported line numbers: after a line
    was added at the top, `doubled` ran the text of `summed` (silently: [8 10 12 14])."""
    path = tmp_path / "edited_kernels.py"
    path.write_text(EDITED_MODULE)
    spec = importlib.util.spec_from_file_location("edited_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    path.write_text("# a line added, the file saved again\n" + EDITED_MODULE.replace("* 2.0", "* 3.0"))
    os.utime(path, (1, 1))  # (linecache compares sizes and times)
    for kernel, want in [(module.doubled, DATA[:4] * 2), (module.summed, DATA[:4] + DATA[4:8])]:
        out = np.zeros(4, np.float32)
        kernel[1](DATA, out, T=4, backend=backend)
        np.testing.assert_array_equal(out, want)


class Kernels:
    """Kernels as class attributes (no methods: a kernel has no ``self``)."""

    @tl.tile_kernel
    def running_max(x, out, n, T: tl.Constant):
        m = tl.full((T,), float("-inf"))
        for k in tl.range(n):
            m = tl.maximum(m, tl.load(x, index=(k,), shape=(T,)))
        tl.store(out, m, index=(0,))


def test_kernel_defined_in_a_class_body(backend):
    out = np.zeros(T, np.float32)
    Kernels.running_max[1](DATA, out, 5, T=T, backend=backend)
    np.testing.assert_array_equal(out, np.max(chunks(DATA, range(5)), axis=0))


FUTURE_MODULE = """
from __future__ import annotations

import tilelang as tl


@tl.tile_kernel
def total(x, out, n, T: tl.Constant):
    acc = tl.zeros((T,), tl.float32)
    for k in tl.range(n):
        acc += tl.load(x, index=(k,), shape=(T,))
    tl.store(out, acc, index=(0,))
"""


def test_kernel_in_a_module_with_future_annotations(tmp_path, backend):
    path = tmp_path / "future_kernels.py"
    path.write_text(textwrap.dedent(FUTURE_MODULE))
    spec = importlib.util.spec_from_file_location("future_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.total.constants == {"T"}
    out = np.zeros(T, np.float32)
    module.total[1](DATA, out, 4, T=T, backend=backend)
    np.testing.assert_array_equal(out, sum(chunks(DATA, range(4))))
    assert "future_kernels.py:" in tile_ir(module.total, DATA, out, 4, T=T)


@tl.tile_kernel
def string_annotation(x, out, n, T: "tl.Constant"):  # noqa: F821 - a string annotation, as the future import makes
    acc = tl.zeros((T,), tl.float32)
    for k in tl.range(n):
        acc += tl.load(x, index=(k,), shape=(T,))
    tl.store(out, acc, index=(0,))


def test_string_constant_annotation(backend):
    assert string_annotation.constants == {"T"}
    out = np.zeros(T, np.float32)
    string_annotation[1](DATA, out, 2, T=T, backend=backend)
    np.testing.assert_array_equal(out, sum(chunks(DATA, range(2))))


@tl.tile_kernel
def python_scoping_in_a_body(out, n):
    acc = tl.zeros((4,))
    for _ in tl.range(n):
        import math as m  # bound in the body, used in it

        _ = [(acc := acc + m.floor(1.5)) for _ in range(2)]  # a walrus in a comprehension binds `acc`
    tl.store(out, acc, index=(0,))


def test_python_scoping_in_a_loop_body(backend):
    """A walrus in a comprehension raised NameError (its target was not carried), an import
    NameError (its name not bound)."""
    out = np.zeros(4, np.float32)
    python_scoping_in_a_body[1](out, 3, backend=backend)
    np.testing.assert_array_equal(out, 6.0)


_STEP = 3.0


@tl.tile_kernel
def closures_over_carried_values(out, n):
    global _STEP
    acc = tl.zeros((4,))

    def inc():  # reads `acc`: this iteration's, not the value before the loop
        return acc + 1.0

    total = tl.zeros((4,))
    for _ in tl.range(n):
        acc = inc()
        total += _STEP  # a global the kernel declares, read in the body
    tl.store(out, acc, index=(0,))
    tl.store(out, total, index=(1,))


_SHADOWED = 100.0


@tl.tile_kernel
def global_only_in_a_helper(out, n):
    def helper():  # its `global` is its own: the kernel's `_SHADOWED` below is a local, carried
        global _SHADOWED
        return _SHADOWED

    _SHADOWED = tl.zeros((4,))
    for _ in tl.range(n):
        _SHADOWED = _SHADOWED + 1.0
    tl.store(out, _SHADOWED, index=(0,))


def test_a_helpers_global_is_its_own(backend):
    """A `global` in a nested def made the kernel's own name global in the loop: 0 instead of 3,
    and the module's variable overwritten."""
    out = np.zeros(4, np.float32)
    global_only_in_a_helper[1](out, 3, backend=backend)
    np.testing.assert_array_equal(out, 3.0)
    assert _SHADOWED == 100.0


def test_a_closure_reads_the_carried_value(backend):
    """The closure read `acc` from before the loop (1 after 5 iterations, not 5), and a global
    the kernel declares raised a misleading `used before it is assigned`."""
    out = np.zeros(8, np.float32)
    closures_over_carried_values[1](out, 5, backend=backend)
    np.testing.assert_array_equal(out, [5.0] * 4 + [15.0] * 4)


@tl.tile_kernel
def rebound_by_a_helper(out, n):
    count = 0
    acc = tl.zeros((4,))

    def bump():  # rebinds the kernel's names: the loop carries them as if the body did
        nonlocal count, acc
        count += 1
        acc = acc + 2.0

    for _ in tl.range(n):
        bump()
    tl.store(out, acc + count, index=(0,))


@tl.tile_kernel
def loop_in_a_nested_def(out, n):
    count = 0

    def loop():  # its nonlocal names are the kernel's: carried
        nonlocal count
        for _ in tl.range(n):
            count += 1

    loop()
    tl.store(out, tl.zeros((4,)) + count, index=(0,))


@tl.tile_kernel
def lists_made_in_the_body(out, n):
    acc = tl.zeros((4,))
    for _ in tl.range(n):
        parts = [acc, acc]  # this iteration's: its elements may be assigned
        for i in range(2):
            parts[i] = parts[i] + (i + 1.0)
        acc = parts[0] + parts[1] - acc
    tl.store(out, acc, index=(0,))


@pytest.mark.parametrize("n", [0, 1, 3])
def test_state_a_helper_or_the_body_owns(n, backend):
    """A helper's `nonlocal` count gave one iteration's effect (1, not n) and its tile raised
    an escaped-tile error, as did a count a def nested in the kernel declared nonlocal."""
    cases = [(rebound_by_a_helper, 3.0 * n), (loop_in_a_nested_def, n), (lists_made_in_the_body, 3.0 * n)]
    for kernel, want in cases:
        out = np.full(4, -1.0, np.float32)
        kernel[1](out, n, backend=backend)
        np.testing.assert_array_equal(out, want)


# ------------------------------------------------------------ what the rewrite refuses


def _doubled_n(fn):
    @functools.wraps(fn)
    def wrapper(out, n):
        return fn(out, n * 2)

    return wrapper


@tl.tile_kernel
@_doubled_n
def wrapped_loop(out, n):
    acc = tl.zeros((4,))
    for _ in tl.range(n):
        acc += 1.0
    tl.store(out, acc, index=(0,))


@tl.tile_kernel
def break_in_a_for_else(out, n):
    for _ in tl.range(n):
        for _ in range(2):
            pass
        else:
            break  # (Python's: it ends the tl.range loop)


@tl.tile_kernel
def del_in_a_body(out, n):
    acc = tl.zeros((4,))
    for _ in tl.range(n):
        tmp = acc + 1.0
        acc = tmp
        del tmp
    tl.store(out, acc, index=(0,))


@tl.tile_kernel
def float_into_a_carried_int(out, n):
    c = 0
    for _ in tl.range(n):
        c = 0.5
    tl.store(out, tl.zeros((4,)) + c, index=(0,))


@tl.tile_kernel
def a_list_from_before_the_loop(out, n):
    count = [0]
    for _ in tl.range(n):
        count[0] += 1
    tl.store(out, tl.zeros((4,)) + count[0], index=(0,))


@tl.tile_kernel
def an_attribute_from_before_the_loop(out, n):
    state = types.SimpleNamespace(acc=tl.zeros((4,)))
    for _ in tl.range(n):
        state.acc, _ = state.acc + 1.0, 0
        tl.store(out, state.acc, index=(0,))


_COUNT = 0


@tl.tile_kernel
def a_global_counter(out, n):
    global _COUNT
    for _ in tl.range(n):
        _COUNT += 1


def _kernel_with_a_nonlocal():
    seen = 0

    @tl.tile_kernel
    def kernel(out, n):
        nonlocal seen  # (the enclosing function's, outside the kernel)
        for _ in tl.range(n):
            seen = seen + 1

    return kernel


def _nested_def_with_an_outer_nonlocal():
    seen = 0

    @tl.tile_kernel
    def kernel(out, n):
        def loop():
            nonlocal seen  # (the enclosing function's, not the kernel's)
            for _ in tl.range(n):
                seen = seen + 1

        loop()

    return kernel


@tl.tile_kernel
def import_binds_a_global(out, n):
    global math
    for _ in tl.range(n):
        import math  # noqa: F401


@tl.tile_kernel
def nested_def_changes_its_argument(out, n):
    box = [0]

    def loop(b):
        for _ in tl.range(n):
            b[0] = b[0] + 1

    loop(box)


@tl.tile_kernel
def range_of_four(out, n):
    for _ in tl.range(0, n, 1, 2):
        pass


@pytest.mark.parametrize("kernel, error, match", [
    (wrapped_loop, tl.TileSyntaxError, r"wrapped by another decorator under @tl.tile_kernel"),
    (break_in_a_for_else, tl.TileSyntaxError, r"`break` inside a tl.range loop cannot be traced"),
    (float_into_a_carried_int, tl.TileTypeError, r"loop-carried `c` is i32\[\] before the loop but f32\[\]"),
    (del_in_a_body, tl.TileSyntaxError, r"`del` inside a tl.range loop cannot be traced"),
    (a_global_counter, tl.TileSyntaxError, r"`_COUNT` is declared global or nonlocal, outside the kernel, and"),
    (_kernel_with_a_nonlocal(), tl.TileSyntaxError, r"`seen` is declared global or nonlocal, outside the kernel"),
    (_nested_def_with_an_outer_nonlocal(), tl.TileSyntaxError, r"`seen` is declared global or nonlocal, outside"),
    (import_binds_a_global, tl.TileSyntaxError, r"`math` is declared global or nonlocal, outside the kernel"),
    (nested_def_changes_its_argument, tl.TileSyntaxError, r"`b\[0\]` is assigned inside a tl.range loop, but"),
    (range_of_four, tl.TileTypeError, r"tl.range\(start, stop=None, step=1\) takes from 1 to 3 positional"),
    (a_list_from_before_the_loop, tl.TileSyntaxError, r"`count\[0\]` is assigned inside a tl.range loop, but"),
    (an_attribute_from_before_the_loop, tl.TileSyntaxError, r"`state.acc` is assigned inside a tl.range loop"),
])  # fmt: skip
def test_what_a_loop_rewrite_refuses(kernel, error, match, backend):
    """The wrapped kernel ran without its wrapper (n, not 2n), the break raised Python's
    SyntaxError, 0.5 went into the carried int as 0, and the list element, the attribute,
    the global and the enclosing function's variable kept one iteration's change (1, not 2)."""
    with pytest.raises(error, match=match):
        kernel[1](np.zeros(4, np.float32), 2, backend=backend)
