"""Row-wise float8 quantization, as inference stacks scale activations for an fp8 matmul: each
row's largest magnitude maps to float8_e4m3fn's largest value (448), the row is divided by
its scale (multiplied by the inverse: one division a row, and the same bits on every
backend), rounded to float8 and stored with the scale; dequantizing multiplies back. A
float8 value has 3 mantissa bits, so each element comes back within 2^-4 of itself (relative,
half an ulp) or, near zero, within half the smallest subnormal step times the scale.

Then the fp8 matmul those scales are for: ``out = (xq @ wq.T) * sx[:, None] * sw[None, :]``,
activations and weights quantized by row, the products on Hopper's float8 tensor cores
(``wgmma ... k32.f32.e4m3.e4m3``: the weight given (N, K) and transposed, both operands
K-major) and the two scales applied once to each float32 sum. Elsewhere (other GPUs) the
same kernel runs the float8 values as float16s.

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


@tl.tile_kernel(num_threads=256)
def scaled_linear(xq, sx, wq, sw, out, BM: tl.Constant, BN: tl.Constant, BK: tl.Constant):
    """out (rows, N) = (xq @ wq.T) * sx[:, None] * sw[None, :]; wq (N, K) as a Linear layer stores it."""
    i, j = tl.block_id(0), tl.block_id(1)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in tl.range(0, tl.cdiv(xq.shape[1], BK)):
        acc = tl.dot(tl.load(xq, index=(i, k), shape=(BM, BK)), tl.load(wq, index=(j, k), shape=(BN, BK)).T, acc)
    rows, cols = tl.load(sx, index=(i,), shape=(BM,)), tl.load(sw, index=(j,), shape=(BN,))
    tl.store(out, (acc * rows[:, None] * cols[None, :]).astype(out.dtype), index=(i, j))


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

    w = rng.standard_normal((200, 1000)).astype(np.float32)  # a weight (N, K)
    wq, sw = quantize(w)
    out = np.full((len(x), len(w)), np.nan, np.float32)
    tiles = dict(BM=128, BN=128, BK=128)
    scaled_linear[tl.cdiv(len(x), 128), tl.cdiv(len(w), 128)](q, scales, wq, sw, out, **tiles)
    xs, ws = q.astype(np.float64) * scales[:, None], wq.astype(np.float64) * sw[:, None]
    want = xs @ ws.T
    # float32 sums (K = 1000 roundings) or, on Hopper, the float8 tensor cores' ~13 bits a k-step of 32
    bound = np.abs(xs) @ np.abs(ws).T
    assert (np.abs(out - want) <= (1000 // 32 + 2) * 2.0**-12 * bound).all()
    print(f"fp8 matmul {len(x)} x {len(w)} x {x.shape[1]} with row scales matches float64 of the float8 operands")
    if explain:
        print(tl.explain(quantize_rows, "bf16[:, :]", "f8e4m3[:, :]", "f32[:]", BLOCK=4096))
        args = ("f8e4m3[:, :]", "f32[:]", "f8e4m3[:, :]", "f32[:]", "bf16[:, :]")
        print(tl.explain(scaled_linear, *args, **tiles)["layouts"])


if __name__ == "__main__":
    main(explain="--explain" in sys.argv[1:])
