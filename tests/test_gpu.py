"""GPU tier: array types, streams and the launch path on a real GPU (skipped without one).

Run on the device: ``python -m pytest -m gpu tests/test_gpu.py``. The op property suites
run on the GPU too with ``TILELANG_TEST_BACKENDS=interpret,cuda``.
"""

import numpy as np
import pytest
from _blocks import tiled_matmul

import tilelang as tl
from tilelang._runtime import gpu_available

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not gpu_available(), reason="needs an NVIDIA GPU")]


@tl.tile_kernel(backend="cuda")
def axpy(x, y, out, alpha, TILE: tl.Constant):
    i = tl.block_id(0)
    a = tl.load(x, index=(i,), shape=(TILE,))
    b = tl.load(y, index=(i,), shape=(TILE,))
    tl.store(out, (a * alpha + b).astype(out.dtype), index=(i,))


def run(x, y, out, alpha=2.0):
    axpy[tl.cdiv(out.shape[0], 256)](x, y, out, alpha, TILE=256)


def expected(x, y, alpha=2.0):
    return np.asarray(x, np.float64) * alpha + np.asarray(y, np.float64)


def test_host_numpy_arrays_are_copied_there_and_back():
    rng = np.random.default_rng(1)
    x, y = rng.random(1000, dtype=np.float32), rng.random(1000, dtype=np.float32)
    out = np.full(1000, np.nan, np.float32)
    run(x, y, out)
    np.testing.assert_allclose(out, expected(x, y), rtol=1e-6)


@tl.tile_kernel(backend="cuda")
def add_rows(x, total, out, BM: tl.Constant, BN: tl.Constant):
    """Every row of x plus the matching row of total: blocks read an empty x when it has no rows."""
    i = tl.block_id(0)
    t = tl.load(total, index=(i, 0), shape=(BM, BN))
    tl.store(out, t + tl.load(x, index=(i, 0), shape=(BM, BN)), index=(i, 0))


def test_empty_host_arrays_are_passed_without_a_copy():
    """A (0, 1) host array (numba's to_device refused one: found on the H200) beside full ones."""
    x, total = np.zeros((0, 1), np.float32), np.arange(8, dtype=np.float32).reshape(8, 1)
    out = np.full((8, 1), np.nan, np.float32)
    add_rows[2](x, total, out, BM=4, BN=1)
    np.testing.assert_array_equal(out, total)  # x's rows all read the padding, 0


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_torch_tensors_of_every_float_dtype(dtype):
    torch = pytest.importorskip("torch")
    d = getattr(torch, dtype)
    x, y = (torch.rand(1000, device="cuda").to(d) for _ in range(2))
    out = torch.full((1000,), float("nan"), device="cuda", dtype=d)
    run(x, y, out, 0.5)
    want = x.double() * 0.5 + y.double()
    tol = {"float16": 2e-3, "bfloat16": 1.6e-2}.get(dtype, 1e-6)
    torch.testing.assert_close(out.double(), want, rtol=tol, atol=tol)


def test_cupy_and_numba_device_arrays():
    cupy = pytest.importorskip("cupy")
    from numba import cuda

    x, y = cupy.random.rand(777, dtype=cupy.float32), cupy.random.rand(777, dtype=cupy.float32)
    out = cupy.full(777, cupy.nan, dtype=cupy.float32)
    run(x, y, out)
    np.testing.assert_allclose(cupy.asnumpy(out), expected(cupy.asnumpy(x), cupy.asnumpy(y)), rtol=1e-6)
    nx, ny, nout = (cuda.to_device(cupy.asnumpy(a)) for a in (x, y, out))
    run(nx, ny, nout)
    np.testing.assert_allclose(nout.copy_to_host(), expected(cupy.asnumpy(x), cupy.asnumpy(y)), rtol=1e-6)


def test_strided_torch_views():
    torch = pytest.importorskip("torch")
    base = torch.rand(2000, device="cuda")
    x, y = base[::2], base[1::2]
    out = torch.full((1000,), float("nan"), device="cuda")
    run(x, y, out)
    torch.testing.assert_close(out.double(), x.double() * 2 + y.double())


