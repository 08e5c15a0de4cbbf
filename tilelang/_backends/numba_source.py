"""Thread IR → Python source for numba: the expression table both numba backends share.

Every register becomes a local variable; every operation is cast to its register's
numba type (so integers wrap at their width, and numba's promotion to int64 or float64
never leaks), and operations producing a 16-bit float round their float32 result. What
differs between targets (memory, barriers, shuffles, thread ids) is rendered by the
target's ``statement`` and ``special`` methods.
"""

from __future__ import annotations

import math

from .._ir.primitives import ftz_exponent
from .._lower.thread_ir import (
    ArrayParam,
    AsyncCopy,
    Atomic,
    Barrier,
    Imm,
    LdMatrix,
    Load,
    Loop,
    Mma,
    Op,
    ProxyFence,
    Reg,
    SharedLoad,
    SharedStore,
    Shuffle,
    SlotMap,
    Store,
    ThreadProgram,
    Wgmma,
    WgmmaWait,
    extent,
    registers,
    walk_statements,
)
from ..errors import TileCompilerError


def code_type_name(d) -> str:
    """The numba type a register of dtype ``d`` has in generated code."""
    if d.is_float and d.bits == 16:
        return "float32"
    return "boolean" if d.is_bool else d.name


def operand(x) -> str:
    if isinstance(x, Reg):
        return x.name
    if isinstance(x, Imm):
        if x.dtype.is_bool:
            return repr(bool(x.value))
        if x.dtype.is_float:
            v = float(x.value)
            text = "nan" if math.isnan(v) else ("inf" if v == math.inf else ("-inf" if v == -math.inf else repr(v)))
            return f"{code_type_name(x.dtype)}({text})"
        return f"{x.dtype.name}({int(x.value)})"
    raise TileCompilerError(f"cannot render operand {x!r}")


_INFIX = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "mod": "%", "eq": "==", "ne": "!=",
          "lt": "<", "le": "<=", "gt": ">", "ge": ">="}  # fmt: skip
_MATH = {"exp": "math.exp({a})", "log": "math.log({a})", "log2": "math.log2({a})", "sqrt": "math.sqrt({a})",
         "sin": "math.sin({a})", "cos": "math.cos({a})", "tanh": "math.tanh({a})", "erf": "math.erf({a})",
         # LLVM's floor/ceil (numba's math.floor returns an int64, which loses the sign of -0.0)
         "floor": "floor({a})", "ceil": "ceil({a})"}  # fmt: skip


