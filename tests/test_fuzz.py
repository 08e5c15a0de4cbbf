"""The random-program fuzzer (tilelang.testing.programs and .fuzz): a fixed, seeded budget
of random kernels on the interpreter and the CPU backend, and checks that the fuzzer
itself catches what it is for (a wrong value, a write outside an array, an invalid
program) and that its reproducers and command line work."""

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, seed, settings

import tilelang as tl
from tilelang._runtime import gpu_available
from tilelang.testing import fuzz, programs
from tilelang.testing.programs import OPS, STATEMENTS, Program

# Four flavours of 50 programs (seeded: the same programs on every run), so that xdist
# spreads them over the workers and every kind of op is drawn often.
FLAVOURS = {
    "mixed": dict(),
    "elementwise": dict(ops=("binary", "unary", "math", "where", "astype", "load"), max_ops=10, loops=False),
    "reductions": dict(ops=("reduce", "scan", "shape", "dot", "binary", "astype")),
    "memory": dict(ops=("load", "gather", "binary", "shape", *STATEMENTS)),
}


@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
def test_random_programs_agree_on_interpreter_and_cpu(flavour):
    @settings(max_examples=50, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @seed(sorted(FLAVOURS).index(flavour))
    @given(programs.programs(**FLAVOURS[flavour]))
    def run(program):
        fuzz.check(program, ("interpret", "cpu"))

    run()


def test_debug_mode_does_not_change_a_result():
    """``cpu:debug``: the same programs with debug mode's checks (added to the traced program,
    so they meet every folding and merging the generator provokes)."""

    @settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @seed(4)
    @given(programs.programs())
    def run(program):
        fuzz.check(program, ("interpret", "cpu:debug"))

    run()


def test_cpu_debug_runs_the_kernel_in_debug_mode(monkeypatch):
    """(so that the test above can fail): the kernel launched is a debug one, and a check
    that fires is let through."""
    seen = []
    real = tl.TileKernel.__getitem__
    monkeypatch.setattr(tl.TileKernel, "__getitem__", lambda k, grid: seen.append(k.debug) or real(k, grid))
    overflowing = SOURCE.replace("index=(i, 0), shape=(4, 8)", "offset=(i * 2**30 * 4, 0), shape=(4, 8)")
    fuzz.check(_program(overflowing), ("interpret", "cpu:debug"))  # (it wraps to row 0 alike)
    assert seen == [False, True]


def test_a_share_of_programs_take_aligned_arrays():
    """The kernels take the arrays they move in vectors to be aligned and run another kernel
    for others (thread_ir.array_aligned): the fuzzer draws both kinds of arguments (and, in
    about a quarter of its programs, kernels with whole vector groups: wide tiles, few threads)."""
    from tilelang._lower.thread_ir import array_aligned

    kinds = []

    @settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @seed(7)
    @given(programs.programs())
    def draw(program):
        args, _ = fuzz.arguments(program.spec)
        arrays = [a for a in args if isinstance(a, np.ndarray)]
        strides = [[s // a.itemsize for s in a.strides] for a in arrays]
        kinds.append(all(array_aligned(a.ctypes.data, a.shape, s, a.itemsize) for a, s in zip(arrays, strides)))

    draw()
    assert 0 < sum(kinds) < len(kinds), sum(kinds)  # (before: none of 300 took every array aligned)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
def test_random_programs_agree_on_cuda(flavour):
    """The same four flavours on CUDA too (the device campaign is the long run of this)."""

    @settings(max_examples=50, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @seed(10 + sorted(FLAVOURS).index(flavour))
    @given(programs.programs(**FLAVOURS[flavour]))
    def run(program):
        fuzz.check(program, ("interpret", "cpu", "cuda"))

    run()


SOURCE = """@tl.tile_kernel(num_threads=32)
def program(x0, out1):
    i = tl.block_id(0)
    v1 = tl.load(x0, index=(i, 0), shape=(4, 8))
    tl.store(out1, tl.sum(v1, axis=1)[:, None], index=(i, 0))"""


def _program(source=SOURCE, lo=-64, hi=64):
    arrays = [
        {"name": "x0", "role": "in", "dtype": "int16", "shape": [7, 8], "data": "small", "margin": [1, 2],
         "fill": None, "err": 0.0},
        {"name": "out1", "role": "out", "dtype": "int32", "shape": [7, 1], "data": None, "margin": [2, 1],
         "fill": "sentinel", "err": 0.0, "lo": lo, "hi": hi},
    ]  # fmt: skip
    return Program(source, {"grid": 2, "seed": 5, "arrays": arrays, "scalars": [], "params": ["x0", "out1"]})


def test_a_hand_written_program_agrees(tmp_path):
    fuzz.check(_program(), ("interpret", "cpu"), directory=tmp_path)


def test_a_checked_program_and_its_kernels_are_let_go(tmp_path):
    """A campaign checks thousands of programs: each one's module (and with it its compiled
    kernels, their machine code in the one MCJIT engine) is dropped after its check. Kept, six
    workers grew to ~4 GB each in ~3000 programs and thrashed a 23 GB machine."""
    import gc

    from tilelang._backends import cpu

    gc.collect()  # (what earlier tests left for the collector)
    before = sum(isinstance(o, cpu.CpuKernel) for o in gc.get_objects())
    modules = set(sys.modules)
    fuzz.check(_program(), ("interpret", "cpu"), directory=tmp_path)
    assert not [m for m in set(sys.modules) - modules if m.startswith("tilelang_fuzz_")]
    gc.collect()
    assert sum(isinstance(o, cpu.CpuKernel) for o in gc.get_objects()) == before


@pytest.mark.parametrize("damage", ["value", "guard"])
def test_a_wrong_backend_is_caught(tmp_path, monkeypatch, damage):
    real = fuzz.launch

    def wrong(kernel, grid, args, backend):
        real(kernel, grid, args, "interpret")
        if backend != "interpret":
            out = args[-1]
            if damage == "value":
                out[3, 0] += 1
            else:  # one element past the end of the view: inside the guard margin of the buffer
                out.base[out.shape[0] + 2, 1] = 0

    monkeypatch.setattr(fuzz, "launch", wrong)
    with pytest.raises(fuzz.Mismatch, match="differ" if damage == "value" else "guard margin"):
        fuzz.check(_program(), ("interpret", "second"), directory=tmp_path)


def test_an_invalid_program_is_the_generators_fault(tmp_path):
    with pytest.raises(fuzz.GeneratorError, match="rejected"):
        fuzz.check(_program(SOURCE.replace("axis=1", "axis=3")), ("interpret",), directory=tmp_path)
    with pytest.raises(fuzz.GeneratorError, match="ruled out"):  # the generator's interval was wrong
        fuzz.check(_program(lo=-1, hi=1), ("interpret",), directory=tmp_path)


def test_float_results_compare_within_their_bound():
    ref = np.array([1.0, np.nan, np.inf, -0.0], np.float32)
    assert fuzz._disagreement(ref, np.array([1.0, np.nan, np.inf, 0.0], np.float32), 0.0, fuzz._dt.float32) is None
    assert fuzz._disagreement(ref, np.array([1.25, np.nan, np.inf, 0.0], np.float32), 0.5, fuzz._dt.float32) is None
    assert "1 element" in fuzz._disagreement(
        ref, np.array([1.25, np.nan, np.inf, 0.0], np.float32), 0.1, fuzz._dt.float32
    )
    assert "1 element" in fuzz._disagreement(ref, np.array([1.0, 0.0, np.inf, 0.0], np.float32), 1.0, fuzz._dt.float32)


def test_a_reproducer_runs_by_itself(tmp_path):
    path = fuzz.write(_program(), tmp_path)
    done = subprocess.run([sys.executable, path, "cpu"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "interpret, cpu agree" in done.stdout


def test_a_campaign_writes_its_shrunk_failures(tmp_path, monkeypatch):
    real = fuzz.launch

    def wrong(kernel, grid, args, backend):  # the second run of a program is off by one somewhere
        real(kernel, grid, args, "interpret")
        out = args[-1]
        if backend != "interpret" and isinstance(out, np.ndarray) and out.dtype != bool:
            out.flat[0] = 7 if out.flat[0] != 7 else 8

    monkeypatch.setattr(fuzz, "launch", wrong)
    ran, failures = fuzz.campaign(0.05, ("interpret", "again"), str(tmp_path), log=open(os.devnull, "w"))
    assert ran >= 1 and failures >= 1
    failure = (tmp_path / "failure_1.py").read_text()
    assert failure.startswith("# Mismatch") and "def program(" in failure


class CudaAPIError(Exception):
    """Named as numba's: what a kernel that touched an illegal address raises, then and after."""


def test_a_campaign_stops_at_a_kernel_that_kills_the_context(tmp_path, monkeypatch):
    real, launches = fuzz.launch, []

    def crashing(kernel, grid, args, backend):  # the third program crashes; every launch after it fails
        real(kernel, grid, args, "interpret")
        if backend != "interpret":
            launches.append(kernel)
            if len(launches) >= 3:
                raise CudaAPIError("CUDA_ERROR_ILLEGAL_ADDRESS")

    monkeypatch.setattr(fuzz, "launch", crashing)
    log = tmp_path / "log.txt"
    ran, failures = fuzz.campaign(5, ("interpret", "gpu"), str(tmp_path), log=open(log, "w"))
    assert (ran, failures) == (3, 1)  # no more programs, no shrinking on a dead context
    assert "CUDA context is lost" in log.read_text()
    written = (tmp_path / "failure_1.py").read_text()
    assert written.startswith("# CudaAPIError") and fuzz.load(str(tmp_path / "failure_1.py")).program is not None


def test_replay_reruns_written_programs_and_counts_failures(tmp_path, monkeypatch, capsys):
    good = fuzz.write(_program(), tmp_path)
    bad = fuzz.write(_program(SOURCE.replace("axis=1", "axis=3")), tmp_path)
    assert fuzz.main(["--replay", good, "--backends", "interpret,cpu"]) == 0
    assert fuzz.main(["--replay", good, bad, "--backends", "interpret,cpu"]) == 1
    assert "replayed 2 programs on interpret,cpu: 1 failures" in capsys.readouterr().out


def test_jobs_run_in_processes_of_their_own(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "tilelang.testing.fuzz", "--minutes", "0", "--jobs", "2", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "fuzz: 0 programs on interpret,cpu" in done.stdout
    assert sorted(os.listdir(tmp_path)) == ["job0", "job1"] and (tmp_path / "job1" / "log.txt").exists()


def test_every_kind_of_op_is_drawn():
    seen = set()

    @settings(max_examples=500, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @seed(0)
    @given(programs.programs(max_ops=10))
    def run(program):
        seen.update(k for k, text in MARKERS.items() if text in program.source)

    run()
    assert set(MARKERS) >= set(OPS + STATEMENTS)
    assert set(MARKERS) - seen == set()


MARKERS = {
    "binary": " * ", "unary": "abs(", "math": "tl.exp", "where": "tl.where(", "astype": ".astype(",
    "reduce": "tl.argmax(", "scan": "tl.cumsum(", "combine": "tl.associative_scan(", "shape": ".reshape(",
    "dot": "tl.dot(", "load": "offset=(",
    "gather": "tl.gather(", "scatter": "tl.scatter(", "atomic": "tl.atomic_", "loop": "tl.range(",
    "reload": "tl.load(out", "store": "tl.store(", "matmul loop": "tl.dot(a", "arange": " = tl.arange(",
    "fast_math": "fast_math=True", "fma": "tl.fma(",
}  # fmt: skip


def test_a_fast_math_kernel_s_division_and_math_get_their_error_bounds():
    """In a fast_math program a float32 quotient may differ between backends by 2 ulps (exact:
    not at all), and one by a divisor that may be 0 or not finite is not drawn (no bound:
    div.full.f32 rounds twice); exp differs by exp2's ulps alone (every backend rounds
    ``x * log2(e)`` alike), sigmoid by the division's 2 more; float64 is exact either way."""
    from tilelang import dtypes
    from tilelang.testing.values import Value, binary, math_fn

    a, b = Value("a", (4,), dtypes.float32, -3.0, 3.0), Value("b", (4,), dtypes.float32, 1.0, 2.0)
    assert binary("/", a, b, dtypes.float32, (4,), "q").err == 0
    assert binary("/", a, b, dtypes.float32, (4,), "q", fast_math=True).err > 0
    assert binary("/", a, b, dtypes.float64, (4,), "q", fast_math=True).err == 0
    assert binary("/", b, a, dtypes.float32, (4,), "q", fast_math=True) is None  # (a may be 0)
    assert binary("/", b, a, dtypes.float32, (4,), "q").err == 0
    x = Value("x", (4,), dtypes.float32, -40.0, 10.0)
    assert math_fn("exp", x, "e", fast_math=True).err == math_fn("exp", x, "e").err
    assert math_fn("sigmoid", x, "s", fast_math=True).err > math_fn("sigmoid", x, "s").err


def test_the_range_of_abs_of_int_min_reaches_int_max():
    """abs over [-128, 1] of int8: -128 stays -128 (it wraps), -127 gives 127 (fuzzing: the
    generator claimed [-128, 1] and then ruled out the 33 that abs(-33) is)."""
    from tilelang import dtypes
    from tilelang.testing.values import Value, unary

    got = unary("abs", Value("x", (4,), dtypes.int8, -128, 1), "y")
    assert (got.lo, got.hi) == (-128, 127)
    small = unary("abs", Value("x", (4,), dtypes.int8, -5, 3), "y")
    assert (small.lo, small.hi) == (0, 5)


def test_the_range_of_a_cumprod_holds_its_first_factor():
    """A cumprod over 2 of values in [0, 0.5]: its first prefix reaches 0.5, not 0.5 ** 2
    (fuzzing: the generator ruled out the 0.5 a cumprod's first element is)."""
    from tilelang import dtypes
    from tilelang.testing.values import Value, reduce

    x = Value("x", (2, 2), dtypes.float32, 0.0, 0.5)
    assert reduce("cumprod", x, 2, (2, 2), "y").hi >= 0.5
    assert reduce("prod", x, 2, (2,), "y").hi < 0.5  # (a product has all its factors)