def test_launches_follow_torchs_current_stream():
    torch = pytest.importorskip("torch")
    x = torch.rand(1 << 20, device="cuda")
    out = torch.empty_like(x)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        y = x * 3  # queued on `side`
        run(x, y, out)  # must run after it, on the same stream
        z = out + 1  # and this after the kernel
    side.synchronize()
    torch.testing.assert_close(z, x * 5 + 1)


def test_explicit_stream_argument():
    torch = pytest.importorskip("torch")
    x, y = torch.rand(4096, device="cuda"), torch.rand(4096, device="cuda")
    out = torch.full_like(x, float("nan"))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    axpy[16](x, y, out, 2.0, TILE=256, stream=side)
    side.synchronize()
    torch.testing.assert_close(out, x * 2 + y)


def test_cuda_graph_capture():
    torch = pytest.importorskip("torch")
    x, y = torch.rand(4096, device="cuda"), torch.rand(4096, device="cuda")
    out = torch.zeros_like(x)
    run(x, y, out)  # compile and load outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run(x, y, out)
    x.copy_(torch.rand_like(x))
    out.zero_()
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, x * 2 + y)


def test_gpu_results_match_the_interpreter_on_a_reduction():
    torch = pytest.importorskip("torch")

    @tl.tile_kernel
    def row_softmax(x, out, BLOCK: tl.Constant):
        row = tl.block_id(0)
        t = tl.load(x, index=(row, 0), shape=(1, BLOCK), padding=float("-inf"))
        e = tl.exp(t - tl.max(t))
        tl.store(out, e / tl.sum(e), index=(row, 0))

    x = np.random.default_rng(2).standard_normal((300, 1000)).astype(np.float32)
    want, got = np.zeros_like(x), torch.zeros(300, 1000, device="cuda")
    row_softmax[300](x, want, BLOCK=1024, backend="interpret")
    row_softmax[300](torch.from_numpy(x).cuda(), got, BLOCK=1024, backend="cuda")
    np.testing.assert_allclose(got.cpu().numpy(), want, rtol=2e-6, atol=1e-9)


def test_dot_with_more_than_48kb_of_shared_memory():
    torch = pytest.importorskip("torch")
    explained = tl.explain(tiled_matmul, "f32[:,:]", "f32[:,:]", "f32[:,:]", BM=128, BN=128, BK=64)
    # the operands' tiles copied ahead, 3 stages of 64 KB: over the 48 KB static limit
    assert "196608 bytes" in explained["resources"]
    a, b = torch.rand(300, 200, device="cuda"), torch.rand(200, 260, device="cuda")
    c = torch.full((300, 260), float("nan"), device="cuda")
    tiled_matmul[(3, 3)](a, b, c, BM=128, BN=128, BK=64)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------- the fast launch path


@pytest.fixture
def full_path_launches(monkeypatch):
    """Counts the launches that took the full path (the rest took a fast path)."""
    from tilelang._runtime import CudaRunner

    calls = []
    run_fully = CudaRunner.__call__
    monkeypatch.setattr(CudaRunner, "__call__", lambda self, *a: calls.append(1) or run_fully(self, *a))
    axpy._fast_paths.clear()
    return calls


def test_repeated_launches_take_the_fast_path_with_each_calls_values(full_path_launches):
    torch = pytest.importorskip("torch")
    for n, alpha in [(1000, 2.0), (3000, -1.5), (17, 0.25), (5000, 1e40)]:
        x, y = torch.rand(n, device="cuda") + 0.5, torch.rand(n, device="cuda")
        out = torch.full_like(x, float("nan"))
        with np.errstate(over="ignore"):
            run(x, y, out, alpha)
            want = x * float(np.float32(alpha)) + y  # alpha is a weak float32: 1e40 is inf
        torch.testing.assert_close(out, want)
    assert len(full_path_launches) == 1  # 1e40 too takes the fast path: a Python float is passed as its double


def test_fast_path_scalars_of_every_kind(full_path_launches):
    torch = pytest.importorskip("torch")

    @tl.tile_kernel(backend="cuda")
    def mixed(x, out, a, b, flag, TILE: tl.Constant):
        i = tl.block_id(0)
        v = tl.load(x, index=(i,), shape=(TILE,))
        tl.store(out, tl.where(flag, v * a + b, v).astype(out.dtype), index=(i,))

    x = torch.rand(700, device="cuda")
    for a, b, flag in [(3, np.float16(0.5), True), (-2, np.float16(-1.25), True), (7, np.float16(2), False)]:
        out = torch.full_like(x, float("nan"))
        mixed[tl.cdiv(700, 256)](x, out, a, b, flag, TILE=256)
        torch.testing.assert_close(out, x * a + float(b) if flag else x)
    assert len(full_path_launches) == 1


