"""Checks made when a kernel runs: at its launch, and (``debug=True``) inside it.

At launch, on every backend: a top-level ``tl.range`` whose step is a kernel argument is
refused when that step is 0, before anything runs (a GPU loop cannot raise; it would run
no iterations); so is a runtime Python int converted to an integer dtype that does not hold
it (``u8_tile + n`` with ``n=1000``), as tracing refuses such a literal.

In debug mode (``@tl.tile_kernel(debug=True)`` or ``TILELANG_CHECKS=1``) :func:`add_checks`
rewrites the tile IR so the kernel checks itself: signed integer arithmetic that feeds an
index or offset must not overflow, integer conversions feeding one must keep the value,
gather/scatter/atomic indices must be in bounds, runtime loop steps must not be 0, and each
``tl.device_assert``'s condition must hold. A
failed check writes its id into a hidden one-element int32 array argument (an atomic
min, so the first check in program order wins) that :class:`Checked` reads after the
launch and reports as a :class:`TileCheckError` at the user's line. The checks are plain
tile IR, so the interpreter, the CPU backend and CUDA run the same ones.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as D
from .._frontend import tracing
from .._frontend.tracing import Array, Tile, TraceScope
from .._ir.core import ArrayType, Block, Literal, Program, Var, nested_blocks
from .._runtime import array_info
from ..errors import TileCheckError, TileError, TileTypeError, TileValueError

ERRORS = "__tl_errors"  # the hidden argument of a debug kernel
NO_ERROR = 2**31 - 1

_ARITHMETIC = {"add": "addition", "sub": "subtraction", "mul": "multiplication", "neg": "negation", "abs": "abs",
               "floordiv": "floor division", "shl": "left shift", "reduce_sum": "sum", "cumsum": "cumsum"}  # fmt: skip
_SUMS = ("reduce_sum", "cumsum")  # checked below 64 bits (redone in int64); an int64 sum has nothing wider
_INDEXED = ("gather", "scatter", "atomic")
_INT64_HINT = "compute offsets in int64, e.g. `tl.block_id(0).astype(tl.int64) * TILE` (see docs/language.md)"


# ------------------------------------------------------------------ at launch


def zero_step_checks(program: Program) -> list:
    """``(argument name, conversions, loc)`` of each top-level loop whose step is a scalar
    argument, through the integer conversions tl.range applied to it. A loop whose step is
    a constant 0 (a literal, a tl.Constant) is refused now, on every backend (compiled, it
    ran no iterations)."""
    _refuse_constant_zero_steps(program.body)
    names = dict(zip(program.body.params, program.arg_names))
    made = {out: eqn for eqn in program.body.eqns for out in eqn.outputs}
    out = []
    for eqn in program.body.eqns:
        if eqn.prim.name != "range_loop":
            continue
        step, chain = eqn.inputs[2], []
        while step in made and made[step].prim.name == "convert":
            chain.append(made[step].params["dtype"])
            step = made[step].inputs[0]
        if step in names and not isinstance(step.type, ArrayType):
            out.append((names[step], chain[::-1], eqn.loc))
    return out


def _refuse_constant_zero_steps(block: Block):
    for eqn in (e for b in nested_blocks(block) for e in b.eqns):
        step = eqn.inputs[2] if eqn.prim.name == "range_loop" else None
        if isinstance(step, Literal) and step.value == 0:
            raise TileValueError("tl.range: step must not be zero", eqn.loc)


def narrowing_checks(program: Program) -> list:
    """``(argument name, dtype, loc)`` of each conversion of a runtime Python int (a weak
    integer parameter) to an integer dtype that may not hold it (its value is known at launch)."""
    names = {p: n for p, n in zip(program.body.params, program.arg_names) if _python_int(p.type)}
    out = []
    for eqn in (e for b in nested_blocks(program.body) for e in b.eqns):
        if eqn.prim.name == "convert" and eqn.inputs[0] in names:
            d, weak = eqn.params["dtype"], np.iinfo(eqn.inputs[0].type.dtype.np)
            if d.is_int and (np.iinfo(d.np).min > weak.min or np.iinfo(d.np).max < weak.max):
                out.append((names[eqn.inputs[0]], d, eqn.loc))
    return out


def _python_int(t) -> bool:
    return not isinstance(t, ArrayType) and t.weak and t.dtype.is_int


class Checked:
    """A runner with the launch checks, and a debug kernel's error word, around each launch.
    The runtime ints' bounds the fast path checks itself (in C); with any other check there
    is no fast path: the checks run in Python at every launch."""

    def __init__(self, run, zero_steps: list, sites: list | None, narrowings: list = ()):
        self.run, self.zero_steps, self.sites, self.narrowings = run, zero_steps, sites, narrowings

    def __call__(self, grid, arguments: dict, infos: dict, stream=None):
        for name, d, loc in self.narrowings:
            info, value = np.iinfo(d.np), arguments[name]
            if not info.min <= value <= info.max:
                raise TileTypeError(f"Python int {value} (argument `{name}`) does not fit in {d.name}", loc)
        if 0 not in grid:  # an empty grid runs nothing, so nothing fails
            for name, chain, loc in self.zero_steps:
                value = np.asarray(arguments[name])
                with np.errstate(all="ignore"):
                    for d in chain:
                        value = d.cast(value)
                if value == 0:
                    raise TileValueError(f"tl.range: step must not be zero (argument `{name}` is {value})", loc)
        if self.sites is None:
            return self.run(grid, arguments, infos, stream)
        errors = np.full(1, NO_ERROR, np.int32)
        try:
            self.run(grid, {**arguments, ERRORS: errors}, {**infos, ERRORS: array_info(errors)}, stream)
        except TileError:  # a host backend raising on a zero step: the check before it says so too, as on a GPU
            if errors[0] == NO_ERROR:
                raise
        if errors[0] != NO_ERROR:
            message, loc = self.sites[errors[0]]
            raise TileCheckError(message, loc) from None

    def fast_launch(self, arguments: dict, infos: dict):
        if self.zero_steps or self.sites is not None:
            return None
        launch = self.run.fast_launch(arguments, infos)
        return launch and (*launch, self.bounds())

    def bounds(self) -> dict:
        """Each narrowed argument's ``(low, high)``: what every dtype it meets holds."""
        out: dict = {}
        for name, d, _ in self.narrowings:
            info = np.iinfo(d.np)
            low, high = out.get(name, (int(info.min), int(info.max)))
            out[name] = (max(low, int(info.min)), min(high, int(info.max)))
        return out


