"""Bugs found in review, each checked on the CPU backend against the interpreter."""

import math
import threading

import numpy as np
import pytest

import tilelang as tl
import tilelang.testing as tlt


@tl.tile_kernel
def chain(a, out, N: tl.Constant):
    """Three carried values in a chain: their layouts settle over several passes."""
    t = tl.load(a, index=(0, 0), shape=(N, N))
    p1, p2, p3 = t, t, t
    acc = tl.zeros((N,), tl.float32)
    for _ in tl.range(3):
        p1, p2, p3 = p2, p3, tl.dot(t, t)
        acc += tl.sum(p1, axis=1)
    tl.store(out, acc, index=(0,))


def test_long_chains_of_carried_values_keep_layouts_consistent():
    a = np.random.default_rng(0).integers(-3, 4, (32, 32)).astype(np.float32)
    want, got = np.zeros(32, np.float32), np.zeros(32, np.float32)
    chain[1](a, want, N=32, backend="interpret")
    chain[1](a, got, N=32, backend="cpu")
    np.testing.assert_array_equal(got, want)


@tl.tile_kernel
def fill(out, C: tl.Constant):
    tl.store(out, tl.full((8,), 1.0, tl.float32) / C + tl.arange(0, 1) * 0, index=(0,))


@pytest.mark.parametrize("backend", ["interpret", "cpu"])
def test_read_only_outputs_are_refused(backend):
    out = np.frombuffer(b"\0" * 32, np.float32)
    with pytest.raises(tl.TileArgumentError, match="`out` is read-only, and the kernel writes it"):
        fill[1](out, C=2.0, backend=backend)


def test_the_cuda_backend_refuses_read_only_host_outputs_before_running(monkeypatch):
    """It copied the result back into the read-only array after the kernel had run: a raw
    NumPy error, the result lost."""
    from tilelang import _runtime

    monkeypatch.setattr(_runtime, "gpu_count", lambda: 1)  # the check comes before any GPU work
    monkeypatch.setattr(_runtime, "gpu_available", lambda: True)
    out = np.frombuffer(b"\0" * 32, np.float32)
    with pytest.raises(tl.TileArgumentError, match="`out` is read-only, and the kernel writes it"):
        fill[1](out, C=2.0, backend="cuda")


def test_the_cuda_backend_refuses_a_read_only_device_output(monkeypatch):
    from tilelang import _runtime

    class ReadOnly:  # a producer marks its memory read-only in the interface
        __cuda_array_interface__ = {"shape": (8,), "typestr": "<f4", "data": (4096, True), "version": 3}

    monkeypatch.setattr(_runtime, "gpu_count", lambda: 1)
    monkeypatch.setattr(_runtime, "gpu_available", lambda: True)
    with pytest.raises(tl.TileArgumentError, match="`out` is read-only, and the kernel writes it"):
        fill[1](ReadOnly(), C=2.0, backend="cuda")


@pytest.mark.parametrize("backend", ["interpret", "cpu", "cuda"])
def test_written_arrays_whose_elements_share_memory_are_refused(backend, monkeypatch):
    """An expanded view (stride 0): every write to one address raced (torch refuses in-place
    writes to such tensors); read, a broadcast is fine. (CUDA: refused before any GPU work.)"""
    from tilelang import _runtime

    monkeypatch.setattr(_runtime, "gpu_count", lambda: 1)
    monkeypatch.setattr(_runtime, "gpu_available", lambda: True)
    shared = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (8,), (0,), writeable=True)
    with pytest.raises(tl.TileArgumentError, match="`out` has elements that share memory"):
        fill[1](shared, C=2.0, backend=backend)

    class Expanded:  # a device array, expanded
        __cuda_array_interface__ = {
            "shape": (8,),
            "typestr": "<f4",
            "data": (4096, False),
            "strides": (0,),
            "version": 3,
        }

    if backend == "cuda":
        with pytest.raises(tl.TileArgumentError, match="`out` has elements that share memory"):
            fill[1](Expanded(), C=2.0, backend=backend)
    else:  # an empty array (NumPy's strides are 0 there) has no elements to share
        for shape in [(3, 0), (0, 8)]:  # (strides (0, 0))
            fill_rows[1](np.zeros(shape, np.float32), backend=backend)


