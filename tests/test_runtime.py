"""Runtime: specialization keys, the compiled-kernel disk cache, argument errors (CPU tier)."""

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import tilelang as tl
from tilelang._backends import cuda as cuda_backend


@tl.tile_kernel
def scale(x, out, alpha, TILE: tl.Constant):
    i = tl.block_id(0)
    tl.store(out, tl.load(x, index=(i,), shape=(TILE,)) * alpha, index=(i,))


def key_of(*args, **constants):
    return scale.specialize(scale.bind(args, constants))[0]


def test_key_tells_dtype_rank_stride_scalars_and_constants_apart():
    x32, x64 = np.zeros(8, np.float32), np.zeros(8, np.float64)
    base = key_of(x32, x32, 2.0, TILE=4)
    assert key_of(np.ones(9, np.float32), np.ones(9, np.float32), 3.0, TILE=4) == base  # shapes, values: runtime
    assert key_of(x64, x64, 2.0, TILE=4) != base
    assert key_of(np.zeros((2, 4), np.float32), x32, 2.0, TILE=4) != base
    assert key_of(np.zeros(16, np.float32)[::2], x32, 2.0, TILE=4) != base  # last dimension not unit-stride
    assert key_of(x32, x32, 2, TILE=4) != base  # int scalar
    assert key_of(x32, x32, np.float64(2.0), TILE=4) != base  # NumPy scalars are strongly typed
    assert key_of(x32, x32, 2.0, TILE=8) != base
    assert hash(base) == hash(key_of(x32, x32, 2.0, TILE=4))


def test_strided_arrays_run(tmp_path):
    x = np.arange(40, dtype=np.float32)[::2]
    out = np.zeros(20, np.float32)
    scale[tl.cdiv(20, 8)](x, out, 3.0, TILE=8, backend="cpu")
    np.testing.assert_array_equal(out, x * 3)


def test_wrong_argument_count_and_kind_name_the_parameter():
    x = np.zeros(8, np.float32)
    with pytest.raises(tl.TileArgumentError, match="missing a required argument: 'alpha'"):
        scale[1](x, x, TILE=8, backend="cpu")
    with pytest.raises(tl.TileArgumentError, match="argument `alpha`: expected an array or a scalar, got list"):
        scale[1](x, x, [1.0], TILE=8, backend="cpu")
    with pytest.raises(tl.TileTypeError, match="argument `x`"):
        scale[1](np.zeros(8, np.complex64), x, 1.0, TILE=8, backend="cpu")


# ------------------------------------------------------------------ disk cache


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    return tmp_path


def compiled(kernel=scale, **constants):
    """A fresh CudaKernel (nothing cached in this process) for the kernel's thread program."""
    args = ("f32[:]", "f32[:]", "f32")
    known = kernel.compile(kernel.specialize(kernel.bind(args, constants or {"TILE": 256}))[0], "cuda").backend_kernel
    return cuda_backend.CudaKernel(known.program)


def test_cubin_is_cached_and_reloaded(cache):
    first = compiled()
    code, report, entry = first.cubin()
    assert code[:4] == b"\x7fELF" and "registers" in report and entry.startswith("_Z")
    assert cuda_backend.load_cached(first.digest, (9, 0)) == (code, report, entry)


@pytest.mark.parametrize("damage", ["flip", "truncate", "bad-json"])
def test_a_corrupted_entry_is_detected_removed_and_rebuilt(cache, damage):
    kernel = compiled()
    code, _, _ = kernel.cubin()
    code_path, meta_path = cuda_backend._cache_paths(kernel.digest, (9, 0))
    if damage == "flip":
        with open(code_path, "r+b") as f:
            f.seek(100)
            f.write(bytes([code[100] ^ 0xFF]))
    elif damage == "truncate":
        with open(code_path, "r+b") as f:
            f.truncate(10)
    else:
        with open(meta_path, "w") as f:
            f.write("{not json")
    assert cuda_backend.load_cached(kernel.digest, (9, 0)) is None
    assert not os.path.exists(code_path) and not os.path.exists(meta_path)
    rebuilt = cuda_backend.CudaKernel(kernel.program).cubin()  # compiled again (numba numbers each compile,
    assert rebuilt[0][:4] == b"\x7fELF" and rebuilt[0] != code  # so the bytes differ from the damaged entry's)
    assert cuda_backend.load_cached(kernel.digest, (9, 0)) == rebuilt


def test_the_key_covers_the_toolchain(cache, monkeypatch):
    kernel = compiled()
    versions = cuda_backend.toolchain_versions() + ["numba-cuda==99"]
    monkeypatch.setattr(cuda_backend, "toolchain_versions", lambda: versions)
    assert cuda_backend.CudaKernel(kernel.program).digest != kernel.digest


def test_concurrent_writers_leave_a_valid_entry(cache):
    kernel = compiled()
    code, report, entry = kernel.cubin()
    errors = []

    def write():
        try:
            for _ in range(20):
                cuda_backend.store_cached(kernel.digest, (9, 0), code, report, entry)
                loaded = cuda_backend.load_cached(kernel.digest, (9, 0))
                assert loaded is None or loaded == (code, report, entry)
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=write) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert cuda_backend.load_cached(kernel.digest, (9, 0)) == (code, report, entry)


SCRIPT = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {tests!r})
    from test_runtime import compiled
    start = time.perf_counter()
    kernel = compiled(TILE=512)
    kernel.cubin()
    print(time.perf_counter() - start, "numba.cuda" in sys.modules)
    """
)


def test_a_second_process_loads_the_cubin_without_nvvm(cache):
    env = dict(os.environ, TILELANG_CACHE_DIR=str(cache))
    script = SCRIPT.format(tests=os.path.dirname(__file__))
    cold = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert cold.stdout.split()[1] == "True"  # the first process compiled with numba-cuda
    command = [sys.executable, "-c", script]
    warm = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    for process in warm:  # two processes at once, both reading the cache
        out, _ = process.communicate()
        assert process.returncode == 0
        assert out.split()[1] == "False", "a cached kernel must load without numba-cuda (NVVM)"


def test_gpu_count_agrees_with_numba():
    """tilelang asks the driver directly (fast); numba's view must be the same."""
    from numba import cuda

    from tilelang._runtime import gpu_count

    assert gpu_count() == (len(cuda.gpus) if cuda.is_available() else 0)