# ------------------------------------------------------------- the debug pass


def _index_feeding(program: Program) -> set:
    """The values an index or offset is computed from (through loops and their carried values)."""
    feeds: set = set()

    def sinks(eqn):
        name, ins = eqn.prim.name, eqn.inputs
        if name == "load":
            return ins[1:-1]
        if name == "store":
            return ins[2:]
        if name in _INDEXED:
            return ins[1 : 1 + ins[0].type.ndim]
        return ()

    def visit(block: Block) -> bool:
        before = len(feeds)
        for eqn in reversed(block.eqns):
            feeds.update(a for a in sinks(eqn) if isinstance(a, Var))
            if eqn.prim.name == "range_loop":
                body = eqn.params["body"]
                for out, res in zip(eqn.outputs, body.results):
                    if out in feeds and isinstance(res, Var):
                        feeds.add(res)
                visit(body)
                for k, (param, res) in enumerate(zip(body.params[1:], body.results)):
                    if param in feeds:
                        feeds.update(a for a in (eqn.inputs[3 + k], res) if isinstance(a, Var))
                if body.params[0] in feeds:
                    feeds.update(a for a in eqn.inputs[:3] if isinstance(a, Var))
            elif any(o in feeds for o in eqn.outputs):
                feeds.update(a for a in eqn.inputs if isinstance(a, Var) and not isinstance(a.type, ArrayType))
        return len(feeds) != before

    while visit(program.body):  # until loop-carried values settle
        pass
    return feeds


def _value(atom):
    """A tracer for an IR atom (a literal as a 0-d tile of its dtype, recorded where called)."""
    if isinstance(atom, Literal):
        import tilelang as tl

        return tl.full((), atom.value, atom.type.dtype)
    return Tile(atom)