@tl.tile_kernel
def fill_rows(out):
    tl.store(out, tl.full((4, 4), 1.0, tl.float32), index=(0, 0))


def test_a_class_is_not_an_array():
    with pytest.raises(tl.TileArgumentError, match="expected an array or a scalar, got type"):
        fill[1](np.ndarray, C=2.0, backend="interpret")


def test_host_dlpack_arrays_numpy_cannot_import_fall_back_to_array():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    from _dlpack import KDL_CPU, DLPackArray

    x = np.arange(8).astype(ml_dtypes.bfloat16)

    class Both(DLPackArray):  # like a JAX CPU array: DLPack (bfloat16, which NumPy cannot import) and __array__
        def __array__(self, dtype=None, copy=None):
            return x

    both = Both((8,), (1,), ("bfloat", 16), x.__array_interface__["data"][0], (KDL_CPU, 0))
    with pytest.raises(Exception, match="dtype"):
        np.from_dlpack(both)
    out = np.zeros(8, np.float32)

    @tl.tile_kernel
    def widen(x, out):
        tl.store(out, tl.load(x, index=(0,), shape=(8,)).astype(tl.float32), index=(0,))

    widen[1](both, out, backend="interpret")
    np.testing.assert_array_equal(out, np.arange(8, dtype=np.float32))


def test_constants_zero_and_minus_zero_are_different_specializations():
    out = np.zeros(8, np.float32)
    fill[1](out, C=0.0, backend="cpu")
    assert np.all(out == np.inf)
    fill[1](out, C=-0.0, backend="cpu")
    assert np.all(out == -np.inf)


def test_a_nan_constant_is_one_specialization():
    out = np.zeros(8, np.float32)
    for nan in (float("nan"), float("inf") - float("inf"), float("nan")):  # three NaN objects
        fill[1](out, C=nan, backend="interpret")
        assert np.isnan(out).all()
    assert sum(entry[2][2] != entry[2][2] for key, _ in fill._compiled for entry in key) == 1
    from tilelang._fastpath import constant_key

    assert constant_key((1.0, float("nan"))) == constant_key((1.0, float("inf") - float("inf")))
    other_nan = np.float64(np.frombuffer(np.uint64(0x7FF8000000000001).tobytes(), np.float64)[0])
    assert constant_key(np.float64("nan")) == constant_key(other_nan)  # NumPy's too, whatever their payload
    assert constant_key(np.float32("nan")) == constant_key(float("nan"))  # a NumPy scalar is its Python value


@tl.tile_kernel
def window(x, out, TILE: tl.Constant, SCALE: tl.Constant, NEG: tl.Constant):
    t = tl.load(x, index=(0,), shape=(TILE,)) * SCALE
    tl.store(out, -t if NEG else t, index=(0,))


def test_numpy_scalar_constants_are_their_python_values():
    x, out = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    for tile, scale, neg in [(64, 0.5, True), (np.int64(64), np.float32(0.5), np.bool_(True)), (np.int32(64), 0.5, 1)]:
        out[:] = 0
        window[1](x, out, TILE=tile, SCALE=scale, NEG=neg, backend="interpret")
        np.testing.assert_array_equal(out, -x * 0.5)
    assert len(window._compiled) == 2  # np.int64(64) is 64 and np.float32(0.5) is 0.5; the int 1 is not True
    from tilelang._fastpath import constant_key

    assert constant_key(np.int64(64)) == constant_key(64) and constant_key(np.bool_(True)) == constant_key(True)
    assert constant_key((np.int32(16), np.float64(2.0))) == constant_key((16, 2.0))


def test_kernel_parameters_may_be_named_like_the_launchs_own():
    @tl.tile_kernel
    def named(kernel, grid_spec, out, TILE: tl.Constant):
        tl.store(out, tl.load(kernel, index=(0,), shape=(TILE,)) + grid_spec, index=(0,))

    x, out = np.arange(4, dtype=np.float32), np.zeros(4, np.float32)
    named[1](out=out, kernel=x, grid_spec=2.0, TILE=4, backend="interpret")
    np.testing.assert_array_equal(out, x + 2)


