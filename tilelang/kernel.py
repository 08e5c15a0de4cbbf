"""``@tile_kernel``: specialization, the compile pipeline and launch.

A kernel is compiled once per specialization: the dtype and rank of each array
argument, the dtype of each scalar argument and the value of each ``tl.Constant``.
:func:`compile_kernel` is the pipeline, one named stage after another; the text of each
stage is kept in ``CompiledKernel.stages`` (what :func:`tilelang.explain` prints).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import re
import time

import numpy as np

from . import dtypes
from ._backends.cpu import CpuKernel
from ._backends.cuda import CudaKernel
from ._backends.cuda_driver import launcher_module
from ._backends.interpreter import Interpreter
from ._fastpath import constant_key, generate, remember
from ._frontend.captures import Captures
from ._frontend.loops import rewrite_loops, source_lines
from ._frontend.tracing import Array, Tile, TraceScope, runtime_float, tracing
from ._ir.core import ArrayType, Block, Program, TileType, Var, array_accesses, copied, tile_outputs
from ._ir.printer import format_program
from ._ir.verifier import verify
from ._lower.thread_ir import format_thread_program, verify_thread_program
from ._passes.assign_layouts import assign_layouts
from ._passes.check_limits import check_shared_memory, check_tile_sizes
from ._passes.cse_threads import eliminate_common_subexpressions
from ._passes.dead_code_threads import eliminate_dead_code
from ._passes.fast_math import relax_numerics
from ._passes.insert_conversions import insert_conversions
from ._passes.lower_dot import ARCHES, dot_plan, uses_tensor_cores
from ._passes.lower_threads import lower_to_threads
from ._passes.order_memory import order_memory
from ._passes.place_wgmma_waits import place_wgmma_waits
from ._passes.runtime_checks import Checked, add_checks, narrowing_checks, zero_step_checks
from ._passes.schedule_loads import schedule_loads
from ._passes.simplify import drop_unused, simplify
from ._passes.widen_float8_dots import widen_float8_dots
from ._runtime import (
    CudaRunner,
    HostRunner,
    array_info,
    default_arch,
    default_backend,
    grid3,
    launch_grid,
    untraced,
    without_data,
)
from .errors import (
    TileArgumentError,
    TileError,
    TileSyntaxError,
    TileTypeError,
    at_user_call,
    frame_location,
    is_internal,
    user_location,
)
from .language import Constant

BACKENDS = ("cuda", "cpu", "interpret")
DEBUG = os.environ.get("TILELANG_DEBUG", "") not in ("", "0")  # verify the IR after every stage
# debug mode for every kernel: kernels check their index arithmetic and gather/scatter bounds as they run
CHECKS = os.environ.get("TILELANG_CHECKS", "") not in ("", "0")


# ------------------------------------------------------------- specialization


def _is_constant_annotation(annotation, fn) -> bool:
    if annotation is Constant:
        return True
    if isinstance(annotation, str):  # `from __future__ import annotations`
        try:
            return eval(annotation, fn.__globals__) is Constant
        except Exception:
            return annotation.split(".")[-1].split("[")[0] == "Constant"
    return False


_SIGNATURE = re.compile(r"^\s*(\w+)\s*(?:\[([\s:,]*)\])?\s*$")


def _from_signature_text(text: str, name: str):
    """``"f32[:, :]"`` → a 2-d float32 array type; ``"i64"`` → an int64 scalar type."""
    m = _SIGNATURE.match(text)
    short = {d.short: d for d in dtypes.ALL_DTYPES}
    if not m or (m.group(1) not in short and m.group(1) not in dtypes.BY_NAME):
        raise TileArgumentError(f"argument `{name}`: cannot read {text!r} as a signature like 'f32[:]' or 'i64'")
    d = short.get(m.group(1)) or dtypes.BY_NAME[m.group(1)]
    if m.group(2) is None:
        return ("scalar", d.name, False)
    return ("array", d.name, m.group(2).count(":"), True)


def _arg_key(name, value):
    """A runtime argument's part of the specialization key (plain, cheap to hash) and,
    for arrays, the facts the launch needs (so they are read once per launch)."""
    if isinstance(value, (bool, int, float, np.generic)):
        try:
            d = dtypes.scalar_dtype(value)
        except TileError as err:
            raise TileArgumentError(f"argument `{name}`: {err.message}") from None
        return ("scalar", d.name, not isinstance(value, np.generic)), None
    if isinstance(value, str):
        return _from_signature_text(value, name), None
    if isinstance(value, TileType):
        return ("scalar", value.dtype.name, value.weak), None
    if isinstance(value, ArrayType):
        return ("array", value.dtype.name, value.ndim, value.unit_stride), None
    try:
        info = array_info(value)
    except TileError as err:
        raise TileTypeError(f"argument `{name}`: {err.message}") from None
    if info is None:
        kind = type(value).__qualname__
        kind = kind if type(value).__module__ == "builtins" else f"{type(value).__module__}.{kind}"  # (array.array)
        raise TileArgumentError(f"argument `{name}`: expected an array or a scalar, got {kind}")
    return ("array", info.dtype.name, len(info.shape), info.unit), info


@functools.cache
def type_of(entry):
    """The IR type a specialization key entry stands for."""
    if entry[0] == "scalar":
        return TileType((), dtypes.BY_NAME[entry[1]], entry[2])
    return ArrayType(dtypes.BY_NAME[entry[1]], entry[2], entry[3])


class TileKernel:
    """A function written in the tile language, compiled per specialization and launched
    over a grid of blocks: ``kernel[grid](*args, **constants)``."""

    def __init__(
        self, fn, backend: str | None = None, num_threads: int | None = None, debug: bool | None = None,
        num_stages: int = 3, arch: str | None = None, copies_first: bool = False, fast_math: bool = False,
    ):  # fmt: skip
        if error := options_error(num_threads, num_stages, arch, fast_math):  # (again: the autotuner makes kernels too)
            raise error from None
        self.fn = fn
        self.num_threads = None if num_threads is None else int(num_threads)  # (a NumPy int: its value)
        self.num_stages = int(num_stages)
        self.copies_first = copies_first
        self.fast_math = bool(fast_math)
        self.arch = arch
        self.debug = CHECKS if debug is None else bool(debug)
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self._fast_paths = []  # made per call signature, most recent first (_fastpath.py)
        self.backend = backend
        self.signature = inspect.signature(fn)
        self.param_names = list(self.signature.parameters)
        for p in self.signature.parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.KEYWORD_ONLY):
                what = "keyword-only" if p.kind is p.KEYWORD_ONLY else "*args and **kwargs"
                raise TileSyntaxError(f"tile kernel {fn.__name__}: {what} parameters are not supported ({p})")
            if p.name in ("stream", "backend"):  # (the launch's own keywords: kernel[grid](..., stream=s))
                message = f"a parameter cannot be named `{p.name}`, a keyword of the launch"
                raise TileSyntaxError(f"tile kernel {fn.__name__}: {message}")
        self.constants = {n for n, p in self.signature.parameters.items() if _is_constant_annotation(p.annotation, fn)}
        self._traceable = None
        self._read = [None]  # the globals and closure variables it read when first compiled (shared with twins)
        self._source_lines = source_lines(fn)  # (read now: the file may change before the first trace)
        self._compiled = {}
        self._call_sites = {}  # grid -> kernel[grid] (evaluated at every launch)

    @property
    def backend(self) -> str | None:
        """The backend launches take when they name none (None: the default one)."""
        return self._backend

    @backend.setter
    def backend(self, backend: str | None):
        self._backend = backend
        self._fast_paths.clear()  # made for launches on the old one

    def __repr__(self):
        return f"<tile_kernel {self.__name__}{self.signature}>"

    def __call__(self, *args, **kwargs):
        if tracing():
            raise _launch_in_a_kernel(user_location())
        raise TileArgumentError(
            f"a tile kernel is launched over a grid of blocks: {self.__name__}[grid](...), "
            f"e.g. {self.__name__}[tl.cdiv(n, TILE)](...)",
            user_location(),
        )

    def __getitem__(self, grid):
        if not (type(grid) is int or type(grid) is tuple and all(type(g) is int for g in grid)):
            return _call_site(self, grid)  # computed from the arguments, or an unusual (or wrong) grid
        site = self._call_sites.get(grid)
        if site is None:
            if len(self._call_sites) >= MAX_CALL_SITES:  # grids that come and go (cdiv(n, TILE) of many n)
                self._call_sites.clear()
            site = self._call_sites[grid] = _call_site(self, grid)
        return site

    @property
    def captures(self):
        """What its first compile read besides the arguments (tilelang/_frontend/captures.py), or None."""
        return self._read[0]

    def with_options(self, **options) -> TileKernel:
        """This kernel with other options of :func:`tile_kernel` (an autotuner's variant, a debug
        twin): the same function, traced from the same source."""
        mine = dict(backend=self.backend, num_threads=self.num_threads, debug=self.debug, num_stages=self.num_stages,
                    arch=self.arch, copies_first=self.copies_first, fast_math=self.fast_math)  # fmt: skip
        twin = TileKernel(self.fn, **(mine | options))
        twin._source_lines, twin._read = self._source_lines, self._read  # (one function: what it read is one)
        return twin

    def traceable(self):
        if self._traceable is None:
            self._traceable = rewrite_loops(self.fn, self._source_lines)
        return self._traceable

    def bind(self, args, kwargs) -> dict:
        """Arguments by parameter name, in parameter order (defaults filled in)."""
        names = self.param_names
        if len(args) == len(names) and not kwargs:
            return dict(zip(names, args))
        if len(args) > len(names):
            return self._bind_slowly(args, kwargs)
        arguments = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in self.signature.parameters or k in arguments:
                break
            arguments[k] = v
        else:
            if len(arguments) == len(names):
                return {n: arguments[n] for n in names}
        return self._bind_slowly(args, kwargs)

    def _bind_slowly(self, args, kwargs) -> dict:
        """Defaults filled in, or an error message worded as Python's."""
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as err:
            raise TileArgumentError(f"{self.__name__}(): {err}") from None
        bound.apply_defaults()
        return dict(bound.arguments)

    def specialize(self, arguments: dict):
        """The specialization key (each argument's type, or its value for a Constant) and
        the facts read from the array arguments on the way."""
        key, infos = [], {}
        for name, value in arguments.items():
            if name in self.constants:
                if isinstance(value, (Tile, Array)) or (
                    not isinstance(value, np.generic) and array_info(value) is not None  # a NumPy scalar is a value
                ):
                    raise TileArgumentError(f"argument `{name}` is a tl.Constant; pass a Python value, not an array")
                try:
                    hash(value)
                except TypeError:
                    raise TileArgumentError(
                        f"tl.Constant `{name}` must be hashable, got {type(value).__name__}"
                    ) from None
                key.append(("const", name, constant_key(value)))
            else:
                entry, info = _arg_key(name, value)
                key.append(("arg", name, entry))
                if info is not None:
                    infos[name] = info
        return tuple(key), infos

    def compile(self, key, backend: str):
        if self.captures is not None and (change := self.captures.check()) is not None:
            raise TileArgumentError(
                f"{self.__name__}: the {change}; a kernel reads globals and closure variables when it is compiled: "
                "pass what changes as an argument (a tl.Constant for a Python value), or make the kernel anew"
            )
        compiled = self._compiled.get((key, backend))
        if compiled is None:
            compiled = self._compiled[key, backend] = compile_kernel(self, key, backend)
        if self._read[0] is None:  # what its first compile read (a failed one read nothing to keep)
            self._read[0] = Captures(self.fn)
        return compiled


