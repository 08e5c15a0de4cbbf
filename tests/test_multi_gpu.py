"""Several GPUs in one process: a kernel runs where its arrays are (needs two GPUs).

Run on a two-GPU machine: ``python -m pytest -m gpu tests/test_multi_gpu.py``.
"""

import pytest

import tilelang as tl
from tilelang._runtime import gpu_count

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(gpu_count() < 2, reason="needs two GPUs")]
torch = pytest.importorskip("torch")


@tl.tile_kernel(backend="cuda")
def axpy(x, y, out, alpha, TILE: tl.Constant):
    i = tl.block_id(0)
    tl.store(out, tl.load(x, index=(i,), shape=(TILE,)) * alpha + tl.load(y, index=(i,), shape=(TILE,)), index=(i,))


@pytest.fixture(autouse=True)
def _restore_current_device():
    yield
    torch.cuda.set_device(0)  # later tests (in this process) expect the default device


def tensors(device, n=10_000):
    x, y = torch.rand(n, device=device), torch.rand(n, device=device)
    return x, y, torch.full_like(x, float("nan"))


@pytest.mark.parametrize("current", [0, 1])
def test_alternating_devices_whatever_the_current_one(current):
    torch.cuda.set_device(current)
    for step in range(6):
        device = f"cuda:{step % 2}"
        x, y, out = tensors(device)
        axpy[tl.cdiv(x.shape[0], 512)](x, y, out, 3.0, TILE=512)
        torch.testing.assert_close(out, x * 3 + y)
        assert torch.cuda.current_device() == current, "a launch must leave the caller's current device alone"
    compiled = next(iter(axpy._compiled.values())).backend_kernel
    assert set(compiled._loaded) == {0, 1}, "one module loaded per device"


def test_streams_come_from_the_arrays_device():
    torch.cuda.set_device(0)
    x, y, out = tensors("cuda:1")
    side = torch.cuda.Stream(device="cuda:1")
    with torch.cuda.device(1), torch.cuda.stream(side):
        y2 = y * 2  # queued on cuda:1's side stream, which the kernel must follow
        axpy[tl.cdiv(x.shape[0], 512)](x, y2, out, 1.0, TILE=512)
    side.synchronize()
    torch.testing.assert_close(out, x + y * 2)


def test_arrays_on_two_devices_raise_naming_them():
    torch.cuda.set_device(1)
    x, _, out = tensors("cuda:0")
    y = torch.rand(x.shape[0], device="cuda:1")
    with pytest.raises(tl.TileArgumentError, match=r"`x` on cuda:0, `y` on cuda:1, `out` on cuda:0"):
        axpy[1](x, y, out, 1.0, TILE=512)
    assert torch.cuda.current_device() == 1


def test_numba_arrays_launch_on_their_own_device():
    from numba import cuda

    for step in range(4):  # the fast path must tell the devices apart too
        device = step % 2
        x, y, out = tensors(f"cuda:{device}")
        with cuda.gpus[device]:
            nx, ny, nout = (cuda.as_cuda_array(t) for t in (x, y, out))
        axpy[tl.cdiv(x.shape[0], 512)](nx, ny, nout, 3.0, TILE=512)
        torch.testing.assert_close(out, x * 3 + y)


def test_cupy_arrays_launch_on_their_own_device():
    cupy = pytest.importorskip("cupy")

    for step in range(4):  # read by their attributes, the fast path asking each its device
        device = step % 2
        with cupy.cuda.Device(device):
            x, y = cupy.random.rand(10_000, dtype=cupy.float32), cupy.random.rand(10_000, dtype=cupy.float32)
            out = cupy.full_like(x, cupy.nan)
        axpy[tl.cdiv(x.shape[0], 512)](x, y, out, 3.0, TILE=512)
        with cupy.cuda.Device(device):
            cupy.testing.assert_allclose(out, x * 3 + y, rtol=1e-6)
