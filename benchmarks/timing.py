"""Timing of GPU work for the benchmarks: :func:`tilelang.testing.bench` (CUDA events on the
default stream, warm-up, median), in the ``time_ms(fn, torch)`` form the benchmark functions
take (``torch`` is unused: the peers' work runs on the same default stream)."""

from __future__ import annotations

import statistics

from tilelang.testing import bench


def time_ms(fn, torch=None, reps=100, warmup=5):
    """Median milliseconds of ``fn`` over ``reps`` back-to-back runs (see ``bench``)."""
    return bench(fn, warmup=warmup, rep=reps, device="cuda")


def interleaved_ms(fns: dict, rounds: int = 3, reps=100) -> dict:
    """``time_ms`` of each of ``fns`` (name -> callable), taken in turn ``rounds`` times, the
    median of each one's rounds: a drift of the GPU's clock between one and the next then
    moves them all alike, and their ratios hold."""
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(time_ms(fn, reps=reps))
    return {name: statistics.median(t) for name, t in times.items()}