def options_error(num_threads, num_stages, arch=None, fast_math=False) -> TileArgumentError | None:
    """What is wrong with options of :func:`tile_kernel` (or an autotuner's ``tl.Config``), at the user's line."""
    whole = (int, np.integer)
    if num_threads is not None and (
        not isinstance(num_threads, whole) or not 32 <= num_threads <= 1024 or num_threads & (num_threads - 1)
    ):
        message = f"num_threads must be a power of two from 32 to 1024, got {num_threads!r}"
    elif not isinstance(num_stages, whole) or isinstance(num_stages, bool) or not 1 <= num_stages <= 8:
        message = f"num_stages must be an int from 1 to 8, got {num_stages!r}"
    elif arch is not None and arch not in ARCHES:
        message = f"arch must be one of {', '.join(map(repr, ARCHES))} or None, got {arch!r}"
    elif not isinstance(fast_math, (bool, np.bool_)):
        message = f"fast_math must be True or False, got {fast_math!r}"
    else:
        return None
    return TileArgumentError(message, user_location())


def tile_kernel(
    fn=None, *, backend: str | None = None, num_threads: int | None = None, debug: bool | None = None,
    num_stages: int = 3, arch: str | None = None, copies_first: bool = False, fast_math: bool = False,
):  # fmt: skip
    """Mark a function as a tile kernel: ``@tl.tile_kernel``, or with options
    ``@tl.tile_kernel(backend="cpu", num_threads=256)``.

    ``backend`` is ``"cuda"``, ``"cpu"`` or ``"interpret"`` (default: CUDA when a GPU is
    present, else CPU; or ``TILELANG_BACKEND``); ``num_threads`` overrides the threads per
    block chosen from the tile sizes (a power of two from 32 to 1024). ``num_stages`` is the
    depth of the software pipeline of the loads that feed tensor-core dots in a ``tl.range``
    loop: copies go ``num_stages - 1`` iterations ahead into as many shared buffers (1: no
    pipelining). They refill the stage the iteration before read; with TMA, where a loop's
    first product is read before its next one is issued (attention's ``q @ k.T``), they are
    issued after that product, which then runs on the tensor cores right behind the iteration
    before's last one; ``copies_first=True`` issues them first in the iteration instead (more
    time for them to land: a choice to autotune, ``tl.Config(copies_first=True)``). ``arch``
    is the target the lowering plans for: ``"sm_90a"`` (16-bit dots on Hopper's warpgroup
    tensor cores, wgmma) or ``"sm_80"`` (mma.sync); by default the GPU's (``"sm_90a"`` where
    there is none, so the CPU backend runs what an H100/H200 would). ``debug=True`` (or
    ``TILELANG_CHECKS=1`` for every kernel) makes the kernel check, as it runs, that its index
    arithmetic does not overflow and that gather/scatter/atomic indices are in bounds.
    ``fast_math=True`` computes float32 ``exp``, ``log``, ``/`` and ``sigmoid`` as Triton does:
    ``exp2`` of ``x * log2(e)``, ``log2(x) * ln(2)``, a division within 2 ulps and
    ``1 / (1 + exp(-x))`` of those (docs/dtypes.md), e.g.
    ``@tl.tile_kernel(fast_math=True)`` on a softmax of long rows.
    """
    if error := options_error(num_threads, num_stages, arch, fast_math):
        raise error from None
    if fn is not None and (isinstance(fn, (staticmethod, classmethod)) or not inspect.isfunction(inspect.unwrap(fn))):
        what = "a tile kernel already" if isinstance(fn, TileKernel) else f"a {type(fn).__name__}, not a function"
        raise TileArgumentError(
            f"tl.tile_kernel decorates a function; {fn!r} is {what} (options go by keyword: "
            "tl.tile_kernel(backend='cpu'))",
            user_location(),
        ) from None
    options = dict(
        backend=backend, num_threads=num_threads, debug=debug, num_stages=num_stages, arch=arch,
        copies_first=bool(copies_first), fast_math=bool(fast_math),
    )  # fmt: skip
    if fn is None:
        return lambda f: TileKernel(f, **options)
    return TileKernel(fn, **options)


