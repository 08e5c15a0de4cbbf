"""The ceiling of ``mma.sync`` on this GPU: tensor-core TFLOP/s with no memory traffic.

    python benchmarks/mma_peak.py

Each warp multiplies register operands into 16 independent accumulator fragments with
tilelang's own ``mma_m16n8k16_float16`` intrinsic (what ``tl.dot`` emits), ``STEPS`` times,
for several block sizes and blocks per SM: the most a matmul built on ``mma.sync`` can
reach, against which tl.dot's kernels are read (docs/performance.md). On Hopper the
warpgroup instructions (wgmma) go past it.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32, uint32

from tilelang._backends.cuda_mma import MMA_INTRINSICS

mma = MMA_INTRINSICS["mma_m16n8k16_float16"]
STEPS = 2048
FRAGMENTS = 16  # independent accumulators per warp: consecutive mma.sync never wait on each other
SLOTS = 4 * FRAGMENTS  # a thread's accumulator registers (a global: numba needs a constant size)


@cuda.jit
def mma_loop(out, steps):
    t = cuda.threadIdx.x
    a0, a1, a2, a3 = uint32(t * 3 + 1), uint32(t + 7), uint32(t ^ 5), uint32(t * 11)  # any bits: timing only
    b0, b1 = uint32(t + 13), uint32(t * 17)
    acc = cuda.local.array(SLOTS, float32)
    for r in range(SLOTS):
        acc[r] = float32(0)
    for _ in range(steps):
        for f in range(FRAGMENTS):
            c = 4 * f
            acc[c], acc[c + 1], acc[c + 2], acc[c + 3] = mma(
                a0, a1, a2, a3, b0, b1, acc[c], acc[c + 1], acc[c + 2], acc[c + 3]
            )
    total = float32(0)
    for r in range(SLOTS):
        total += acc[r]
    out[cuda.blockIdx.x * cuda.blockDim.x + t] = total  # (kept: the loop is not dead code)


def tflops(threads: int, blocks_per_sm: int) -> float:
    sms = cuda.get_current_device().MULTIPROCESSOR_COUNT
    blocks = sms * blocks_per_sm
    out = cuda.device_array(blocks * threads, np.float32)
    mma_loop[blocks, threads](out, STEPS)  # compile, warm up
    start, stop = cuda.event(), cuda.event()
    start.record()
    mma_loop[blocks, threads](out, STEPS)
    stop.record()
    stop.synchronize()
    flops = blocks * (threads // 32) * STEPS * FRAGMENTS * 2 * 16 * 8 * 16
    return flops / cuda.event_elapsed_time(start, stop) / 1e9


def main():
    name = cuda.get_current_device().name
    print(f"mma.sync.m16n8k16 f16 -> f32, registers only, on {name.decode() if isinstance(name, bytes) else name}")
    for threads, per_sm in ((256, 1), (256, 2), (128, 4), (512, 1), (256, 4)):
        warps = threads // 32 * per_sm // 4
        rate = tflops(threads, per_sm)
        print(f"{threads} threads x {per_sm} blocks per SM ({warps} warps per scheduler): {rate:7.1f} TFLOP/s")


if __name__ == "__main__":
    main()
