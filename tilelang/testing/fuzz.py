"""Differential fuzzing of the compiler: random programs run on several backends, compared.

:func:`check` writes a :class:`~tilelang.testing.programs.Program` to a file (kernels are
traced from their source, and the file is a runnable reproducer), runs it on each backend
with the same arguments, outputs pre-filled with a sentinel and set inside guard margins,
and asserts that every backend agrees with the first (the interpreter, the reference):
exactly for integers, bools and bit-identical float values, within the bound the
generator derived for the others, and with the margins untouched.

A campaign, for hours on a workstation or a GPU machine::

    python -m tilelang.testing.fuzz --minutes 60 --backends interpret,cpu,cuda --out fuzz-out

draws programs until the time is up; each failure is shrunk by Hypothesis and written to
``fuzz-out/failure_<n>.py``, which ``python fuzz-out/failure_<n>.py cpu`` re-runs.
"""

from __future__ import annotations

import argparse
import atexit
import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile
import time

import ml_dtypes
import numpy as np

from .. import dtypes as _dt
from ..errors import TileCheckError, TileError
from .programs import Program, programs


class GeneratorError(AssertionError):
    """The interpreter rejected a generated program: a bug of the generator, not of a backend."""


class Mismatch(AssertionError):
    """Two backends disagree on a generated program."""


def sentinel(d) -> np.ndarray:
    """The value output buffers are filled with: unusual, finite, exact in ``d`` (float8: its
    most negative finite value)."""
    d = _dt.dtype(d)
    if d.is_bool:
        return np.array(True)
    if d.is_int:
        return np.array(np.iinfo(d.np).max // 3, d.np)
    return np.array(-min(1234.0, float(ml_dtypes.finfo(d.np).max)), np.float32).astype(d.np)


def _data(rng, d, shape, kind):
    if kind == "bool":
        return rng.random(shape) < 0.5
    if kind == "wide":
        info = np.iinfo(d.np)
        return rng.integers(info.min, info.max, size=shape, dtype=d.np, endpoint=True)
    if kind == "small" and d.is_int:
        lo, hi = (0, 16) if d.kind == "u" else (-8, 8)
        return rng.integers(lo, hi, size=shape, endpoint=True).astype(d.np)
    if kind == "small":
        return rng.integers(-8, 8, size=shape, endpoint=True).astype(np.float32).astype(d.np)
    values = rng.uniform(-4, 4, size=shape).astype(np.float32)
    if kind == "special":
        big = float(ml_dtypes.finfo(d.np).max)
        odd = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, big, -big, 1e-30], np.float64)
        picks = rng.random(shape) < 0.2
        values = np.where(picks, odd[rng.integers(0, len(odd), size=shape)], values)
    return values.astype(d.np)


def arguments(spec: dict):
    """The launch arguments of ``spec`` (the same on every call) and the output buffers, as
    ``(args, outputs)`` with ``outputs`` a list of (array spec, whole buffer, the view passed)."""
    rng = np.random.default_rng(spec["seed"])
    by_name, outputs = {}, []
    for a in spec["arrays"]:
        d, axes = _dt.dtype(a["dtype"]), _windows(a)
        outer = tuple(size * abs(step) + 2 * margin for size, margin, step in axes)
        inner = tuple(_window(*w) for w in axes)
        if a["role"] == "in":
            buffer = _data(rng, d, outer, a["data"])
        else:
            buffer = np.full(outer, sentinel(d), d.np)
            if a["fill"] != "sentinel":
                buffer[inner] = a["fill"]
            outputs.append((a, buffer, buffer[inner]))
        by_name[a["name"]] = buffer[inner]
    for s in spec["scalars"]:
        by_name[s["name"]] = s["value"] if s["dtype"] is None else _dt.dtype(s["dtype"]).np.type(s["value"])
    return [by_name[p] for p in spec["params"]], outputs


def _windows(a) -> list:
    """(size, margin, step) of each axis of array ``a``'s view into its buffer: the last axis
    reversed or every second element for ``view`` "reversed" and "strided"."""
    step = {"reversed": -1, "strided": 2}.get(a.get("view"), 1)
    last = len(a["shape"]) - 1
    return [(size, margin, step if k == last else 1) for k, (size, margin) in enumerate(zip(a["shape"], a["margin"]))]


def _window(size, margin, step):
    """The slice of a buffer axis a view takes: ``size`` elements after ``margin``, every
    ``step``-th, backwards for a negative step."""
    if step == 1:
        return slice(margin, margin + size)
    if step < 0:
        return slice(margin + size - 1, margin - 1 if margin else None, -1)
    return slice(margin, margin + size * step, step)


def load(path):
    """Import the program file at ``path`` as a module of its own."""
    name = "tilelang_fuzz_" + hashlib.sha1(os.path.abspath(path).encode()).hexdigest()[:12]
    if name in sys.modules:
        return sys.modules[name]
    loader = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(loader)
    sys.modules[name] = module
    loader.loader.exec_module(module)
    return module


