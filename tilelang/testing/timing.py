"""Timing kernels: :func:`bench` (one function, median milliseconds) and :func:`sweep` (several
implementations over several sizes: a table, and a plot when matplotlib is installed).

On the GPU, :func:`bench` times with CUDA events on the default stream (or the stream the
function launches on, ``stream=``), as ``triton.testing.do_bench`` does; elsewhere with the
host clock. Example::

    import tilelang as tl
    ms = tl.testing.bench(lambda: add[grid](x, y, out, TILE=1024))
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import numpy as np

L2_FLUSH_BYTES = 256 * 1024 * 1024  # more than any GPU's L2 (the H200 has 50 MB)


def bench(
    fn: Callable[[], object], *, warmup: int = 10, rep: int = 100, flush_l2: bool = False, device=None, stream=None
) -> float:
    """Median milliseconds of ``fn()`` over ``rep`` runs after ``warmup`` runs.

    ``device`` is ``"cuda"`` (CUDA events around each run) or ``"cpu"`` (the host clock);
    default: CUDA when a GPU is present. Back to back on the GPU, the host queues the next
    run while the GPU works, so a launch slower than its kernel shows as a gap and a fast one
    does not. ``flush_l2=True`` (GPU only) overwrites a 256 MB buffer before each run, so the
    data come from memory, not from the L2 cache a previous run left warm. ``stream``: the
    stream ``fn`` launches on (anything a launch's ``stream=`` takes), where the events go; by
    default the default stream (events there do not wait for a torch ``Stream``'s work: a
    kernel launched on one would time as nothing).
    """
    from .._runtime import gpu_available, stream_handle

    device = device or ("cuda" if gpu_available() else "cpu")
    if device not in ("cuda", "cpu"):
        raise ValueError(f"bench: device must be 'cuda' or 'cpu', got {device!r}")
    if (
        not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) for n in (rep, warmup))
        or rep < 1
        or warmup < 0
    ):
        raise ValueError(f"bench: rep must be an int >= 1 and warmup an int >= 0, got rep={rep!r}, warmup={warmup!r}")
    if device == "cuda" and not gpu_available():
        raise ValueError("bench: device='cuda', and there is no CUDA GPU here")
    for _ in range(warmup):
        fn()
    if device == "cpu":
        times = []
        for _ in range(rep):
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e3)
        return statistics.median(times)
    from numba import cuda

    handle = 0 if stream is None else stream_handle(stream)
    on = cuda.external_stream(handle) if handle else 0  # (0: the default stream itself)
    flush = cuda.device_array(L2_FLUSH_BYTES // 4, "int32") if flush_l2 else None
    cuda.synchronize()
    events = [(cuda.event(timing=True), cuda.event(timing=True)) for _ in range(rep)]
    for start, stop in events:
        if flush is not None:
            cuda.driver.device_memset(flush, 0, L2_FLUSH_BYTES, stream=on)
        start.record(on)
        fn()
        stop.record(on)
    cuda.synchronize()
    return statistics.median(cuda.event_elapsed_time(start, stop) for start, stop in events)


def sweep(
    sizes: Sequence,
    implementations: dict,
    *,
    metric: Callable | None = None,
    unit: str = "ms",
    title: str = "",
    plot: str | None = None,
    print_table: bool = True,
    **bench_options,
) -> dict:
    """Time each implementation at each size; print a Markdown table and, if ``plot`` is a file
    name and matplotlib is installed, draw sizes against the metric, one line per implementation.

    ``implementations`` maps a name to ``make(size)``, which returns the function to time (or
    None where the implementation does not apply). ``metric(size, ms)`` turns a time into the
    number shown (GB/s, TFLOP/s; default the milliseconds). Returns ``{name: [value or None
    per size]}``. Example::

        sweep([2**20, 2**24], {"tilelang": lambda n: make_add(n), "torch": lambda n: ...},
              metric=lambda n, ms: 12 * n / ms / 1e6, unit="GB/s", plot="add.png")
    """
    metric = metric or (lambda size, ms: ms)
    if not implementations:
        raise ValueError("sweep: give at least one implementation to time")
    results = {name: [] for name in implementations}
    for size in sizes:
        for name, make in implementations.items():
            fn = make(size)
            results[name].append(None if fn is None else metric(size, bench(fn, **bench_options)))
    if print_table:
        print(format_table(sizes, results, unit, title))
    if plot:
        draw(sizes, results, unit, title, plot)
    return results


def format_table(sizes, results: dict, unit: str, title: str = "") -> str:
    head = f"| size | {' | '.join(results)} |\n|---|{'---|' * len(results)}"
    rows = [
        f"| {size} | " + " | ".join("-" if v[i] is None else f"{v[i]:.4g}" for v in results.values()) + " |"
        for i, size in enumerate(sizes)
    ]
    return "\n".join(([f"{title} ({unit})", ""] if title else []) + [head] + rows)


def draw(sizes, results: dict, unit: str, title: str, path: str) -> None:
    """A line plot of ``results`` (as :func:`sweep` returns them) against ``sizes``, written to
    ``path`` (PNG); a sweep measured on one machine can be drawn on another."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"sweep: matplotlib is not installed; no plot written to {path}")
        return
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for name, values in results.items():
        points = [(s, v) for s, v in zip(sizes, values) if v is not None]
        if points:
            axes.plot(*zip(*points), marker="o", label=name)
    if sizes and all(isinstance(s, (int, float)) and s > 0 for s in sizes) and max(sizes) / min(sizes) > 16:
        axes.set_xscale("log", base=2)
    axes.set_xlabel("size")
    axes.set_ylabel(unit)
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