@pytest.mark.parametrize("grid", [2**32 + 1, 2**31, (1, 65536), (1, 1, 70000)])
def test_grid_sizes_past_cudas_limits_are_refused(grid):
    """From 2**31 blocks block ids (int32) wrapped to negative values on the CPU backend."""
    out = np.zeros(8, np.float32)
    with pytest.raises(tl.TileArgumentError, match=r"grid sizes must be ints from 0 to 2\*\*31 - 1"):
        fill[grid](out, C=1.0, backend="interpret")


@tl.tile_kernel
def broadcast_arange(out):
    tl.store(out, tl.arange(0, 1) + tl.zeros((8,), tl.int32), index=(0,))


def test_a_one_element_arange_broadcasts_its_value():
    for backend in ("interpret", "cpu"):
        out = np.full(8, -1, np.int32)
        broadcast_arange[1](out, backend=backend)
        np.testing.assert_array_equal(out, np.zeros(8, np.int32), err_msg=backend)


def test_threads_compiling_one_kernel_at_once(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))

    @tl.tile_kernel
    def twice(x, out):
        tl.store(out, tl.load(x, index=(0,), shape=(16,)) * 2, index=(0,))

    x = np.arange(16, dtype=np.float32)
    outs = [np.zeros(16, np.float32) for _ in range(6)]
    errors, start = [], threading.Barrier(len(outs))

    def run(out):
        start.wait()
        try:
            twice[1](x, out, backend="cpu")
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=run, args=(o,)) for o in outs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for out in outs:
        np.testing.assert_array_equal(out, x * 2)


class _ArrayLike:
    """Something NumPy can only copy: a kernel's writes to it would be lost."""

    def __init__(self, n):
        self.data = np.zeros(n, np.float32)

    def __array__(self, dtype=None, copy=None):
        return self.data.copy()


def test_outputs_that_convert_to_a_copy_are_refused():
    with pytest.raises(tl.TileArgumentError, match="`out` converts to a NumPy copy"):
        fill[1](_ArrayLike(8), C=2.0, backend="interpret")