@pytest.mark.parametrize("library", ["numba", "cupy"])
def test_numba_and_cupy_arrays_take_the_fast_path(full_path_launches, library):
    if library == "cupy":
        cupy = pytest.importorskip("cupy")
        make, back = cupy.asarray, cupy.asnumpy
    else:
        from numba import cuda

        make, back = cuda.to_device, lambda a: a.copy_to_host()
    rng = np.random.default_rng(3)
    for n in (900, 2000):
        x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
        out = make(np.full(n, np.nan, np.float32))
        run(make(x), make(y), out)
        np.testing.assert_allclose(back(out), expected(x, y), rtol=1e-6)
    assert len(full_path_launches) == 1


def test_launch_from_a_thread_where_no_context_is_current():
    import threading

    from cuda.bindings import driver

    torch = pytest.importorskip("torch")
    x, y = torch.rand(1000, device="cuda"), torch.rand(1000, device="cuda")
    outs = [torch.full_like(x, float("nan")) for _ in range(3)]
    run(x, y, outs[0])  # loaded here; the thread takes the fast path
    contexts, errors = [], []

    def launch_twice():
        try:
            contexts.append(int(driver.cuCtxGetCurrent()[1]))
            for out in outs[1:]:
                run(x, y, out)
        except Exception as err:  # reported below: pytest does not see a thread's exceptions
            errors.append(err)

    thread = threading.Thread(target=launch_twice)
    thread.start()
    thread.join()
    assert contexts == [0] and not errors  # the launch made the device's context current
    torch.cuda.synchronize()
    for out in outs:
        torch.testing.assert_close(out, x * 2 + y)


def test_a_grid_past_cudas_limits_is_located_on_the_fast_path_too():
    torch = pytest.importorskip("torch")
    x = torch.rand(256, device="cuda")
    axpy[(1, 1)](x, x, x, 1.0, TILE=256)  # (a fast path now exists; it must not hand the driver the grid)
    for grid in [(1, 70_000), (2**31, 1), (1, 1, 65_536)]:
        with pytest.raises(tl.TileArgumentError, match=r"test_gpu.py:\d+.*grid sizes must be"):
            axpy[grid](x, x, x, 1.0, TILE=256)


def test_fast_path_declines_calls_that_differ(full_path_launches):
    torch = pytest.importorskip("torch")
    base = torch.rand(2000, device="cuda")
    out = torch.full((1000,), float("nan"), device="cuda")
    run(base[:1000], base[1000:], out)  # contiguous: the full path
    run(base[::2], base[1::2], out)  # strided: declined, the full path
    torch.testing.assert_close(out, base[::2] * 2 + base[1::2])
    xh, yh, outh = torch.rand(1000), torch.rand(1000), torch.full((1000,), float("nan"))
    run(xh, yh, outh)  # host tensors: declined, the full path (copies)
    torch.testing.assert_close(outh, xh * 2 + yh)
    run(base[:1000], base[1000:], out)  # alike the first: fast
    torch.testing.assert_close(out, base[:1000] * 2 + base[1000:])
    assert len(full_path_launches) == 3


def test_arrays_known_by_dlpack_alone(full_path_launches):
    cupy = pytest.importorskip("cupy")

    class DLPackOnly:  # a framework tilelang knows only through DLPack
        def __init__(self, array):
            self.array = array

        def __dlpack__(self, **kwargs):
            return self.array.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.array.__dlpack_device__()

    for n in (1000, 3000):
        x, y = cupy.random.rand(n, dtype=cupy.float32), cupy.random.rand(n, dtype=cupy.float32)
        out = cupy.full(n, cupy.nan, dtype=cupy.float32)
        axpy[tl.cdiv(n, 256)](DLPackOnly(x), DLPackOnly(y), DLPackOnly(out), 2.0, TILE=256)
        np.testing.assert_allclose(cupy.asnumpy(out), expected(cupy.asnumpy(x), cupy.asnumpy(y)), rtol=1e-6)
    assert len(full_path_launches) == 1
