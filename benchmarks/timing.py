"""Timing of GPU work for the benchmarks: CUDA events, warm-up, median."""

from __future__ import annotations

import statistics


def time_ms(fn, torch, reps=100, warmup=5):
    """Median milliseconds of ``fn`` over ``reps`` back-to-back runs, timed with CUDA events
    on the stream (as triton.testing.do_bench does): the host queues the next launch while
    the GPU runs, so a launch slower than the kernel shows as a gap, a fast one does not."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, stop in events:
        start.record()
        fn()
        stop.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(stop) for start, stop in events)
