"""Row-wise float8 quantization, as inference stacks scale activations for an fp8 matmul: each
row's largest magnitude maps to float8_e4m3fn's largest value (448), the row is divided by
its scale (multiplied by the inverse: one division a row, and the same bits on every
backend), rounded to float8 and stored with the scale; dequantizing multiplies back. A
float8 value has 3 mantissa bits, so each element comes back within 2^-4 of itself (relative,
half an ulp) or, near zero, within half the smallest subnormal step times the scale.

Run: python examples/fp8_quantize.py [--explain]
"""

import sys

import ml_dtypes
import numpy as np

import tilelang as tl

FP8_MAX = 448.0  # float8_e4m3fn's largest finite value: past it a conversion gives NaN


@tl.tile_kernel
def quantize_rows(x, q, scales, BLOCK: tl.Constant):
    """x: (rows, n) float32 or bfloat16; q: (rows, n) float8_e4m3fn; scales: (rows,) float32."""
    row = tl.block_id(0)
    t = tl.load(x, index=(row, 0), shape=(1, BLOCK)).astype(tl.float32)
    largest = tl.maximum(tl.max(tl.abs(t)), 1e-12)  # (an all-zero row: any scale will do)
    tl.store(q, (t * (FP8_MAX / largest)).astype(tl.float8_e4m3fn), index=(row, 0))
    tl.scatter(scales, row, largest / FP8_MAX)


@tl.tile_kernel
def dequantize_rows(q, scales, out, BLOCK: tl.Constant):
    row = tl.block_id(0)
    t = tl.load(q, index=(row, 0), shape=(1, BLOCK)).astype(tl.float32)
    tl.store(out, (t * tl.gather(scales, row)).astype(out.dtype), index=(row, 0))


def quantize(x):
    """(q, scales) of a 2-d array: float8_e4m3fn rows and their float32 scales."""
    rows, n = x.shape
    q, scales = np.zeros((rows, n), ml_dtypes.float8_e4m3fn), np.zeros(rows, np.float32)
    quantize_rows[rows](x, q, scales, BLOCK=1 << (n - 1).bit_length())
    return q, scales


def main(explain=False):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((300, 1000)) * rng.uniform(0.01, 100, (300, 1))).astype(np.float32)
    q, scales = quantize(x)
    largest = np.maximum(np.abs(x).max(axis=1, keepdims=True), np.float32(1e-12))
    np.testing.assert_array_equal(scales, (largest / np.float32(FP8_MAX))[:, 0])
    expected = (x * (np.float32(FP8_MAX) / largest)).astype(ml_dtypes.float8_e4m3fn)  # rounded as the kernel does
    assert np.array_equal(q.view(np.uint8), expected.view(np.uint8))
    back = np.zeros_like(x)
    dequantize_rows[len(x)](q, scales, back, BLOCK=1024)
    step = 2.0**-10 * scales[:, None]  # half float8_e4m3fn's smallest subnormal step (2^-9), scaled
    assert (np.abs(back - x) <= 2.0**-4 * np.abs(x) + step).all()
    print(f"float8 quantization of {x.shape[0]} rows x {x.shape[1]} matches NumPy (ml_dtypes' rounding), bit for bit")
    if explain:
        print(tl.explain(quantize_rows, "bf16[:, :]", "f8e4m3[:, :]", "f32[:]", BLOCK=4096))


if __name__ == "__main__":
    main(explain="--explain" in sys.argv[1:])
