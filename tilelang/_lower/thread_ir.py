"""The thread IR: what one thread of a block does, target-neutral.

Values are scalar registers (tiles are unrolled into one register per element a thread
holds). Statements: scalar operations, global loads and stores (scalar or vector, with a
mask), atomics, shared-memory loads and stores, barriers, warp shuffles, and structured
``If`` / ``Loop``. Every backend (numba-cuda, CPU) emits from this form. Each statement
names the fields holding the registers it reads (``USES``) and defines (``DEFS``), so passes
and backends that only follow registers need not dispatch on statement classes.

Registers of 16-bit float type hold float32 values that are exactly representable in
that type: backends compute each operation producing one in float32 and round it once,
as the interpreter does.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar

from ..dtypes import DType
from ..dtypes import int64 as INT64
from ..dtypes import uint64 as UINT64
from ..errors import TileCompilerError


@dataclass(frozen=True)
class Reg:
    name: str
    dtype: DType

    def __str__(self):
        return self.name


@dataclass(frozen=True)
class Imm:
    value: object
    dtype: DType

    def __str__(self):
        return f"{self.value!r}:{self.dtype.short}"


@dataclass
class Op:
    """``dst = op(args)`` for an op of ``OPS`` (params such as a dtype in ``attr``)."""

    dst: Reg
    op: str
    args: tuple
    attr: object = None
    USES: ClassVar = ("args",)
    DEFS: ClassVar = ("dst",)


@dataclass
class Load:
    """``dsts = array[offset : offset+len(dsts)]`` where ``mask``; else ``pad``.
    Several destinations make a vector load: the caller guarantees alignment."""

    dsts: tuple
    array: str
    offset: object
    mask: object
    pad: object
    USES: ClassVar = ("offset", "mask", "pad")
    DEFS: ClassVar = ("dsts",)


@dataclass
class Store:
    array: str
    offset: object
    values: tuple
    mask: object
    USES: ClassVar = ("offset", "values", "mask")
    DEFS: ClassVar = ()


@dataclass
class Atomic:
    array: str
    offset: object
    value: object
    op: str
    mask: object
    USES: ClassVar = ("offset", "value", "mask")
    DEFS: ClassVar = ()


@dataclass
class SharedLoad:
    dst: Reg
    buffer: str
    index: object
    USES: ClassVar = ("index",)
    DEFS: ClassVar = ("dst",)


@dataclass
class SharedStore:
    buffer: str
    index: object
    value: object
    mask: object
    USES: ClassVar = ("index", "value", "mask")
    DEFS: ClassVar = ()


@dataclass
class Barrier:
    USES: ClassVar = ()
    DEFS: ClassVar = ()


@dataclass
class Shuffle:
    """``dst = src`` of the lane ``lane ^ xor`` (all 32 lanes take part)."""

    dst: Reg
    src: object
    xor: int
    USES: ClassVar = ("src",)
    DEFS: ClassVar = ("dst",)


@dataclass
class If:
    """Two ways to compute the same values, e.g. a 16-byte access and its element-by-element
    fallback: a backend without the fast way may emit ``orelse`` alone."""

    cond: object
    then: list
    orelse: list = field(default_factory=list)
    USES: ClassVar = ("cond",)
    DEFS: ClassVar = ()


@dataclass
class Loop:
    """``for index in range(start, stop, step)`` carrying ``params`` (initialised from
    ``inits``, updated to ``results`` at the end of each iteration; after the loop the
    params hold the final values)."""

    index: Reg
    start: object
    stop: object
    step: object
    params: list
    inits: list
    body: list
    results: list
    loc: object = None  # the user's tl.range line, for errors raised at run time
    USES: ClassVar = ("start", "stop", "step", "inits", "results")
    DEFS: ClassVar = ("index", "params")


@dataclass
class ArrayParam:
    """An array argument, passed as its data pointer, shape and strides (in elements)."""

    name: str
    dtype: DType
    ndim: int

    def reg(self, what: str, axis: int | None = None) -> Reg:
        return array_reg(self.name, what, axis)

    def regs(self) -> list:
        return [self.reg("ptr")] + [self.reg(w, d) for w in ("shape", "stride") for d in range(self.ndim)]


def array_reg(name: str, what: str, axis: int | None = None) -> Reg:
    """The register of an array parameter's pointer, or of its shape or stride along an axis."""
    return Reg(f"{name}__{what}{'' if axis is None else axis}", UINT64 if what == "ptr" else INT64)