# ------------------------------------------------------------------ pipeline


def trace(kernel: TileKernel, key) -> Program:
    """Run the kernel function once on tracers; the tile IR it records."""
    body = Block(params=[])
    tracer_args, names, constants = [], [], {}
    for entry in key:
        if entry[0] == "const":
            _, name, (_, _, value) = entry
            constants[name] = value
            tracer_args.append(value)
        else:
            _, name, t = entry
            t = type_of(t)
            python_float = not isinstance(t, ArrayType) and t.weak and t.dtype.is_float
            var = Var(TileType((), dtypes.float64) if python_float else t, hint=name)  # (a double travels as one)
            body.params.append(var)
            names.append(name)
            tracer_args.append(Array(var) if isinstance(t, ArrayType) else var if python_float else Tile(var))
    with TraceScope(body, checked=kernel.debug):
        tracer_args = [runtime_float(a) if isinstance(a, Var) else a for a in tracer_args]
        try:
            result = kernel.traceable()(*tracer_args)
        except RecursionError as err:
            loc = _recursion_site(err.__traceback__)
            if loc is None:  # not the user's recursion
                raise
            raise TileSyntaxError(
                "the recursion does not end while the kernel is traced: tracing runs every Python call, so a "
                "recursive helper must stop on Python values (a tl.Constant, a shape), not on tiles",
                loc,
            ) from None
        if inspect.isgenerator(result):  # run it to its first `yield`, to point there
            loc = None
            with contextlib.suppress(StopIteration):
                next(result)
                loc = frame_location(result.gi_frame)
            raise TileSyntaxError(
                f"`yield` in tile kernel {kernel.__name__}: a kernel is not a generator; it writes results with "
                "tl.store",
                loc,
            )
    if result is not None:
        raise TileSyntaxError(f"tile kernel {kernel.__name__} returned a value; kernels write results with tl.store")
    return Program(kernel.__name__, names, body, constants)