def expression(op: Op, ref=operand) -> str:
    """The Python expression computing ``op`` (before the cast to its register type);
    ``ref`` renders a register or immediate."""
    args = [ref(a) for a in op.args]
    types = [a.dtype for a in op.args]
    t = code_type_name(op.dst.dtype)
    a = args[0] if args else None
    b = args[1] if len(args) > 1 else None
    name = op.op
    if name == "floordiv" and types[0].name == "int64":  # numba's INT64_MIN // -1 is 0 (narrower ints widen)
        return f"select({b} == int64(-1), -{a}, {a} // {b})"
    if name in WRAPPING and op.dst.dtype.name == "int64":  # (narrower ints widen to int64 and are cut back)
        a, b = (x if d.name == "int64" else f"int64({x})" for x, d in zip(args, types))
        return f"wrapping_{name}({a}, {b})"
    if name in _INFIX:
        return f"{a} {_INFIX[name]} {b}"
    if name == "div":
        return f"{a} / {b}"
    if name == "pow":
        return f"{a} ** {b}"
    if name in ("maximum", "minimum"):
        cmp = ">" if name == "maximum" else "<"
        if types[0].is_bool:
            return f"{a} | {b}" if name == "maximum" else f"{a} & {b}"
        nan_first = f" | ({a} != {a})" if types[0].is_float else ""
        return f"select(({a} {cmp} {b}){nan_first}, {a}, {b})"
    if name in ("and", "or", "xor", "land", "lor"):
        sym = {"and": "&", "or": "|", "xor": "^", "land": "&", "lor": "|"}[name]
        return f"{a} {sym} {b}"
    if name in ("shl", "shr"):
        bits = types[0].itemsize * 8
        if isinstance(op.args[1], Imm) and 0 <= op.args[1].value < bits:  # the usual case: no range check
            return f"{a} {'<<' if name == 'shl' else '>>'} {int(op.args[1].value)}"
        # both arms of the select typed alike: `x if ok else 0` unifies uint64 with int64 as float64
        ok = f"uint64({b}) < {bits}"
        if name == "shr" and types[0].kind == "i":
            return f"{a} >> select({ok}, {b}, {code_type_name(types[1])}({bits - 1}))"
        shifted = f"{a} {'<<' if name == 'shl' else '>>'} {b}"
        return f"select({ok}, {t}({shifted}), {t}(0))"
    if name == "neg":
        return f"-{a}"
    if name == "invert":
        return f"not {a}" if types[0].is_bool else f"~{a}"
    if name == "abs":
        return f"abs({a})"
    if name in _MATH:
        return _MATH[name].format(a=a)
    if name == "exp2":  # (not 2.0 ** a: a powf; an exp2 softmax ran at 2159 GB/s with it, 3430 with exp, H200)
        return f"math.exp2({a})"
    if name == "exp2_ftz":  # exp2 turns subnormal below the threshold: exp2(-inf) is 0 there
        return f"math.exp2(select({a} < {t}({ftz_exponent(op.dst.dtype)}), {t}(-inf), {a}))"
    if name == "rsqrt":
        return f"{t}(1.0) / math.sqrt({a})"
    if name == "sigmoid":  # exp(x) / (1 + exp(x)) below 0: 1 / (1 + exp(-x)) is 0 once exp(-x) overflows
        e = f"math.exp(-abs({a}))"
        return f"select({a} >= 0, {t}(1.0), {e}) / ({t}(1.0) + {e})"
    if name == "convert":
        return f"{a} != 0" if op.attr.is_bool else a
    if name == "from_bits":  # a 16-bit float from the raw bits a load left in a uint16
        return f"{op.dst.dtype.name}_value({a})"
    if name == "pack16":  # two 16-bit floats' bits in a word, for the tensor cores
        return f"pack_{op.attr.name}({a}, {b})"
    if name == "tf32":  # a float32 rounded to TF32: its bits (a word for the tensor cores), or the value
        return f"tf32_bits({a})" if op.dst.dtype.name == "uint32" else f"f32_from_bits(tf32_bits({a}))"
    if name == "select":  # an LLVM select (an intrinsic): a branch would cost numba compile time
        return f"select({a}, {args[1]}, {args[2]})"
    raise TileCompilerError(f"the numba backends have no rule for thread op '{name}'")


def select_intrinsic(typingctx, cond, a, b):
    """``a if cond else b`` as one LLVM ``select``, for either numba target's ``@intrinsic``:
    a Python conditional would be a branch, and numba's compile time grows with branches."""
    from numba import types

    if a != b:
        return None

    def codegen(context, builder, sig, args):
        return builder.select(*args)

    return a(types.boolean, a, b), codegen


# numba marks signed int64 add/sub/mul `nsw` (overflow undefined), and LLVM then reasons past
# a wrap: the square of a wrapped product is "nonnegative" and its `% 11` became an unsigned
# remainder. Tile arithmetic wraps, as NumPy's and the GPU's does, so int64 ones use these.
WRAPPING = ("add", "sub", "mul")


def wrapping_intrinsic(name: str):
    """An ``@intrinsic`` body for ``wrapping_<name>(a, b)`` on two int64s: the LLVM instruction
    without ``nsw``, two's complement wrap-around (the same ``add.s64``/``mul.lo.s64`` in PTX)."""
    from numba import types

    def typer(typingctx, a, b):
        if a != types.int64 or b != types.int64:
            return None

        def codegen(context, builder, sig, args):
            return getattr(builder, name)(*args)

        return a(a, b), codegen

    typer.__name__ = f"wrapping_{name}"
    return typer


def llvm_math_intrinsic(name: str):
    """An ``@intrinsic`` body calling ``llvm.<name>`` on a float (``floor``, ``ceil``): a float
    result, signed zeros kept; on the GPU one ``cvt.rmi``/``cvt.rpi`` instruction."""
    from numba import types

    def typer(typingctx, x):
        if not isinstance(x, types.Float):
            return None

        def codegen(context, builder, sig, args):
            return builder.call(builder.module.declare_intrinsic(f"llvm.{name}", [args[0].type]), args)

        return x(x), codegen

    typer.__name__ = name
    return typer