@tl.tile_kernel
def divmod_kernel(x, y, q, r):
    a, b = tl.load(x, index=(0,), shape=(8,)), tl.load(y, index=(0,), shape=(8,))
    tl.store(q, a // b, index=(0,))
    tl.store(r, a % b, index=(0,))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_floordiv_and_mod_at_the_extremes(dtype):
    """Quotients beyond 2**52 (or inf), zero remainders' signs, zero and inf divisors: as NumPy."""
    tiny = np.finfo(dtype).smallest_subnormal
    x = np.array([1, -1, 1e30, -7.5, 3e38, 1, 0, np.inf], dtype)
    y = np.array([tiny, tiny, 1e-10, 2, 1e-30, np.inf, 0, 3], dtype)
    with np.errstate(all="ignore"):
        want_q, want_r = np.floor_divide(x, y), np.mod(x, y)
    q, r = np.zeros(8, dtype), np.zeros(8, dtype)
    divmod_kernel[1](x, y, q, r, backend="cpu")
    for got, want in ((q, want_q), (r, want_r)):
        np.testing.assert_array_equal(got, want)
        assert np.array_equal(np.signbit(got), np.signbit(want))


@tl.tile_kernel
def window_at(x, out, off):
    tl.store(out, tl.load(x, offset=(off,), shape=(8,), padding=-1.0), index=(0,))


def test_cubins_are_cached_per_parameter_type():
    """An int32 and a uint32 offset gave the same generated code; the cubin cache keyed on the
    code alone handed the uint32 kernel to the int32 launch (-2 read as 4294967294 on the H200)."""
    kernels = []
    for scalar in ("i32", "u32"):
        key, _ = window_at.specialize(window_at.bind(("f32[:]", "f32[:]", scalar), {}))
        kernels.append(window_at.compile(key, "cuda").backend_kernel)
    assert kernels[0].digest != kernels[1].digest


@tl.tile_kernel(num_threads=32)
def carried_broadcast(out, N, B: tl.Constant):
    a = tl.zeros((), tl.float32)
    b = tl.zeros((B,), tl.float32)
    for _ in tl.range(0, N):
        a, b = a + 1.0, tl.broadcast_to(a, (B,))  # b takes a's old value: a broadcast is no op
    tl.store(out, b, index=(0,))


@tl.tile_kernel(num_threads=32)
def carried_column(out, N, B: tl.Constant):
    best = tl.arange(0, 32)
    hist = tl.zeros((32, B), tl.int32)
    for _ in tl.range(0, N):
        best, hist = best + 1, tl.broadcast_to(best[:, None], (32, B))
    tl.store(out, hist, index=(0, 0))


@pytest.mark.parametrize("backend", ["interpret", "cpu"])
def test_carried_values_update_at_once(backend):
    """A carried register array given a one-slot carried value read the new one: the copy at
    the end of an iteration assigned one-slot values first (found in review)."""
    out = np.full(64, -1, np.float32)
    carried_broadcast[1](out, 5, B=64, backend=backend)
    np.testing.assert_array_equal(out, 4.0)
    hist = np.full((32, 4), -1, np.int32)
    carried_column[1](hist, 3, B=4, backend=backend)
    np.testing.assert_array_equal(hist, np.broadcast_to(np.arange(32)[:, None] + 2, (32, 4)))


@tl.tile_kernel(num_threads=256)
def scores(q, k, s, BM: tl.Constant, BN: tl.Constant, D: tl.Constant):
    """Attention's q @ k.T with head dim 128: k.T's tile is 128 x 64."""
    qt, kt = tl.load(q, index=(0, 0), shape=(BM, D)), tl.load(k, index=(0, 0), shape=(BN, D))
    tl.store(s, tl.dot(qt, tl.transpose(kt)), index=(0, 0))


def test_a_transposed_operand_keeps_to_the_size_limit():
    """A transpose that took the tensor cores' b layout (replicated over the warps splitting m)
    held 128 elements a thread and was refused (found in review, by compile_time.py)."""
    rng = np.random.default_rng(0)
    q, k = (rng.uniform(-1, 1, (64, 128)).astype(np.float16) for _ in range(2))
    s = np.zeros((64, 64), np.float32)
    scores[1](q, k, s, BM=64, BN=64, D=128, backend="cpu")
    np.testing.assert_allclose(s, q.astype(np.float64) @ k.astype(np.float64).T, rtol=1e-5, atol=1e-4)


@tl.tile_kernel(num_threads=32)
def erf_of_one(x, out):
    tl.store(out, tl.erf(tl.gather(x, 0))[None], index=(0,))


@pytest.mark.parametrize("backend", ["interpret", "cpu"])
def test_erf_of_a_0d_tile(backend):
    """The interpreter's erf (NumPy's frompyfunc of math.erf) gave a Python float for a 0-d
    tile and crashed converting it (found by the fuzzer, tilelang.testing.fuzz)."""
    out = np.zeros(1, np.float32)
    erf_of_one[1](np.array([0.5], np.float32), out, backend=backend)
    np.testing.assert_allclose(out, math.erf(0.5), rtol=1e-6)


@tl.tile_kernel(num_threads=32)
def wrapped_arithmetic(x, rem, total):
    v = tl.load(x, index=(0,), shape=(8,))
    square = v * v  # wraps for the large ones
    tl.store(rem, square % 11, index=(0,))
    tl.store(total, square + v - v * 3 - tl.sum(v), index=(0,))


@pytest.mark.parametrize("backend", tl.testing.default_backends())
def test_int64_arithmetic_wraps(backend):
    """numba marks int64 `*`, `+`, `-` nsw (overflow undefined): LLVM took a wrapped square
    for nonnegative and made its `% 11` an unsigned remainder (4 for 10). Found by the fuzzer."""
    x = np.array([3623878656, -3037000500, 2**62 + 1, -(2**63), 7, -7, 2**32 + 3, 2**63 - 1], np.int64)
    with np.errstate(over="ignore"):
        square = x * x
        want_rem, want_total = square % 11, square + x - x * 3 - x.sum()
    rem, total = np.zeros(8, np.int64), np.zeros(8, np.int64)
    wrapped_arithmetic[1](x, rem, total, backend=backend)
    np.testing.assert_array_equal(rem, want_rem)
    np.testing.assert_array_equal(total, want_total)


@tl.tile_kernel(num_threads=32)
def count_iterations(out, start, stop, step):
    acc = tl.zeros((1,), tl.int32)
    for _ in tl.range(start, stop, step):
        acc = acc + 1
    tl.store(out, acc, index=(0,))


@pytest.mark.parametrize("dtype, start, stop, step, count", [
    (np.int32, 2**31 - 8, 2**31 - 1, 5, 2),  # the index would pass INT32_MAX: it looped forever
    (np.int8, 100, 127, 10, 3),
    (np.int8, -100, -128, -10, 3),
    (np.int64, -(2**63), 2**63 - 1, 2**62, 4),
    (np.uint32, 10, 0, 2**32 - 1, 0),  # an unsigned step counts up, however large (it was read as -1)
    (np.uint32, 0, 10, 2**31 + 1, 1),
    (np.int32, 0, 10, 0, None),  # a zero step raises on the CPU (no iterations on the GPU)
])  # fmt: skip
def test_a_range_counts_its_iterations_as_python_does(dtype, start, stop, step, count):
    """Loops test a trip count computed once, so the index never overflows the test, and an
    unsigned step counts up (the loops compared the index with the stop after adding the step)."""
    out = np.zeros(1, np.int32)
    args = (out, dtype(start), dtype(stop), dtype(step))
    if count is None:
        with pytest.raises(tl.TileValueError, match="step must not be zero"):
            count_iterations[1](*args, backend="cpu")
        return
    for backend in tlt.available_backends():
        count_iterations[1](*args, backend=backend)
        assert out[0] == count == len(range(start, stop, step)), backend


@tl.tile_kernel
def reductions_of_a_constant(x, sums, argmaxes, scans, ROWS: tl.Constant, COLS: tl.Constant):
    """Tiles that fold to constants (x * 0; the argmax along an axis of one) reduced and scanned
    across lanes and warps (fuzzing: the CPU backend failed on shuffles of an immediate)."""
    t = tl.load(x, index=(0, 0), shape=(ROWS, COLS)) * 0 + 1
    first = tl.argmax(tl.load(x, index=(0, 0), shape=(1, COLS)), axis=0)  # of one row: 0 everywhere
    tl.store(sums, tl.sum(t, axis=0) + tl.sum(first), index=(0,))
    tl.store(argmaxes, tl.argmax(t, axis=1), index=(0,))
    tl.store(scans, tl.cumsum(t, axis=1) + tl.cumsum(first * 3, axis=0)[None, :], index=(0, 0))


@pytest.mark.parametrize("threads", [32, 128])
def test_reductions_and_scans_of_a_constant_tile(threads):
    rows, cols = 8, 64
    x = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)

    def reference(x, sums, argmaxes, scans):
        return (
            np.full(cols, rows, np.float32),
            np.zeros(rows, np.int32),
            np.tile(np.arange(1, cols + 1, dtype=np.float32), (rows, 1)),
        )

    kernel = tl.tile_kernel(reductions_of_a_constant.fn, num_threads=threads)
    args = (x, np.zeros(cols, np.float32), np.zeros(rows, np.int32), np.zeros((rows, cols), np.float32))
    tlt.check_kernel(kernel, 1, args, reference=reference, outputs=(1, 2, 3), ROWS=rows, COLS=cols)


