"""``tl.device_print``: every backend prints the interpreter's lines (in its own order), one
per element from the one thread holding it, none for the padding of a non-power-of-two
tile; the interpreter in index order; the errors; the GPU's vprintf in the PTX."""

import re

import numpy as np
import pytest

import tilelang as tl
import tilelang.testing as tlt
from tilelang._runtime import gpu_available


@tl.tile_kernel
def printing(x, n, T: tl.Constant):
    i = tl.block_id(0)
    t = tl.load(x, index=(i, 0), shape=(3, T))  # (3 x T of a 4 x 8 layout: padding not printed)
    tl.device_print("here")
    tl.device_print("t", t)
    tl.device_print("row", tl.max(t, axis=1), tl.argmax(t, axis=1))  # (replicated across lanes: once)
    tl.device_print("n % 3 =", n % 3)
    tl.device_print("any", tl.sum(t) > 0)
    tl.device_print("wide", t.astype(tl.float64) / 3, (tl.abs(t) * 4).astype(tl.uint64) - 5, t.astype(tl.int8))


def printed(capfd, kernel, *args, backend, grid=2, **constants):
    kernel[grid](*args, backend=backend, **constants)
    return capfd.readouterr().out.splitlines()


def test_the_interpreter_prints_each_element_in_index_order(capfd):
    x = np.arange(12, dtype=np.float32).reshape(6, 2) - 2.5
    lines = printed(capfd, printing, x, 7, T=2, backend="interpret")
    assert lines[:8] == [
        "block (0, 0, 0) here",
        "block (0, 0, 0) t idx (0, 0): -2.5",
        "block (0, 0, 0) t idx (0, 1): -1.5",
        "block (0, 0, 0) t idx (1, 0): -0.5",
        "block (0, 0, 0) t idx (1, 1): 0.5",
        "block (0, 0, 0) t idx (2, 0): 1.5",
        "block (0, 0, 0) t idx (2, 1): 2.5",
        "block (0, 0, 0) row (operand 0) idx (0): -1.5",
    ]
    assert "block (1, 0, 0) n %% 3 = idx (): 1".replace("%%", "%") in lines
    assert "block (0, 0, 0) wide (operand 0) idx (0, 0): -0.83333333333333337" in lines  # (17 digits)
    assert "block (0, 0, 0) wide (operand 1) idx (0, 0): 5" in lines  # (2.5 * 4 - 5)
    assert "block (0, 0, 0) wide (operand 1) idx (1, 0): 18446744073709551613" in lines  # (0 - 5 wraps: unsigned)
    assert "block (1, 0, 0) any idx (): 1" in lines and len(lines) == 2 * (1 + 6 + 3 * 2 + 1 + 1 + 3 * 6)


@pytest.mark.parametrize("backend", [b for b in tlt.default_backends() if b != "interpret"])
@pytest.mark.parametrize("threads", [32, 128])
def test_every_backend_prints_the_interpreters_lines(capfd, backend, threads):
    x = np.arange(30, dtype=np.float32).reshape(6, 5) * 0.75 - 9
    kernel = tl.tile_kernel(printing.fn, num_threads=threads)
    want = printed(capfd, kernel, x, 7, T=5, backend="interpret")
    got = printed(capfd, kernel, x, 7, T=5, backend=backend)
    assert sorted(got) == sorted(want)


@tl.tile_kernel
def printing_bits(x, T: tl.Constant):
    t = tl.load(x, index=(0,), shape=(T,))
    tl.device_print("bits", t, t.astype(tl.bfloat16), t.astype(tl.float8_e4m3fn), t.astype(tl.int8), t > 0, hex=True)


@pytest.mark.parametrize("backend", tlt.default_backends())
def test_hex_prints_the_bits_of_each_dtype(capfd, backend):
    """``hex=True``: the element's bits as its dtype stores them (bool 0 or 1), the same on
    every backend as in NumPy's view of the values."""
    x = np.array([1.5, -2.0, 0.0], np.float32)
    lines = printed(capfd, printing_bits, x, T=3, backend=backend, grid=1)
    columns = [
        x.view(np.uint32),
        x.astype(tl.bfloat16.np).view(np.uint16),
        x.astype(tl.float8_e4m3fn.np).view(np.uint8),
        x.astype(np.int8).view(np.uint8),
        x > 0,
    ]
    head = "block (0, 0, 0) bits"
    want = [f"{head} (operand {k}) idx ({i}): 0x{int(b):x}" for k, c in enumerate(columns) for i, b in enumerate(c)]
    assert sorted(lines) == sorted(want)
    assert "block (0, 0, 0) bits (operand 2) idx (0): 0x3c" in lines  # (float8_e4m3fn 1.5: 0 0111 100)


@tl.tile_kernel
def bad_prefix(x):
    tl.device_print(3, tl.load(x, index=(0,), shape=(4,)))


def test_the_prefix_is_a_string():
    with pytest.raises(tl.TileTypeError, match="device_print: the prefix is a str, got int"):
        bad_prefix[1](np.zeros(4, np.float32), backend="interpret")


def test_the_gpu_prints_with_vprintf():
    explained = tl.explain(printing, "f32[:, :]", "i32", T=5)
    assert re.search(r"call\.uni[^;]*vprintf", explained["ptx"]) or "vprintf" in explained["ptx"]
    assert "print 'block (%lld, %lld, %lld) t idx (%lld, %lld): %.9g'" in explained["thread_ir"]


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="needs an NVIDIA GPU")
def test_the_gpu_prints_the_interpreters_lines(capfd):
    x = np.arange(30, dtype=np.float32).reshape(6, 5) * 0.75 - 9
    want = printed(capfd, printing, x, 7, T=5, backend="interpret")
    got = printed(capfd, printing, x, 7, T=5, backend="cuda")  # (host arrays: copied back, synchronized)
    assert sorted(got) == sorted(want)