def _recursion_site(tb):
    """Where the first of the user's functions to recur called itself, or None."""
    first = {}
    while tb is not None:
        code = tb.tb_frame.f_code
        if code in first:
            return frame_location(first[code].tb_frame, first[code].tb_lasti)
        if not is_internal(code.co_filename):
            first[code] = tb
        tb = tb.tb_next
    return None


def _launch_in_a_kernel(loc=None):
    return TileSyntaxError(
        "a kernel cannot launch kernels (itself included) while it is traced; write the shared code as a plain "
        "Python helper function and call that",
        loc,
    )


class CompiledKernel:
    """One specialization: the text of every stage and how to run it."""

    def __init__(self, stages: dict, program: Program, run, backend_kernel=None, timings=None):
        self.stages = stages
        self.program = program  # the simplified tile IR
        self.run = run
        self.backend_kernel = backend_kernel
        self.timings = dict(timings or {})  # seconds per stage up to the backend's source


def _stage(stages, name, program):
    if DEBUG:
        verify(program, name)
    stages[name] = format_program(program)
    return program


def compile_kernel(kernel: TileKernel, key, backend: str) -> CompiledKernel:
    """The compile pipeline, as a list of stages (``lap`` records each one's seconds)."""
    if backend not in BACKENDS:
        raise TileArgumentError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    stages, lap = {}, _Laps()
    program = _stage(stages, "tile_ir", lap("trace", trace(kernel, key)))  # the traced tile IR
    narrowings = narrowing_checks(program)  # (before simplify folds an explicit astype of the argument away)
    zero_steps = zero_step_checks(program)  # (before simplify drops a loop with no effect: refused all the same)
    sites = None
    if kernel.debug:  # the kernel checks its index arithmetic and indices as it runs: checks added before folding
        # and CSE (folded arithmetic is checked, each at its own line), after dead code goes (it does not run)
        program, sites = lap("checks", add_checks(drop_unused(program)))
        program = _stage(stages, "checked", program)
    if kernel.fast_math:  # Triton's float32 exp, log, division and sigmoid
        program = _stage(stages, "fast_math", relax_numerics(program))
    program = _stage(stages, "simplified", lap("simplify", simplify(program)))  # folding, CSE, dead code

    def runner(run):  # launch checks (and a debug kernel's error word) around the backend's runner
        checked = zero_steps or narrowings or sites is not None
        return Checked(run, zero_steps, sites, narrowings) if checked else run

    # which tensor cores dots take (the GPU is asked only where a dot can use them)
    arch = kernel.arch or (default_arch() if uses_tensor_cores(program) else ARCHES[0])
    layouts, num_threads = assign_layouts(program, kernel.num_threads, arch)  # which thread holds which elements
    if widen_float8_dots(program, layouts):  # float8 dots not on wgmma's float8 instructions: float16 ones
        layouts, num_threads = assign_layouts(program, kernel.num_threads, arch)
    check_tile_sizes(program, layouts, num_threads)  # on every backend: the interpreter accepts what compiles
    if backend == "interpret":  # the reference semantics, on the tile IR itself
        run = runner(HostRunner(program, Interpreter(program), interpret=True))
        return CompiledKernel(stages, program, run, None, lap)
    assigned = dict(layouts)  # (the conversions' values join ``layouts``)
    laid_out, stages["layouts"] = _lay_out(program, layouts)
    lap("layouts", None)

    def thread_program(general: bool):
        laid, lays = laid_out, layouts
        # its own layouts where they differ: one element a thread where the other moves vectors
        if general and (own := assign_layouts(program, num_threads, arch, general=True)[0]) != assigned:
            lays = own
            laid, stages["layouts (any array)"] = _lay_out(program, lays)
        threads = lower_to_threads(laid, lays, num_threads, kernel.num_stages, general, kernel.copies_first)
        threads = lap("lower", threads)
        threads = lap("cse", eliminate_common_subexpressions(threads))  # each value computed once
        threads = lap("dead code", eliminate_dead_code(threads))  # and only if something reads it
        threads = schedule_loads(threads)  # work on loaded data after the loads that follow it
        threads = place_wgmma_waits(threads)  # each tensor-core product waited for where needed
        if DEBUG:
            verify_thread_program(threads)
        check_shared_memory(threads)
        return threads

    threads = thread_program(general=False)  # (TMA copies where they qualify, vectors of aligned arrays)
    stages["thread_ir"] = format_thread_program(threads)
    Backend = CpuKernel if backend == "cpu" else CudaKernel
    # arrays not as it takes them (misaligned) run the kernel lowered for any array, built when first needed
    general = (lambda: Backend(thread_program(general=True))) if threads.tensor_maps or threads.aligned else None
    backend_kernel = lap("emit", Backend(threads, general))  # its LLVM IR
    stages["llvm_ir"] = backend_kernel.ir  # what NVVM (cuda) or MCJIT (cpu) compiles
    if backend == "cpu":
        return CompiledKernel(stages, laid_out, runner(HostRunner(laid_out, backend_kernel)), backend_kernel, lap)
    return CompiledKernel(stages, laid_out, runner(CudaRunner(laid_out, backend_kernel)), backend_kernel, lap)