@tl.tile_kernel
def uniform_atomics(x, sums, counts, ROWS: tl.Constant):
    """Atomics and histogram counts of values that are the same in every register slot of a
    thread (a constant; a broadcast along register bits): each element still adds (fuzzing:
    one add per thread, not per element, 1/4 of the sum at 128 threads)."""
    wide = tl.broadcast_to(tl.load(x, index=(0, 0, 0), shape=(ROWS, 2, 1)), (ROWS, 2, 8))
    tl.atomic_add(sums, 0, wide)
    tl.atomic_add(sums, 1, tl.full((64,), 1, tl.int32))
    tl.store(counts, tl.histogram(tl.full((64,), 3, tl.int32), 8), index=(0,))


@pytest.mark.parametrize("threads", [32, 128, 256])
def test_atomics_of_uniform_values_add_every_element(threads):
    rows = 30
    x = np.random.default_rng(1).integers(-5, 6, (rows, 2, 1)).astype(np.int32)

    def reference(x, sums, counts):
        return np.array([8 * x.sum(), 64], np.int32), np.array([0, 0, 0, 64, 0, 0, 0, 0], np.int32)

    kernel = tl.tile_kernel(uniform_atomics.fn, num_threads=threads)
    args = (x, np.zeros(2, np.int32), np.zeros(8, np.int32))
    tlt.check_kernel(kernel, 1, args, reference=reference, outputs=(1, 2), ROWS=rows)
    lines = tl.explain(kernel, x, *args[1:], ROWS=rows, backend="cpu")["thread_ir"].splitlines()
    atomic = next(line for line in lines if "atomic_add sums[0:i64]" in line)  # (the program both backends emit)
    assert atomic.endswith(f" x{32 * 2 * 8 // threads}")  # a thread's elements of the (32, 2, 8)-padded tile