@dataclass
class ScalarParam:
    reg: Reg


@dataclass
class ThreadProgram:
    name: str
    params: list
    num_threads: int
    shared: dict  # buffer name -> (dtype, number of elements)
    body: list
    shared_sites: dict = field(default_factory=dict)  # buffer name -> the user's line asking most of it


# ops and their arity; "round" keeps a 16-bit float register representable
OPS = {
    **dict.fromkeys(["add", "sub", "mul", "div", "floordiv", "mod", "pow", "maximum", "minimum"], 2),
    **dict.fromkeys(["and", "or", "xor", "shl", "shr", "eq", "ne", "lt", "le", "gt", "ge"], 2),
    **dict.fromkeys(["land", "lor", "fmod"], 2),
    **dict.fromkeys(["neg", "invert", "abs", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos"], 1),
    **dict.fromkeys(["tanh", "erf", "sigmoid", "floor", "ceil", "convert"], 1),
    "aligned": 1,  # attr (array, bytes): whether the element at this offset is so aligned
    "select": 3,
    "thread_id": 0,
    "block_id": 0,
    "num_blocks": 0,
}


def shared_offsets(shared: dict) -> tuple[dict, int]:
    """Byte offset of each shared buffer laid out one after another at 16-byte aligned offsets
    (as the CUDA backend places them past the static limit), and the bytes they take in all."""
    offsets, at = {}, 0
    for name, (d, size) in shared.items():
        at = -(-at // 16) * 16
        offsets[name] = at
        at += size * d.itemsize
    return offsets, at


def registers(s, fields):
    """The registers (and immediates) in ``s``'s ``fields`` (``USES``, ``DEFS``), flattened."""
    for name in fields:
        x = getattr(s, name)
        yield from (x if isinstance(x, (tuple, list)) else (x,))


def replace_uses(s, rename: dict):
    """``s`` with every register it reads (its ``USES`` fields) replaced as ``rename`` says."""

    def one(x):
        if isinstance(x, (tuple, list)):
            return type(x)(one(y) for y in x)
        return rename.get(x, x) if isinstance(x, Reg) else x

    return replace(s, **{name: one(getattr(s, name)) for name in s.USES})


def walk_statements(stmts):
    """Every statement, those inside ``If`` and ``Loop`` bodies included."""
    for s in stmts:
        yield s
        if isinstance(s, If):
            yield from walk_statements(s.then + s.orelse)
        elif isinstance(s, Loop):
            yield from walk_statements(s.body)


def _text(x):
    if isinstance(x, (tuple, list)):
        return "(" + ", ".join(map(_text, x)) + ")"
    return "-" if x is None else str(x)


def _lines(stmts, indent):
    pad = " " * indent
    for s in stmts:
        if isinstance(s, Op):
            attr = f"[{getattr(s.attr, 'name', s.attr)}]" if s.attr is not None else ""
            yield f"{pad}{s.dst}:{s.dst.dtype.short} = {s.op}{attr} {' '.join(map(_text, s.args))}".rstrip()
        elif isinstance(s, Load):
            yield f"{pad}{_text(s.dsts)} = load {s.array}[{_text(s.offset)}] mask={_text(s.mask)} pad={_text(s.pad)}"
        elif isinstance(s, Store):
            yield f"{pad}store {s.array}[{_text(s.offset)}] = {_text(s.values)} mask={_text(s.mask)}"
        elif isinstance(s, Atomic):
            yield f"{pad}atomic_{s.op} {s.array}[{_text(s.offset)}] {_text(s.value)} mask={_text(s.mask)}"
        elif isinstance(s, SharedLoad):
            yield f"{pad}{s.dst} = shared {s.buffer}[{_text(s.index)}]"
        elif isinstance(s, SharedStore):
            yield f"{pad}shared {s.buffer}[{_text(s.index)}] = {_text(s.value)} mask={_text(s.mask)}"
        elif isinstance(s, Barrier):
            yield f"{pad}barrier"
        elif isinstance(s, Shuffle):
            yield f"{pad}{s.dst} = shuffle_xor {_text(s.src)} {s.xor}"
        elif isinstance(s, If):
            yield f"{pad}if {_text(s.cond)}:"
            yield from _lines(s.then, indent + 4)
            if s.orelse:
                yield f"{pad}else:"
                yield from _lines(s.orelse, indent + 4)
        elif isinstance(s, Loop):
            carried = ", ".join(f"{p}={_text(i)}" for p, i in zip(s.params, s.inits))
            yield f"{pad}for {s.index} in range({_text(s.start)}, {_text(s.stop)}, {_text(s.step)}) carry({carried}):"
            yield from _lines(s.body, indent + 4)
            yield f"{pad}    next {_text(s.results)}"
        else:
            raise TileCompilerError(f"unknown thread IR statement {s!r}")


def format_thread_program(prog: ThreadProgram) -> str:
    params = ", ".join(
        f"{p.name}:{p.dtype.short}[{','.join('?' * p.ndim)}]*"
        if isinstance(p, ArrayParam)
        else f"{p.reg}:{p.reg.dtype.short}"
        for p in prog.params
    )
    shared = " ".join(f"{n}:{d.short}[{size}]" for n, (d, size) in prog.shared.items())
    head = f"thread_program {prog.name}({params}) threads={prog.num_threads}" + (f" shared {shared}" if shared else "")
    return "\n".join([head, *_lines(prog.body, 4)])


def verify_thread_program(prog: ThreadProgram) -> None:
    """Every register is assigned before it is read; ops are known with the right arity."""
    defined = {p.reg for p in prog.params if isinstance(p, ScalarParam)}
    defined.update(r for p in prog.params if isinstance(p, ArrayParam) for r in p.regs())
    arrays = {p.name for p in prog.params if isinstance(p, ArrayParam)}

    def use(x, where):
        if isinstance(x, Reg) and x not in defined:
            raise TileCompilerError(f"thread IR: register {x} read before it is assigned ({where})")

    def walk(stmts):
        for s in stmts:
            if isinstance(s, Op):
                if OPS.get(s.op) != len(s.args):
                    raise TileCompilerError(f"thread IR: bad op {s.op} with {len(s.args)} operands")
                for a in s.args:
                    use(a, s.op)
                defined.add(s.dst)
            elif isinstance(s, Load):
                if s.array not in arrays:
                    raise TileCompilerError(f"thread IR: load from unknown array {s.array}")
                use(s.offset, "load"), use(s.mask, "load"), use(s.pad, "load")
                defined.update(s.dsts)
            elif isinstance(s, (Store, Atomic)):
                if s.array not in arrays:
                    raise TileCompilerError(f"thread IR: store to unknown array {s.array}")
                for v in (s.offset, s.mask, *(s.values if isinstance(s, Store) else (s.value,))):
                    use(v, "store")
            elif isinstance(s, SharedLoad):
                use(s.index, "shared load")
                defined.add(s.dst)
            elif isinstance(s, SharedStore):
                use(s.index, "shared store"), use(s.value, "shared store"), use(s.mask, "shared store")
            elif isinstance(s, Shuffle):
                use(s.src, "shuffle")
                defined.add(s.dst)
            elif isinstance(s, If):
                use(s.cond, "if")
                walk(s.then)
                walk(s.orelse)
            elif isinstance(s, Loop):
                for x in (s.start, s.stop, s.step, *s.inits):
                    use(x, "loop")
                defined.add(s.index)
                defined.update(s.params)
                walk(s.body)
                for r in s.results:
                    use(r, "loop result")

    walk(prog.body)