def write(program: Program, directory) -> str:
    """Write ``program``'s reproducer to ``directory`` (named by its digest); returns the path."""
    text = program.module_text()
    path = os.path.join(directory, f"program_{hashlib.sha1(text.encode()).hexdigest()[:16]}.py")
    if not os.path.exists(path):
        with open(path, "w") as f:
            f.write(text)
    return path


def _outside(a, view, d) -> str | None:
    """The reference's values that lie outside the interval the generator derived for them
    (the sentinel aside): a check that the generator's reasoning is sound."""
    if "lo" not in a:
        return None
    v = view.astype(np.float64) if not d.is_int else view.astype(object)
    written = (view != sentinel(d)) & ~(np.isnan(v.astype(np.float64)) if d.is_float else np.zeros(view.shape, bool))
    lo, hi = (-np.inf if a["lo"] is None else a["lo"]), (np.inf if a["hi"] is None else a["hi"])
    bad = written & ((v < lo) | (v > hi))
    return f"{v[bad][:4]} not in [{lo}, {hi}]" if bad.any() else None


def _disagreement(ref, got, err, d) -> str | None:
    """Where ``got`` differs from ``ref`` by more than ``err`` (exact for non-floats), described."""
    if not d.is_float:
        bad = ref != got
    else:
        r, g = ref.astype(np.float64), got.astype(np.float64)
        both_nan = np.isnan(r) & np.isnan(g)
        with np.errstate(invalid="ignore"):
            close = (r == g) | (np.abs(r - g) <= err * 1.0001)
        bad = ~(both_nan | close)
    if not bad.any():
        return None
    where = np.argwhere(bad)[:4]
    shown = ", ".join(f"{tuple(int(k) for k in w)}: {ref[tuple(w)]!r} vs {got[tuple(w)]!r}" for w in where)
    return f"{int(bad.sum())} element(s) differ (allowed {err:.3g}): {shown}"


def launch(kernel, grid, args, backend) -> None:
    """One run of a program (a seam the tests use to play a wrong backend). ``"cpu:debug"``
    runs the kernel in debug mode on the CPU backend: its checks must not change a result.
    A check that fires is let through (the kernel ran to its end): the programs use what the
    language defines and debug mode reports all the same (wrapping index arithmetic, indices
    outside the array)."""
    backend, _, mode = backend.partition(":")
    if mode not in ("", "debug"):
        raise ValueError(f"unknown backend mode {mode!r} (only `debug`)")
    if not mode:
        return kernel[grid](*args, backend=backend)
    try:
        kernel.with_options(debug=True)[grid](*args, backend=backend)
    except TileCheckError:
        pass


def check_module(module, backends=("interpret", "cpu"), path="") -> None:
    """Run the program of ``module`` (a written reproducer) on ``backends`` and compare."""
    spec, kernel = module.SPEC, module.program
    results = []
    for backend in backends:
        args, outputs = arguments(spec)
        try:
            launch(kernel, spec["grid"], args, backend)
        except TileError as e:
            if backend == backends[0]:
                raise GeneratorError(f"{path}: the {backend} rejected a generated program: {e}") from e
            raise Mismatch(f"{path}: {backend} raised where {backends[0]} did not: {type(e).__name__}: {e}") from e
        results.append((backend, outputs))
    (first, reference), problems = results[0], []
    for backend, outputs in results:
        for (a, buffer, view), (*_, ref_view) in zip(outputs, reference):
            d = _dt.dtype(a["dtype"])
            guard = np.ones(buffer.shape, bool)
            guard[tuple(_window(*w) for w in _windows(a))] = False
            if (buffer[guard] != sentinel(d)).any():
                problems.append(f"{backend} wrote outside `{a['name']}` (into its guard margin)")
            if backend == first and (why := _outside(a, view, d)):
                raise GeneratorError(f"{path}: `{a['name']}` holds values the generator ruled out: {why}")
            if backend != first and (why := _disagreement(ref_view, view, a["err"], d)):
                problems.append(f"`{a['name']}` ({d.name}) on {backend} vs {first}: {why}")
    if problems:
        raise Mismatch(f"{path}:\n  " + "\n  ".join(problems))


def check(program: Program, backends=("interpret", "cpu"), directory=None) -> None:
    """Write ``program`` to ``directory`` (a temporary one by default), run it on every backend
    and assert they agree (see the module docstring). Raises :class:`Mismatch` or, for an
    invalid program, :class:`GeneratorError`; both name the reproducer file."""
    directory = directory or _scratch()
    path = write(program, directory)
    module = load(path)
    try:
        check_module(module, tuple(backends), path)
    finally:  # (a campaign checks thousands: each module kept its kernels, ~1 MB, for the process)
        sys.modules.pop(module.__name__, None)


_SCRATCH = []


def _scratch():
    """This process's directory for program files, removed when it exits."""
    if not _SCRATCH:
        _SCRATCH.append(tempfile.mkdtemp(prefix="tilelang-fuzz-"))
        atexit.register(shutil.rmtree, _SCRATCH[0], True)
    return _SCRATCH[0]