@tl.tile_kernel
def reductions_of_an_argument(out, a, b):
    tl.store(out, tl.sum(tl.full((4,), a, tl.int32))[None], index=(0,))
    tl.store(out, tl.max(tl.full((512,), b, tl.int32), keepdims=True), index=(1,))


@pytest.mark.parametrize("threads", [32, 256])
def test_a_reduction_of_a_scalar_argument_broadcast(threads):
    """The CPU backend's shuffle read the argument from a register table it is not in (KeyError)."""
    kernel = tl.tile_kernel(reductions_of_an_argument.fn, num_threads=threads)
    reference = lambda out, a, b: np.array([4 * a, b], np.int32)  # noqa: E731
    tlt.check_kernel(kernel, 1, (np.zeros(2, np.int32), np.int32(3), np.int32(-7)), reference=reference, outputs=(0,))


@tl.tile_kernel
def extremes(x, out, idx, T: tl.Constant):
    t = tl.load(x, index=(0,), shape=(T,))
    tl.store(out, tl.full((1,), tl.max(t), t.dtype), index=(0,))
    tl.store(out, tl.full((1,), tl.min(t), t.dtype), index=(1,))
    tl.store(idx, tl.full((1,), tl.argmax(t), tl.int32), index=(0,))
    tl.store(idx, tl.full((1,), tl.argmin(t), tl.int32), index=(1,))


@pytest.mark.parametrize("backend", tlt.default_backends())
@pytest.mark.parametrize("dtype", [tl.float8_e4m3fn, tl.float8_e5m2])
def test_float8_extremes_of_a_partial_tile(backend, dtype):
    """A max over float8_e4m3fn with phantom slots was NaN on the CPU backend: their identity,
    -inf, rounded to a float8 with no infinity; its largest value is the identity there."""
    for values in ([0.0] * 6, [-448.0, 1.0, -448.0, -448.0, 3.0, 3.0], [2.0, 448.0, -3.0, 448.0, 0.5, -3.0]):
        x = np.array(values, np.float32).astype(dtype.np)
        out, idx = np.zeros(2, dtype.np), np.zeros(2, np.int32)
        extremes[1](x, out, idx, T=6, backend=backend)  # (6 of a layout's 8 slots)
        assert out.astype(np.float32).tolist() == [max(values), min(values)], (values, out)
        assert idx.tolist() == [int(np.argmax(values)), int(np.argmin(values))], (values, idx)


@tl.tile_kernel(debug=True)
def checked_offset(x, i, T: tl.Constant):
    tl.store(x, tl.load(x, index=(i * 2,), shape=(T,)), index=(0,))


def test_the_cost_of_a_debug_kernel_leaves_out_its_error_word():
    """explain(grid=) of a kernel with debug checks raised KeyError: '__tl_errors' (the
    hidden array the checks write was taken for an argument)."""
    cost = tl.explain(checked_offset, np.zeros(250_000, np.float32), 0, T=16, grid=1)["cost"]
    assert cost.startswith("grid (1,): 2.000 MB moved")  # (x read and written, 1 MB each)
