"""Timing of GPU work for the benchmarks: :func:`tilelang.testing.bench` (CUDA events on the
default stream, warm-up, median), in the ``time_ms(fn, torch)`` form the benchmark functions
take (``torch`` is unused: the peers' work runs on the same default stream)."""

from __future__ import annotations

from tilelang.testing import bench


def time_ms(fn, torch=None, reps=100, warmup=5):
    """Median milliseconds of ``fn`` over ``reps`` back-to-back runs (see ``bench``)."""
    return bench(fn, warmup=warmup, rep=reps, device="cuda")