class _Instrument:
    def __init__(self, program: Program, errors: Var):
        self.feeds = _index_feeding(program)
        self.errors = Array(errors)
        self.sites: list = []

    def check(self, block: Block, loc, message: str, make_ok):
        """Record what ``make_ok()`` computes (a bool tile, True where all is well) and the
        atomic that reports it, located at the user's line ``loc``."""
        import tilelang as tl

        start = len(block.eqns)
        ok = make_ok(tl)
        shape = ok.shape if isinstance(ok, Tile) else ()
        tl.atomic_min(self.errors, tl.zeros(shape, tl.int32), tl.full(shape, len(self.sites), tl.int32), mask=~ok)
        self.sites.append((f"debug check: {message}", loc))
        for eqn in block.eqns[start:]:
            eqn.loc = loc

    def block(self, block: Block):
        old, block.eqns = block.eqns, []
        with TraceScope(block):
            for eqn in old:
                if eqn.prim.name == "device_assert":  # (the user's own check)
                    cond, message = Tile(eqn.inputs[0]), eqn.params["message"]
                    self.check(block, eqn.loc, f"tl.device_assert failed{': ' + message if message else ''}",
                               lambda tl, c=cond: c)  # fmt: skip
                    continue
                if eqn.prim.name == "range_loop":
                    self.block(eqn.params["body"])
                    if not isinstance(eqn.inputs[2], Literal):
                        step = Tile(eqn.inputs[2])
                        self.check(block, eqn.loc, "tl.range: step must not be zero", lambda tl, s=step: s != 0)
                block.eqns.append(eqn)
                tracing._state.defined[-1].update(eqn.outputs)
                self.after(block, eqn)

    def after(self, block: Block, eqn):
        name = eqn.prim.name
        if name in _INDEXED:
            return self.bounds(block, eqn)
        if not eqn.outputs or eqn.outputs[0] not in self.feeds:
            return
        r = eqn.outputs[0]
        t = r.type.dtype
        if name in _ARITHMETIC and t.kind == "i" and (t.bits < 64 or name not in _SUMS):
            message = f"{t.name} {_ARITHMETIC[name]} overflowed computing an index or offset; {_INT64_HINT}"
            self.check(block, eqn.loc, message, lambda tl: _no_overflow(tl, eqn, Tile(r), t))
        elif name == "convert" and t.is_int and eqn.inputs[0].type.dtype.is_int:
            s = eqn.inputs[0].type.dtype
            if s.kind == t.kind and t.bits >= s.bits or s.kind == "u" and t.kind == "i" and t.bits > s.bits:
                return  # always exact
            message = f"converting {s.name} to {t.name} changed the value of an index or offset; {_INT64_HINT}"
            self.check(block, eqn.loc, message, lambda tl: _same_value(_value(eqn.inputs[0]), Tile(r), s, t))

    def bounds(self, block: Block, eqn):
        array = Array(eqn.inputs[0])
        ndim, masked = array.ndim, eqn.params["masked"]
        mask = (eqn.inputs[-2] if eqn.prim.name == "gather" else eqn.inputs[-1]) if masked else None
        what = f"tl.{eqn.prim.name}" + (f"_{eqn.params['op']}" if eqn.prim.name == "atomic" else "")
        for d in range(ndim):

            def make_ok(tl, d=d):
                index, size = _value(eqn.inputs[1 + d]), array.shape[d]
                if index.dtype is D.uint64:
                    ok = index < size.astype(tl.uint64)
                else:
                    wide = index.astype(tl.int64)
                    ok = (wide >= 0) & (wide < size)
                return ok if mask is None else ok | ~_value(mask)

            message = f"{what}: an index along axis {d} is outside the array (0 <= index < shape[{d}])"
            self.check(block, eqn.loc, message, make_ok)


def _no_overflow(tl, eqn, r, t):
    """Whether ``r`` (dtype ``t``, wrapped), computed by ``eqn``, is the exact result."""
    name, low, high = eqn.prim.name, int(np.iinfo(t.np).min), int(np.iinfo(t.np).max)
    a, *rest = (_value(x).astype(t) for x in eqn.inputs)
    if name in ("neg", "abs"):
        return a != low
    if name in _SUMS:  # the same sums in int64 (of an int32 or narrower tile: exact)
        wide = (tl.sum if name == "reduce_sum" else tl.cumsum)(a.astype(tl.int64), axis=eqn.params["axis"])
        return (wide >= low) & (wide <= high)
    (b,) = rest
    if name == "floordiv":  # the one quotient that does not fit
        return (a != low) | (b != -1)
    if name == "shl":  # no bit (sign included) shifted out; counts past the width shift everything out
        return tl.where((b < 0) | (b >= t.bits), a == 0, (r >> b) == a)
    if t.bits < 64:  # exact in int64
        wa, wb = a.astype(tl.int64), b.astype(tl.int64)
        wide = wa + wb if name == "add" else wa - wb if name == "sub" else wa * wb
        return (wide >= low) & (wide <= high)
    if name == "add":  # overflow iff a and b have one sign and r the other
        return ((a ^ r) & (b ^ r)) >= 0
    if name == "sub":
        return ((a ^ b) & (a ^ r)) >= 0
    # a * b: exact iff r // a == b (a != 0); -1 * INT64_MIN is the one case that division overflows
    divisor = tl.where((a == 0) | (a == -1), 1, a)
    return tl.where(a == 0, True, tl.where(a == -1, b != low, r // divisor == b))


def _same_value(a, r, s, t):
    ok = r.astype(s) == a
    if s.kind == "i" and t.kind == "u":
        ok = ok & (a >= 0)
    if s.kind == "u" and t.kind == "i":
        ok = ok & (r >= 0)
    return ok


def add_checks(program: Program) -> tuple[Program, list]:
    """``program`` checking itself (rewritten in place), and ``(message, loc)`` per check id."""
    errors = Var(ArrayType(D.int32, 1), hint=ERRORS)
    program.body.params.append(errors)
    program.arg_names.append(ERRORS)
    instrument = _Instrument(program, errors)
    instrument.block(program.body)
    return program, instrument.sites
