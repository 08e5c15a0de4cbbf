"""``@tl.autotune``: run a kernel with the fastest of several configs, chosen once per key.

A :class:`Config` fixes some of a kernel's Constants and its launch options (threads,
pipeline stages). On the first launch with a new key (the shapes and dtypes of the arrays
named in ``key``, the values of the scalars, the backend) every config is compiled and
timed on the caller's arrays; the fastest is remembered in memory and on disk, so later
launches, also in later processes, go straight to it. What the trials write is put back:
each written array is snapshotted first and restored after every config (and if tuning
fails), so tuning a kernel that accumulates into its output leaves the output as it was
before the real launch. A config that does not compile or launch is skipped with its
reason; if none runs, the error lists them all.

On the GPU a config is timed with :func:`tilelang.testing.bench` (CUDA events, median),
and those within 10% of the fastest once more (``Autotuned._second_round``).
On the CPU backend and the interpreter there is nothing worth timing: the first config
that runs is taken (pass ``timer=`` to time anyway).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import json
import logging
import os
import sys
import threading
import time
import types

import numpy as np

from ._frontend.captures import Captures
from ._ir.core import array_accesses
from ._runtime import (
    array_info,
    current_device,
    current_stream,
    default_backend,
    device_peaks,
    launch_device,
    launch_grid,
    require_gpu,
    untraced,
    without_data,
)
from .errors import TileArgumentError, TileCompilerError, TileError, TileLimitError, user_location
from .kernel import TileKernel, options_error

__all__ = ["Config", "autotune", "dot_configs"]

log = logging.getLogger("tilelang.autotune")
CONTENDERS = 0.10  # configs within 10% of the fastest are timed a second time (Autotuned._second_round)


class Config:
    """Constants and launch options for one trial: ``tl.Config(BM=128, BN=128, BK=32, num_threads=256)``.

    ``num_threads`` (None: the kernel's own choice), ``num_stages`` and ``copies_first`` are
    the options of :func:`tilelang.tile_kernel`; every other keyword is a ``tl.Constant`` of
    the kernel.
    """

    def __init__(self, num_threads: int | None = None, num_stages: int = 3, copies_first: bool = False, **constants):
        if error := options_error(num_threads, num_stages):
            raise error from None
        self.constants = dict(constants)
        self.num_threads, self.num_stages = None if num_threads is None else int(num_threads), int(num_stages)
        if not isinstance(copies_first, (bool, np.bool_)):
            raise TileArgumentError(f"tl.Config: copies_first is True or False, got {copies_first!r}")
        self.copies_first = bool(copies_first)

    def _fields(self):
        return tuple(sorted(self.constants.items())) + (
            ("num_threads", self.num_threads),
            ("num_stages", self.num_stages),
            ("copies_first", self.copies_first),
        )

    def __eq__(self, other):
        return isinstance(other, Config) and self._fields() == other._fields()

    def __hash__(self):
        return hash(self._fields())

    def __repr__(self):
        return f"Config({', '.join(f'{k}={v!r}' for k, v in self._fields())})"

    def label(self) -> str:
        """Short text for progress lines and the cache: ``BM=128 BN=128 BK=32 threads=256 stages=3``."""
        parts = [f"{k}={v}" for k, v in self.constants.items()]
        first = ["copies first"] if self.copies_first else []
        return " ".join(parts + [f"threads={self.num_threads or 'auto'}", f"stages={self.num_stages}"] + first)


def _one_mistake(errors) -> bool:
    """Whether every config failed with one kind of error at one line of the user's: a bug in
    the kernel (a limit passed is the config's, and listed with the others)."""
    first = errors[0] if errors else None
    return (
        isinstance(first, TileError)
        and not isinstance(first, TileLimitError)
        and first.loc is not None
        and all(type(e) is type(first) and e.loc == first.loc for e in errors)
    )


def dot_configs(bits: int = 16) -> list[Config]:
    """Default configs for a matmul-like kernel with Constants ``BM``, ``BN``, ``BK``: block
    tiles of 64 to 256, ``BK`` 32 or 64, pruned to what fits (at most 64 accumulator elements
    per thread, 128 in the first, which only Hopper's wgmma dots take: elsewhere it does not
    compile and the tuner skips it; the stages' operand tiles within 200 KB of shared memory
    for ``bits``-wide operands: a GPU with less skips the rest) and ordered from the shapes
    measured best on the H200 (docs/performance.md). ``bits=8`` (float8 ``x @ w.T`` on
    Hopper's float8 tensor cores) puts first ``BK`` 128, a swizzle row of 128 bytes, in the
    shapes measured best on the H100 (1173 TFLOP/s at 4096^3 for the first)::

        from tilelang.autotune import dot_configs

        @tl.autotune(configs=dot_configs(8), key=["x", "w"])
        @tl.tile_kernel
        def linear_fp8(x, w, out, BM: tl.Constant, BN: tl.Constant, BK: tl.Constant): ..."""
    configs = []
    eight = [(128, 256, 128, 4, 128), (128, 256, 128, 3, 128), (256, 128, 128, 3, 128), (128, 128, 128, 4, 64)]
    for bm, bn, bk, stages, accumulators in (eight if bits == 8 else []) + [
        (128, 256, 64, 4, 128), (128, 256, 64, 4, 64), (256, 128, 64, 3, 64),
        (128, 128, 32, 3, 64), (64, 64, 32, 3, 64), (64, 128, 32, 3, 64), (128, 64, 32, 3, 64),
        (128, 128, 64, 3, 64), (128, 256, 32, 3, 64), (256, 128, 32, 3, 64), (128, 128, 32, 4, 64),
        (64, 64, 64, 4, 64), (128, 128, 32, 2, 64),
    ]:  # fmt: skip
        threads = max(128, bm * bn // accumulators)  # accumulators a thread at most
        if threads <= 512 and stages * (bm + bn) * bk * bits // 8 <= 200 * 1024:
            configs.append(Config(BM=bm, BN=bn, BK=bk, num_threads=threads, num_stages=stages))
    return configs


def autotune(configs=None, key=(), *, timer=None, quiet: bool | None = None, cache: bool = True):
    """Tune a tile kernel over ``configs`` (a list of :class:`Config`, or one), once per key.

    ``key`` names the parameters the choice depends on (an array by its shape and dtype, a
    scalar by its value), or is a function of the bound arguments (a dict) returning a
    hashable value. ``configs=None`` (or a bare ``@tl.autotune``) uses :func:`dot_configs`
    (the kernel needs Constants ``BM``, ``BN``, ``BK``). ``timer(run, config)`` returns
    milliseconds (default: CUDA events on the GPU; none elsewhere: the first config that runs
    wins). ``quiet`` (default: the
    ``TILELANG_AUTOTUNE_QUIET`` environment variable) silences the progress line on stderr.
    ``cache=False`` keeps choices in memory only. Example::

        @tl.autotune(configs=[tl.Config(BM=128, BN=128, BK=32, num_threads=256),
                              tl.Config(BM=64, BN=64, BK=32, num_threads=128)], key=["a", "b"])
        @tl.tile_kernel
        def matmul(a, b, c, BM: tl.Constant, BN: tl.Constant, BK: tl.Constant): ...

        grid = lambda args: (tl.cdiv(M, args["BM"]), tl.cdiv(N, args["BN"]))
        matmul[grid](a, b, c)          # tunes on the first launch for these shapes
    """

    def wrap(kernel):
        if not isinstance(kernel, TileKernel):
            raise TileArgumentError("@tl.autotune goes above @tl.tile_kernel (it tunes a tile kernel)")
        return Autotuned(kernel, configs, key, timer, quiet, cache)

    if isinstance(configs, TileKernel) or isinstance(configs, types.FunctionType):  # bare @tl.autotune: the default
        kernel, configs = configs, None  # configs (on a plain function: the "goes above @tl.tile_kernel" error)
        return wrap(kernel)
    return wrap


class Autotuned:
    """A tile kernel launched with the best of its configs: ``kernel[grid](*args)``."""

    def __init__(self, kernel: TileKernel, configs, key, timer, quiet, cache):
        if configs is None:
            missing = {"BM", "BN", "BK"} - kernel.constants
            if missing:
                raise TileArgumentError(
                    f"@tl.autotune on {kernel.__name__}: give configs=, or declare the Constants "
                    f"{', '.join(sorted(missing))} that the default dot configs set"
                )
            configs = dot_configs()
        try:
            configs = [configs] if isinstance(configs, Config) else list(configs)
        except TypeError:  # (not iterable: the error below)
            configs = []
        if not configs or not all(isinstance(c, Config) for c in configs):
            raise TileArgumentError(f"@tl.autotune on {kernel.__name__}: configs must be a non-empty list of tl.Config")
        for c in configs:
            unknown = set(c.constants) - kernel.constants
            if unknown:
                raise TileArgumentError(
                    f"@tl.autotune on {kernel.__name__}: {c!r} sets {', '.join(sorted(unknown))}, "
                    f"which {'is not a' if len(unknown) == 1 else 'are not'} tl.Constant parameter of the kernel"
                )
        if not callable(key):
            key = tuple([key] if isinstance(key, str) else key or ())
            for name in key:
                if name not in kernel.param_names:
                    raise TileArgumentError(f"@tl.autotune on {kernel.__name__}: key names `{name}`, not a parameter")
                if any(name in c.constants for c in configs):
                    raise TileArgumentError(
                        f"@tl.autotune on {kernel.__name__}: key names `{name}`, which the configs set"
                    )
        self.kernel, self.configs, self.key, self.timer, self.quiet, self.cache = (
            kernel,
            configs,
            key,
            timer,
            quiet,
            cache,
        )
        self.__name__, self.__doc__ = kernel.__name__, kernel.__doc__
        self.choices: dict = {}  # key -> Config
        self.tunings: list = []  # what each tuning in this process measured
        self._variants: dict = {}
        # what each call needs, worked out once: a call costs a few microseconds besides the
        # kernel's own launch, or a small kernel would wait on the host (bind_partial and
        # array_info alone were ~35 us a call on a 2-core machine)
        params = kernel.signature.parameters
        self._configured = {n for c in configs for n in c.constants}
        self._defaults = {n: p.default for n, p in params.items() if p.default is not inspect.Parameter.empty}

    def __repr__(self):
        return f"<autotuned {self.kernel!r}, {len(self.configs)} configs>"

    def __getitem__(self, grid):
        return functools.partial(self._launch, grid)

    def __call__(self, *args, **kwargs):
        raise TileArgumentError(
            f"a tuned kernel is launched over a grid of blocks too: {self.__name__}[grid](...), e.g. "
            f"{self.__name__}[lambda args: (tl.cdiv(n, args['TILE']),)](...)",
            user_location(),
        )

    def variant(self, config: Config) -> TileKernel:
        """The tile kernel compiled with ``config``'s launch options (one per set of them)."""
        options = (config.num_threads or self.kernel.num_threads, config.num_stages, config.copies_first)
        if options not in self._variants:
            num_threads, num_stages, copies_first = options
            self._variants[options] = self.kernel.with_options(
                num_threads=num_threads, num_stages=num_stages, copies_first=copies_first
            )
        return self._variants[options]

    @untraced
    def _launch(self, grid, *args, backend=None, stream=None, **kwargs):
        arguments = self._arguments(args, kwargs)
        if without_data(arguments):  # torch tracing a custom op for shapes: nothing to tune or run
            return
        backend = backend or self.kernel.backend or default_backend()
        key = self.key_of(arguments, backend)
        config = self.choices.get(key)
        if config is None:
            config = self._from_disk(key, backend)
            if config is not None:
                try:  # (compiled before it runs: a choice that no longer compiles is tuned again, nothing written)
                    self._compiled(self.variant(config), arguments, config, backend)
                except TileArgumentError:
                    raise
                except TileError as err:
                    log.warning("%s: cached choice %s failed (%s); tuning again", self.__name__, config.label(), err)
                    config = None
            config = config or self._tune(key, grid, args, kwargs, arguments, backend, stream)
            self.choices[key] = config
        if callable(grid):  # called here, so that the kernel's own launch is its fast path (a fixed grid)
            grid = launch_grid(grid, self._defaults | arguments | config.constants)
        on = {"backend": backend} if stream is None else {"backend": backend, "stream": stream}
        self.variant(config)[grid](*args, **kwargs, **config.constants, **on)

    def _arguments(self, args, kwargs) -> dict:
        """The call's arguments by name (no defaults), refusing the ones the configs set."""
        names, params = self.kernel.param_names, self.kernel.signature.parameters
        arguments = dict(zip(names, args))
        if len(args) <= len(names) and all(k in params and k not in arguments for k in kwargs):
            arguments.update(kwargs)
        else:  # Python's own words for what is wrong
            try:
                arguments = self.kernel.signature.bind_partial(*args, **kwargs).arguments
            except TypeError as err:
                raise TileArgumentError(f"{self.__name__}(): {err}") from None
        given = self._configured & arguments.keys()
        if given:
            raise TileArgumentError(
                f"{self.__name__}: {', '.join(sorted(given))} set by the autotuner's configs", user_location()
            )
        return arguments

    def key_of(self, arguments: dict, backend: str):
        """The key a choice is remembered under: ``key``'s values (an array's shape and
        dtype, read off the array), the backend."""
        if callable(self.key):
            return (self.key(self._defaults | arguments), backend)
        return (tuple(_key_part(name, arguments.get(name)) for name in self.key), backend)

    # ------------------------------------------------------------------ tuning

    def _tune(self, key, grid, args, kwargs, arguments, backend, stream):
        timer = self.timer
        settle = lambda: None  # noqa: E731
        if backend == "cuda":
            require_gpu()  # (before a wait on no GPU, not as each config's failure)
            infos = {name: info for name, value in arguments.items() if (info := array_info(value)) is not None}
            device = launch_device(infos)
            # the trials launch on `stream`, the snapshots copy on the arrays' library's own: the
            # GPU finishes each before the next starts (tuning is slow anyway)
            settle = functools.partial(_synchronize, device)
            if stream is None:  # the stream the launches go on, named: the timer's events go there
                stream = current_stream(arguments.values())(device)
            timer = timer or functools.partial(_bench_on, device, stream)
        progress = _Progress(self, key, backend)
        start, results = time.perf_counter(), []
        snapshots = {}

        def trial(config, first: bool):
            """``config``'s milliseconds (None: nothing times it), what it wrote put back after."""
            kernel = self.variant(config)
            options = {"backend": backend} | ({"stream": stream} if stream is not None else {})

            sites = kernel[_config_grid(grid, self._defaults | arguments | config.constants)]

            def run():
                sites(*args, **kwargs, **config.constants, **options)

            try:
                if first:  # (the call's arrays, defaults too; not a debug build's own error buffer)
                    bound = self._defaults | arguments
                    written = array_accesses(self._compiled(kernel, arguments, config, backend).program)[1]
                    fresh = (written & bound.keys()) - set(snapshots)
                    settle()  # (what made the arrays, on any stream, done before they are copied)
                    snapshots.update((name, _Snapshot(name, bound[name])) for name in fresh)
                    settle()  # (the copies, on the library's stream, done before a launch on `stream` writes)
                    run()  # compiles; a first launch
                return timer(run, config) if timer is not None else None
            finally:  # what the trial wrote, put back (also after a failure or an interrupt)
                settle()
                for s in snapshots.values():
                    s.restore()
                settle()

        errors = []
        for config in self.configs:
            try:
                results.append((config, trial(config, first=True), None))
            except TileArgumentError:  # the call's, not the config's (a global the kernel read changed): at once
                raise
            except Exception as err:  # noqa: BLE001 - a TileError, or a launch the driver refused: say why
                first = (err.message if isinstance(err, TileError) else str(err)).splitlines()[:1]
                results.append((config, None, f"{type(err).__name__}: {first[0] if first else ''}"))
                errors.append(err)
            progress.update(results)
            if timer is None and results[-1][2] is None:
                break  # nothing to time: the first config that runs
        if timer is not None:
            results = self._second_round(results, trial)
        ran = [(c, ms) for c, ms, why in results if why is None]
        if not ran:
            if _one_mistake(errors):  # the kernel's own, whatever the config: at its line
                raise errors[0]
            reasons = "\n".join(f"  {c.label()}: {why}" for c, _, why in results)
            raise TileCompilerError(f"@tl.autotune on {self.__name__}: no config ran for {key[0]}:\n{reasons}")
        chosen = min(ran, key=lambda r: r[1] or 0.0)[0]
        seconds = time.perf_counter() - start
        record = {"key": repr(key), "chosen": chosen.label(), "seconds": round(seconds, 3),
                  "times_ms": {c.label(): (ms if why is None else why) for c, ms, why in results}}  # fmt: skip
        self.tunings.append(record)
        progress.finish(chosen, seconds)
        log.info(
            "%s %s: chose %s in %.2f s %s",
            self.__name__,
            _describe(key[0]),
            chosen.label(),
            seconds,
            record["times_ms"],
        )
        if self.cache:
            self._to_disk(key, backend, chosen, record)
        return chosen

    @staticmethod
    def _second_round(results, trial):
        """The configs timed within ``CONTENDERS`` of the fastest, timed again in reverse order,
        each keeping its faster time: a config timed first after a compile, with the GPU's
        clocks still low from idling, or while another process used the GPU, gets a second
        chance (one timing each once let a 4096-token causal attention take a tile 5% slower)."""
        timed = [(c, ms) for c, ms, why in results if why is None and ms is not None]
        near = min((ms for _, ms in timed), default=0.0) * (1 + CONTENDERS)
        contenders = [c for c, ms in reversed(timed) if ms <= near]
        if len(contenders) < 2:
            return results
        again = {}
        for c in contenders:
            with contextlib.suppress(Exception):  # (it ran once: its first time stands)
                again[id(c)] = trial(c, first=False)
        return [(c, ms if again.get(id(c)) is None else min(ms, again[id(c)]), why) for c, ms, why in results]

    def _compiled(self, kernel, arguments, config, backend):
        """``config``'s specialization for these arguments, compiled as its first run would (a
        config that does not compile raises here, before anything runs)."""
        spec, _ = kernel.specialize(kernel.bind((), dict(arguments) | config.constants))
        return kernel.compile(spec, backend)

    # ------------------------------------------------------------------ the disk cache

    def _cache_path(self, key, backend) -> str:
        from . import __version__
        from ._backends.cuda import cache_dir

        try:
            source = inspect.getsource(self.kernel.fn)
        except (OSError, TypeError):
            source = self.kernel.fn.__code__.co_code.hex()
        device = device_peaks(current_device())[0] if backend == "cuda" else backend
        read = Captures(self.kernel.fn).fingerprint()  # (globals, closure variables, helpers: as they are now)
        k = self.kernel  # (its own options: a choice at num_threads=128 may not compile at 32)
        options = (k.num_threads, k.num_stages, k.copies_first, k.arch, k.debug, k.fast_math)
        text = repr((__version__, k.fn.__module__, k.fn.__qualname__, source, read, device, key, options,
                     [c.label() for c in self.configs]))  # fmt: skip
        digest = hashlib.sha256(text.encode()).hexdigest()[:32]
        return os.path.join(cache_dir(), "autotune", f"{self.__name__}-{digest}.json")

    def _from_disk(self, key, backend) -> Config | None:
        if not self.cache:
            return None
        try:
            path = self._cache_path(key, backend)
            with open(path) as f:
                entry = json.load(f)
            config = self.configs[entry["index"]]
            if config.label() != entry["chosen"]:
                raise ValueError("the chosen config does not match the configs")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, IndexError, TypeError) as err:
            message = "ignoring the corrupt or unreadable autotune cache entry for %s (%s); tuning again"
            log.warning(message, self.__name__, err)
            return None
        log.info("%s %s: %s, from the cache %s", self.__name__, _describe(key[0]), config.label(), path)
        return config

    def _to_disk(self, key, backend, chosen, record):
        try:
            path = self._cache_path(key, backend)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            partial = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
            with open(partial, "w") as f:
                json.dump(record | {"index": self.configs.index(chosen)}, f, indent=1)
            os.replace(partial, path)  # atomic: a concurrent reader sees the old entry or the new one
        except OSError as err:  # (an unusable TILELANG_CACHE_DIR: the choice stays in memory)
            log.warning("could not save the autotune choice for %s (%s)", self.__name__, err)


def _config_grid(grid, values: dict):
    """A grid computed from a config's Constants; one CUDA cannot launch is the config's failure
    (a TileLimitError: the next config is tried), not the call's."""
    if not callable(grid):
        return grid
    try:
        return launch_grid(grid, values)
    except TileArgumentError as err:
        sizes = grid(values)
        sizes = sizes if isinstance(sizes, (tuple, list)) else (sizes,)
        if all(isinstance(g, (int, np.integer)) and not isinstance(g, bool) and g >= 0 for g in sizes):
            raise TileLimitError(err.message) from None  # (ints past CUDA's limits: this config's)
        raise  # (a float, a negative size: the grid function's mistake, the call's)


def _bench_on(device: int, stream, run, config) -> float:
    """``run``'s milliseconds on the GPU it launches on (events of that GPU, on its stream)."""
    from numba import cuda

    from .testing.timing import bench

    with cuda.gpus[device]:
        return bench(run, stream=stream)


def _synchronize(device: int):
    from numba import cuda

    with cuda.gpus[device]:
        cuda.synchronize()


class _Snapshot:
    """A copy of an array argument a trial writes, to put back afterwards (NumPy, torch,
    CuPy and numba device arrays)."""

    def __init__(self, name, array):
        self.array = array
        if isinstance(array, np.ndarray):
            self.saved, self._restore = array.copy(), lambda: np.copyto(array, self.saved)
        elif hasattr(array, "clone") and hasattr(array, "copy_"):  # torch
            self.saved, self._restore = array.clone(), lambda: array.copy_(self.saved)
        elif hasattr(array, "copy_to_host") and hasattr(array, "copy_to_device"):  # numba
            self.saved, self._restore = array.copy_to_host(), lambda: array.copy_to_device(self.saved)
        elif hasattr(array, "copy") and hasattr(array, "__setitem__"):  # CuPy and the like
            self.saved = array.copy()
            self._restore = lambda: array.__setitem__(Ellipsis, self.saved)
        else:
            raise TileArgumentError(
                f"@tl.autotune cannot copy argument `{name}` ({type(array).__name__}) to restore it after the "
                "trials; pass a NumPy, torch, CuPy or numba array"
            )

    def restore(self):
        self._restore()


class _Progress:
    """The progress line on stderr: configs done / total and the best so far, redrawn in place
    on a terminal; one line with the choice at the end."""

    def __init__(self, tuner: Autotuned, key, backend):
        quiet = (
            tuner.quiet if tuner.quiet is not None else os.environ.get("TILELANG_AUTOTUNE_QUIET", "") not in ("", "0")
        )
        self.stream = None if quiet else sys.stderr
        self.total, self.what = len(tuner.configs), f"autotune {tuner.__name__} {_describe(key[0])} on {backend}"

    def update(self, results):
        if self.stream is None or not self.stream.isatty():
            return
        timed = [(ms, c) for c, ms, why in results if ms is not None]
        best = f", best {min(timed, key=lambda t: t[0])[0]:.4f} ms" if timed else ""
        self.stream.write(f"\r{self.what}: {len(results)}/{self.total} configs{best}\x1b[K")
        self.stream.flush()

    def finish(self, chosen, seconds):
        if self.stream is not None:
            line = f"{self.what}: chose {chosen.label()} in {seconds:.1f} s"
            self.stream.write(f"\r{line}\x1b[K\n" if self.stream.isatty() else f"{line}\n")
            self.stream.flush()


_DTYPE_NAMES: dict = {}  # an array's dtype object -> its name (str() of a NumPy dtype takes microseconds)


def _key_part(name, value):
    if value is None or isinstance(value, (int, float, bool, np.generic, str)):
        return (name, value)
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None:  # NumPy, torch, CuPy, numba: no need for the whole array_info
        known = _DTYPE_NAMES.get(dtype)
        if known is None:
            known = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
        return (name, tuple(shape), known)
    info = array_info(value)
    if info is not None:
        return (name, tuple(info.shape), info.dtype.name)
    try:  # (a Constant: any hashable value, a dtype, a tuple)
        hash(value)
    except TypeError:
        what = type(value).__name__
        raise TileArgumentError(f"argument `{name}`: expected an array or a scalar, got {what}") from None
    return (name, value)


def _describe(key) -> str:
    if isinstance(key, tuple) and all(isinstance(p, tuple) and len(p) >= 2 and isinstance(p[0], str) for p in key):
        return " ".join(f"{p[0]}={'x'.join(map(str, p[1])) if isinstance(p[1], tuple) else p[1]}" for p in key)
    return repr(key)