def _lay_out(program, layouts):
    """A copy of ``program`` with the conversions and barriers its ``layouts`` need, and the
    layouts stage's text."""
    program = Program(program.name, program.arg_names, copied(program.body), program.constants)
    program = insert_conversions(program, layouts)  # layouts that disagree: renamed, rebuilt or converted
    program = order_memory(program, layouts)  # barriers where a block's accesses to an array would race
    notes = {v: str(lay) for v, lay in layouts.items() if lay.shape}
    for eqn, out in tile_outputs(program.body):  # what the lowering will do with each dot
        if eqn.prim.name == "dot":
            notes[out] += f"\n{dot_plan(eqn, layouts)}"
    return program, format_program(program, notes=notes)


class _Laps(dict):
    """Seconds per compile stage: ``lap(name, value)`` charges the time since the last lap to
    ``name`` and returns ``value`` (NVVM or MCJIT compiles later, at the first launch)."""

    def __init__(self):
        super().__init__()
        self.last = time.perf_counter()

    def __call__(self, name, value):
        now = time.perf_counter()
        self[name] = self.get(name, 0.0) + now - self.last
        self.last = now
        return value


# -------------------------------------------------------------------- launch


MAX_CALL_SITES = 64


def _call_site(kernel: TileKernel, grid):
    """What ``kernel[grid]`` is: a C object (tilelang/_fast_path.c) whose call tries the
    kernel's fast paths, then :func:`_launch`."""
    padded = None  # the grid as the driver takes it, where it does not depend on the arguments
    if not callable(grid):
        with contextlib.suppress(TileArgumentError):  # a bad grid is reported at the call
            padded = grid3(launch_grid(grid, None))
    return launcher_module().CallSite(kernel._fast_paths, padded, functools.partial(_launch, kernel, grid))