# ops whose numba result, on operands of the register's own type, already has that type
_SAME_TYPE = {"add", "sub", "mul", "div", "neg", "select", "maximum", "minimum"}


def cast(op: Op, expr: str) -> str:
    d = op.dst.dtype
    if d.is_bool:
        return f"({expr})" if op.op != "convert" else expr
    wide = d.name in ("float32", "float64", "int64", "uint64") and not (op.op == "div" and d.is_int)
    if wide and op.op in _SAME_TYPE and all(a.dtype is d for a in op.args[-2:]):
        return expr
    text = f"{code_type_name(d)}({expr})"
    if d.is_float and d.bits == 16 and op.op != "select":
        src = op.args[0].dtype
        if op.op == "convert" and (src.name == "float64" or (src.is_int and src.bits >= 32)):
            # through float32 rounded to odd, so the 16-bit result is rounded once (float32(x) rounds twice)
            text = f"float32_odd_{'float' if src.is_float else 'int'}({expr})"
        return f"round_{d.name}({text})"
    return text


def loop_bounds(loop, ref) -> str:
    """``range()`` arguments; on the GPU a zero step (which cannot raise there) runs no iterations."""
    start, stop, step = (ref(x) for x in (loop.start, loop.stop, loop.step))
    if isinstance(loop.step, Imm):
        return f"{start}, {stop}, {step}"
    return f"{start}, {stop} if {step} != 0 else {start}, {step} if {step} != 0 else 1"


# What one slot of a statement costs in LLVM instructions, roughly: NVVM unrolls a loop over
# slots (and so keeps its register arrays in registers, not in local memory) only while the
# unrolled size stays under its threshold, so a run is cut where its slots x cost would pass
# UNROLL_BUDGET (measured on sm_90: 64 slots x 3 exps stayed a loop, with a 512-byte stack; so
# did 64 slots unpacking three 16-bit tiles in attention's backward at D = 128, counted 64 x 54
# when shifts and 16-bit widenings cost 3). A lower budget cuts runs into more loops between
# which every slot's value is alive: a chain of 4 x 7 ops a slot spilled at 3000.
UNROLL_BUDGET = 4000
_TRANSCENDENTAL = {"exp", "exp2", "exp2_ftz", "log", "log2", "sin", "cos", "tanh", "erf", "pow", "sigmoid", "fmod"}


def slot_cost(s) -> int:
    if isinstance(s, (Load, Store)):
        return 10 * s.lanes if s.lanes > 1 else 8
    if isinstance(s, Atomic):
        return 30
    if isinstance(s, Op) and s.op in _TRANSCENDENTAL:
        return 30
    if isinstance(s, Op) and s.op in ("div", "sqrt", "rsqrt", "floordiv", "mod"):
        return 8
    if isinstance(s, Op) and (s.op in _REPEATS or s.op in ("from_bits", "pick")):  # a compare and a
        return 6  # select around the op; a 16-bit float widened, then rounded; another slot's value
    return 3