def main_for_file(path, argv) -> None:
    """A reproducer's main: ``python failure.py [interpret,cpu,...]``."""
    backends = tuple(argv[0].split(",")) if argv else ("interpret", "cpu")
    if backends[0] != "interpret":
        backends = ("interpret",) + backends
    check_module(load(path), backends, path)
    print(f"{path}: {', '.join(backends)} agree")


def _fatal(e: BaseException) -> bool:
    """A driver error after which this process's CUDA context is unusable (an illegal address
    in a kernel: every later call fails too, so shrinking it in-process is meaningless)."""
    return type(e).__name__ == "CudaAPIError" or "CUDA_ERROR_" in str(e)


def campaign(minutes: float, backends, out: str, *, seed=0, max_ops=8, sample=0, log=sys.stderr) -> tuple[int, int]:
    """Draw and check programs for ``minutes``; write each (shrunk) failure to ``out``, and every
    ``sample``-th program too (for compute-sanitizer). A kernel that kills the CUDA context is
    written as drawn (unshrunk) and ends the campaign. Returns (programs run, failures)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as with_seed

    os.makedirs(out, exist_ok=True)
    end, ran, failures, batch = time.time() + minutes * 60, 0, 0, 0
    last, fatal = [], []

    while time.time() < end and not fatal:

        @settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @with_seed(seed + batch)
        @given(programs(max_ops=max_ops))
        def one(program):  # the clock is read between batches: a test that stopped early would be flaky
            nonlocal ran
            if fatal:
                return
            last[:] = [program]
            ran += 1
            try:
                check(program, backends)
            except Exception as error:
                if _fatal(error):
                    fatal.append((program, error))
                raise
            if sample and ran % sample == 0:
                os.makedirs(os.path.join(out, "sample"), exist_ok=True)
                write(program, os.path.join(out, "sample"))

        try:
            one()
        except Exception as e:  # a mismatch, or a backend that crashed (a compiler bug too)
            program, e = fatal[0] if fatal else (last[0], e)
            failures += 1
            path = os.path.join(out, f"failure_{failures}.py")
            with open(path, "w") as f:
                f.write(f"# {type(e).__name__}: {e}".replace("\n", "\n# ") + "\n" + program.module_text())
            print(f"fuzz: failure {failures} written to {path}", file=log)
        batch += 1
        left = max(0.0, end - time.time()) / 60
        print(f"fuzz: {ran} programs, {failures} failures, {left:.1f} min left", file=log, flush=True)
    if fatal:
        print("fuzz: stopped: the CUDA context is lost (re-run the failure by itself)", file=log, flush=True)
    return ran, failures


def replay(paths, backends, log=sys.stderr) -> int:
    """Re-run written programs (a sample, failures) in this one process, which is what a
    compute-sanitizer run over hundreds of them needs; returns how many disagreed or crashed."""
    failed = 0
    for path in paths:
        try:
            check_module(load(path), tuple(backends), path)
        except Exception as e:
            failed += 1
            print(f"fuzz: {path}: {type(e).__name__}: {e}", file=log, flush=True)
            if _fatal(e):
                print("fuzz: stopped: the CUDA context is lost", file=log, flush=True)
                break
    return failed


def _job(job):
    """One worker of ``--jobs``: its own seeds, its own output directory and log file."""
    minutes, backends, out, seed, max_ops, sample = job
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "log.txt"), "w") as log:
        return campaign(minutes, backends, out, seed=seed, max_ops=max_ops, sample=sample, log=log)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tilelang.testing.fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--backends", default="interpret,cpu", help="comma-separated; the first is the reference")
    parser.add_argument("--out", default="fuzz-out", help="directory for failures (and samples)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-ops", type=int, default=8)
    parser.add_argument("--sample", type=int, default=0, help="also keep every N-th program under OUT/sample")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes, each with its own seeds and OUT/job<k>")
    parser.add_argument("--replay", nargs="+", metavar="FILE", help="re-run these program files instead of drawing")
    args = parser.parse_args(argv)
    backends, start = tuple(args.backends.split(",")), time.time()
    if args.replay:
        failed = replay(args.replay, backends)
        print(f"fuzz: replayed {len(args.replay)} programs on {args.backends}: {failed} failures")
        return 1 if failed else 0
    if args.jobs > 1:  # spawned, not forked: a forked CUDA context is unusable
        import multiprocessing

        jobs = [(args.minutes, backends, os.path.join(args.out, f"job{k}"), args.seed + k * 1_000_000,
                 args.max_ops, args.sample) for k in range(args.jobs)]  # fmt: skip
        with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
            counts = pool.map(_job, jobs)
        ran, failures = (sum(c) for c in zip(*counts))
    else:
        ran, failures = campaign(args.minutes, backends, args.out, seed=args.seed, max_ops=args.max_ops,
                                 sample=args.sample)  # fmt: skip
    print(f"fuzz: {ran} programs on {args.backends} in {time.time() - start:.0f} s: {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