@untraced
def _launch(kernel: TileKernel, grid_spec, /, *args, backend: str | None = None, stream=None, **kwargs):
    """The full path of a launch: bind, specialize, compile (or find it compiled), run;
    then a fast path for calls like this one."""
    try:
        if tracing():
            raise _launch_in_a_kernel()
        arguments = kernel.bind(args, kwargs)
        for name, value in arguments.items():
            if isinstance(value, (str, TileType, ArrayType)) and name not in kernel.constants:
                raise TileArgumentError(
                    f"argument `{name}`: a launch takes arrays and scalars, got {value!r} (signatures like 'f32[:]' "
                    "are for tl.explain)"
                )
        if without_data(arguments):  # torch tracing a custom op for shapes: nothing to compute
            return
        grid = launch_grid(grid_spec, arguments)
        key, infos = kernel.specialize(arguments)
        compiled = kernel.compile(key, backend or kernel.backend or default_backend())
        compiled.run(grid, arguments, infos, stream)
        if not callable(grid_spec) and 0 not in grid:  # fast paths take fixed grids (an empty one loaded nothing)
            launch = compiled.run.fast_launch(arguments, infos)
            written = launch and array_accesses(compiled.program)[1]
            fast_path = launch and generate(kernel, args, kwargs, backend, infos, launch, written)
            if fast_path:
                remember(kernel, fast_path)
    except TileError as err:
        raise at_user_call(err) from None