def slot_groups(stmts) -> list[tuple]:
    """``stmts`` in runs ``(statements, start, stop)``, each one loop over the slots
    ``range(start, stop)``: consecutive statements applying to the same number of slots
    (more than one), none reading through ``pick`` or a vector store what an earlier one of
    the run defines (it may not be computed yet), none touching memory an earlier one writes
    (or writing what it reads), and within the unroll budget (one statement over it is
    split into chunks of slots); consecutive one-slot statements in a run without a loop
    (one-slot ops that do not read the loop in progress move before it); barriers, shuffles
    and loops alone."""
    runs, defined, touched, cost = [], set(), {}, 0
    for s in stmts:
        n = extent(s) if _per_slot(s) else 0
        if n == 1 and isinstance(s, Op) and runs and runs[-1][2] > 1 and not defined & set(registers(s, s.USES)):
            # a one-slot op the loop in progress does not feed: computed before it, which keeps
            # the loop whole (ops are pure, and what it reads is defined before the loop)
            if len(runs) < 2 or runs[-2][2] != 1:
                runs.insert(len(runs) - 1, ([], 0, 1))
            runs[-2][0].append(s)
            continue
        place = getattr(s, "array", None) or getattr(s, "buffer", None)
        writes = isinstance(s, (Store, SharedStore, Atomic))
        joins = n == 1 and runs and runs[-1][2] == 1
        joins = joins or (
            n > 1
            and runs
            and runs[-1][2] == n
            and (cost + slot_cost(s)) * n <= UNROLL_BUDGET
            and not any(x in defined for x in _shifted_reads(s))
            and (place is None or (place not in touched or not (writes or touched[place])))
        )
        if not joins:
            if n > 1 and slot_cost(s) * n > UNROLL_BUDGET:  # alone, in chunks
                chunk = 1 << (UNROLL_BUDGET // slot_cost(s)).bit_length() - 1
                runs.extend(([s], a, min(a + chunk, n)) for a in range(0, n, chunk))
                runs.append(([], 0, -1))  # (nothing joins a chunked statement)
                continue
            runs.append(([], 0, n))
            defined, touched, cost = set(), {}, 0
        runs[-1][0].append(s)
        cost += slot_cost(s)
        defined.update(registers(s, s.DEFS))
        if place is not None:
            touched[place] = touched.get(place, False) or writes
    chunked = []
    for run, start, stop in (run for run in runs if run[0]):
        most = MAX_UNROLLED // 2 if any(isinstance(s, (Load, Store)) for s in run) else MAX_UNROLLED
        chunked.extend((run, a, min(a + most, stop)) for a in _starts(start, stop, most))
    return chunked


# NVVM leaves a loop of more slots than this rolled whatever its body (a 128-slot `acc[r] = 0`
# kept its array in a 512-byte stack; 64 groups of 2-lane stores too): longer runs are cut into
# loops of this many (half for memory accesses). A run's statements read no slot but their
# own, so running it a chunk at a time is the same.
MAX_UNROLLED = 64


def _starts(start, stop, most=MAX_UNROLLED):
    return range(start, stop, most) if stop - start > most else (start,)


def slot_ranges(n: int) -> list[str]:
    """The ``range(...)`` loops over ``n`` slots, at most MAX_UNROLLED slots each."""
    if n <= MAX_UNROLLED:
        return [f"range({n})"]
    return [f"range({a}, {min(a + MAX_UNROLLED, n)})" for a in _starts(0, n)]


def _per_slot(s) -> bool:
    return not isinstance(s, (Barrier, Shuffle, Mma, LdMatrix, Wgmma, WgmmaWait, ProxyFence, Loop))


def _shifted_reads(s):
    """Registers a statement reads at other slots than its own (``pick``; a vector store's values)."""
    if isinstance(s, Op) and s.op == "pick":
        return s.args
    if isinstance(s, Store) and s.lanes > 1:
        return (s.values,)
    return ()


# ops whose rendering names an operand more than once (an expression written there would be
# compiled as often)
_REPEATS = {"maximum", "minimum", "sigmoid", "exp2_ftz", "floordiv", "shl", "shr"}


def slot_expr(m: SlotMap, at) -> str:
    """``m`` applied to the slot ``at`` (a number, or the loop's variable)."""
    if isinstance(at, int):
        return str(m(at))
    parts = []
    for shift, mask, left in m.terms:
        term = f"({at} >> {shift}) & {mask}" if shift else f"{at} & {mask}"
        parts.append(f"(({term}) << {left})" if left else f"({term})")
    return " + ".join(parts + ([str(m.const)] if m.const or not parts else []))


def lane_slot(at, lanes: int, i: int):
    """Slot ``i`` of the group ``at`` of ``lanes`` slots."""
    if isinstance(at, int) and isinstance(i, int):
        return at * lanes + i
    return f"{at} * {lanes} + {i}" if at != 0 else str(i)


class SourceWriter:
    """Renders a thread program; targets override the target-specific parts.

    A statement over ``n`` slots becomes ``for r in range(n):`` with its registers indexed
    by ``r``, consecutive ones sharing the loop (:func:`slot_groups`); a register read only
    inside the loop defining it is a plain variable there, others are register arrays."""

    def __init__(self, program: ThreadProgram):
        self.program = program
        self.lines: list[str] = []
        self.constants: dict = {}  # rendered immediate -> the module global holding it
        self.arrays = {p.name: p for p in program.params if isinstance(p, ArrayParam)}
        self.groups: dict = {}  # id of a statement list -> its runs
        self.local: set = set()  # registers living inside one slot loop
        self.at = 0  # the slot the statement being rendered applies to
        self._plan(program.body)

    def _plan(self, body):
        """Which registers live in one run only (plain variables there, not arrays) and which
        are read once, in the run defining them (their expression is written where it is read)."""
        home, uses, count, ops = {}, {}, {}, set()
        carried = set()

        def visit(stmts):
            self.groups[id(stmts)] = runs = slot_groups(stmts)
            for k, (run, start, stop) in enumerate(runs):
                whole = _per_slot(run[0]) and (start, stop) == (0, extent(run[0]))
                key = (id(stmts), k) if whole else None
                for s in run:
                    shifted = set(_shifted_reads(s))
                    repeats = isinstance(s, Atomic) or (isinstance(s, Op) and s.op in _REPEATS)
                    for x in registers(s, s.USES):
                        if isinstance(x, Reg):
                            uses.setdefault(x, set()).add(None if x in shifted else key)
                            count[x] = count.get(x, 0) + (2 if repeats else 1)
                    for x in registers(s, s.DEFS):
                        if isinstance(x, Reg) and not (isinstance(s, (Load, SharedLoad)) and s.lanes > 1):
                            home[x] = key
                    if isinstance(s, Op):
                        ops.add(s.dst)
                    if isinstance(s, Loop):
                        carried.update(s.params)
                        visit(s.body)

        visit(body)
        within = {x for x, key in home.items() if key is not None and x not in carried and uses.get(x, {key}) == {key}}
        self.local = {x for x in within if x.slots > 1}
        self.inline = {x for x in within & ops if count.get(x) == 1}
        self.inlined: dict = {}  # register -> its expression, once rendered

    def emit(self, line: str, indent: int):
        self.lines.append(" " * indent + line)

    def header(self, imports: str, intrinsics: str):
        """The generated module's imports: numba types, the target's intrinsics."""
        self.emit("import math", 0)
        self.emit("import numpy as np", 0)
        self.emit(f"from numba import {imports}, boolean, int8, int16, int32, int64, uint8, uint16, uint32", 0)
        self.emit("from numba import uint64, float32, float64", 0)
        self.emit(f"from tilelang._backends.{intrinsics} import *  # noqa: F403", 0)
        self.emit("inf, nan = math.inf, math.nan", 0)
        self.body_start = len(self.lines)

    def ref(self, x, at=None) -> str:
        """How code refers to a register or immediate at a slot (that being rendered by default)."""
        if x in self.inlined:
            return self.inlined.pop(x)
        if isinstance(x, Reg) and x.slots > 1 and x not in self.local:
            return self.element(x, self.at if at is None else at)
        return self.constant(x) if isinstance(x, Imm) else operand(x)

    def constant(self, x: Imm) -> str:
        """A typed immediate as a module global (numba freezes it: no typed call per use)."""
        text = operand(x)
        if x.dtype.is_bool:
            return text
        value = text[text.index("(") + 1 : -1].replace("-", "m").replace(".", "p").replace("+", "")
        return self.constants.setdefault(text, f"{x.dtype.short}_{value}")

    def module(self) -> str:
        """The source: the header, the constants, the kernel."""
        header = self.lines[: self.body_start]
        constants = [f"{name} = {text}" for text, name in self.constants.items()]
        return "\n".join(header + constants + [""] + self.lines[self.body_start :]) + "\n"

    def element(self, x: Reg, at) -> str:
        """Slot ``at`` of the register array ``x``."""
        return f"{x.name}[{at}]"

    def array_registers(self):
        """The registers held as arrays (not plain variables), in the order defined."""
        seen = {}
        for s in walk_statements(self.program.body):
            for x in registers(s, s.DEFS):
                if isinstance(x, Reg) and x.slots > 1 and x not in self.local:
                    seen.setdefault(x, None)
        return list(seen)

    def signature(self) -> list[str]:
        names = []
        for p in self.program.params:
            names.extend(r.name for r in (p.regs() if isinstance(p, ArrayParam) else [p.reg]))
        return names

    def body(self, stmts, indent):
        if not stmts:
            self.emit("pass", indent)
        for run, start, stop in self.groups.get(id(stmts)) or slot_groups(stmts):
            n = extent(run[0]) if _per_slot(run[0]) else 0
            if n > 1 and self.COPY_VERSIONS and any(isinstance(s, AsyncCopy) for s in run):
                self.copy_versions(run, start, stop, indent)
            elif n > 1:
                self.slot_loop(run, start, stop, indent)
            else:
                for s in run:
                    self.one(s, indent)

    def slot_loop(self, run, start, stop, indent):
        """A run as one loop over its slots (LLVM unrolls it into registers)."""
        self.emit(f"for r in range({f'{start}, ' if start else ''}{stop}):", indent)
        self.at = "r"
        for s in run:
            self.one(s, indent + 4)
        self.at = 0

    def one(self, s, indent):
        if isinstance(s, Op) and s.dst in self.inline:
            self.inlined[s.dst] = f"({self.value(s)})"
        elif isinstance(s, Op):
            self.emit(f"{self.ref(s.dst)} = {self.value(s)}", indent)
        elif isinstance(s, Loop):
            self.loop_statement(s, indent)
        else:
            self.statement(s, indent)

    def loop_statement(self, s: Loop, indent):
        """A ``Loop`` within a thread's code: the params set from the inits, then the loop."""
        self.copy(s.params, s.inits, indent)
        self.iterate(s, loop_bounds(s, self.ref), indent)

    def iterate(self, s: Loop, bounds: str, indent):
        self.before_loop(s, indent)
        self.emit(f"for {self.ref(s.index)} in range({bounds}):", indent)
        self.body(s.body, indent + 4)
        self.copy(s.params, s.results, indent + 4)

    def value(self, op: Op) -> str:
        if op.op == "pick":
            return self.ref(op.args[0], slot_expr(op.attr, self.at))
        if op.op == "slot":
            return f"int32({slot_expr(op.attr, self.at)})"
        special = self.special(op)
        return special if special is not None else cast(op, expression(op, self.ref))

    def copy(self, targets, sources, indent):
        """``targets = sources`` at once (a source may be another target), a loop per slot count.
        The widest first: a register array may be given a one-slot target's old value (a
        broadcast adds no op), never the other way round, and arrays of different slot counts
        never feed each other."""
        for n in sorted({t.slots for t in targets}, reverse=True):
            pairs = [(t, v) for t, v in zip(targets, sources) if t.slots == n]
            for loop in slot_ranges(n) if n > 1 else [None]:
                if loop:
                    self.emit(f"for r in {loop}:", indent)
                    self.at = "r"
                lhs = ", ".join(self.ref(t) for t, _ in pairs)
                self.emit(f"{lhs}, = {', '.join(self.ref(v) for _, v in pairs)},", indent + (4 if loop else 0))
                self.at = 0

    def before_loop(self, loop: Loop, indent):
        """Target-specific checks before a loop (the CPU backend raises on a zero step)."""

    def masked(self, mask, lines, indent):
        """``lines`` (a string or a list) under ``if mask:`` (skipped when statically false)."""
        lines = [lines] if isinstance(lines, str) else lines
        if mask is None or (isinstance(mask, Imm) and mask.value):
            for line in lines:
                self.emit(line, indent)
        elif not isinstance(mask, Imm):
            self.emit(f"if {self.ref(mask)}:", indent)
            for line in lines:
                self.emit(line, indent + 4)

    FMOD = "math.fmod"  # the exact float remainder where numba has one
    COPY_VERSIONS = False  # runs of async copies written twice, under a test of their alignment (CUDA)

    def special(self, op: Op):
        """Ops rendered outside the expression table (targets add thread and block ids)."""
        if op.op == "fmod":
            a, b = (self.ref(x) for x in op.args)
            return f"{code_type_name(op.dst.dtype)}({self.FMOD}({a}, {b}))"
        return None

    def statement(self, s, indent):
        raise NotImplementedError
