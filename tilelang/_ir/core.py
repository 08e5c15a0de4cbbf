"""The tile IR: typed SSA equations over tiles, in structured blocks.

One equation type serves every operation (as JAX's ``JaxprEqn``): a primitive, input
atoms, output variables, static params and the user's source location. A loop is an
equation whose params hold its body block. Variables are identified by object identity;
names are given only when a program is printed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..dtypes import DType
from ..errors import SourceLoc, TileCompilerError


@dataclass(frozen=True)
class TileType:
    """A tile: a static shape and an element dtype. 0-d tiles are scalars.

    ``weak`` marks a scalar whose dtype yields to the other operand's (Python scalars and
    runtime scalar arguments), so ``x * 2.0`` keeps ``x``'s dtype.
    """

    shape: tuple[int, ...]
    dtype: DType
    weak: bool = False

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def strong(self) -> TileType:
        return TileType(self.shape, self.dtype) if self.weak else self

    def __str__(self):
        return f"{self.dtype.short}[{','.join(map(str, self.shape))}]" + ("~" if self.weak else "")


@dataclass(frozen=True)
class ArrayType:
    """A kernel array argument: dtype, rank and layout facts; its shape and strides are runtime values."""

    dtype: DType
    ndim: int
    unit_stride: bool = True  # the last dimension's elements are adjacent (vector accesses)

    def __str__(self):
        return f"{self.dtype.short}[{','.join('?' * self.ndim)}]*" + ("" if self.unit_stride else "strided")


class Var:
    """An SSA value. ``hint`` is the user's variable name where known (for printing)."""

    __slots__ = ("type", "hint")

    def __init__(self, type, hint: str | None = None):
        self.type = type
        self.hint = hint

    def __repr__(self):
        return f"Var({self.type})"


class Literal:
    """A constant scalar used directly as an input."""

    __slots__ = ("value", "type")

    def __init__(self, value, type: TileType):
        self.value = value
        self.type = type

    def __repr__(self):
        return f"Literal({self.value!r}:{self.type})"


Atom = Var | Literal


@dataclass
class Eqn:
    prim: Primitive
    inputs: tuple
    outputs: tuple
    params: dict
    loc: SourceLoc | None = None


@dataclass
class Block:
    """A sequence of equations with parameters and results (a loop body, a kernel)."""

    params: list
    eqns: list = field(default_factory=list)
    results: list = field(default_factory=list)


@dataclass(eq=False)
class Combine:
    """The traced ``combine_fn`` of a ``tl.reduce`` or ``tl.associative_scan``: a block whose
    parameters are two groups of 0-d values (the left operand's, then the right's) and whose
    results are one group, computed by elementwise equations. An equation's param, not a
    sub-block: no pass lays it out or rewrites it; the interpreter runs it on arrays and the
    lowering on register values. ``commutes``: its results are the same expressions with
    the two groups swapped (a reduction may then combine in any order)."""

    body: Block
    commutes: bool = False


@dataclass
class Program:
    """A traced kernel: its body block (params = the runtime arguments, in order)."""

    name: str
    arg_names: list
    body: Block
    constants: dict


class Primitive:
    """An operation of the tile IR. Its rules live in ``rules`` keyed by stage name.

    ``effect`` is None for pure operations, ``"read"`` for memory reads (may be dropped
    when unused, never merged), ``"write"`` for stores and atomics (always kept),
    ``"print"`` for ``tl.device_print`` (always kept, no memory access) and ``"sync"`` for
    the block barrier the order_memory pass inserts (after simplification).
    """

    def __init__(self, name: str, effect: str | None = None, multiple_results: bool = False):
        self.name = name
        self.effect = effect
        self.multiple_results = multiple_results
        self.rules: dict[str, Callable] = {}

    def rule(self, stage: str) -> Callable:
        try:
            return self.rules[stage]
        except KeyError:
            raise TileCompilerError(f"primitive '{self.name}' has no {stage} rule") from None

    def __repr__(self):
        return self.name


PRIMITIVES: dict[str, Primitive] = {}


def primitive(name: str, **kw: Any) -> Primitive:
    prim = Primitive(name, **kw)
    PRIMITIVES[name] = prim
    return prim


def sub_blocks(eqn: Eqn):
    return [v for v in eqn.params.values() if isinstance(v, Block)]


def nested_blocks(block: Block):
    """``block`` and every block nested in it (loop bodies, in theirs), outermost first."""
    yield block
    for eqn in block.eqns:
        for sub in sub_blocks(eqn):
            yield from nested_blocks(sub)


def copied(block: Block) -> Block:
    """``block`` with equations and lists of its own, down every body (the values shared): what
    a pass rewrites in place (insert_conversions, order_memory) leaves the original as it was."""

    def eqn(e: Eqn) -> Eqn:
        return Eqn(
            e.prim,
            e.inputs,
            e.outputs,
            {k: copied(v) if isinstance(v, Block) else v for k, v in e.params.items()},
            e.loc,
        )

    return Block(list(block.params), [eqn(e) for e in block.eqns], list(block.results))


def tile_outputs(block: Block):
    """``(eqn, var)`` for every tile value an equation of ``block`` (or of a body in it) defines."""
    for eqn in block.eqns:
        for out in eqn.outputs:
            if isinstance(out.type, TileType):
                yield eqn, out
        for sub in sub_blocks(eqn):
            yield from tile_outputs(sub)


def array_accesses(program: Program) -> tuple[set, set]:
    """Names of the array arguments the kernel reads (loads, gathers) and writes (stores,
    scatters, atomics)."""
    names = dict(zip(program.body.params, program.arg_names))
    reads, writes = set(), set()

    def walk(block: Block):
        for eqn in block.eqns:
            if eqn.prim.effect == "read":
                reads.add(names[eqn.inputs[0]])
            elif eqn.prim.effect == "write":
                writes.add(names[eqn.inputs[0]])
            for sub in sub_blocks(eqn):
                walk(sub)

    walk(program.body)
    return reads, writes


def uses(block: Block) -> dict:
    """Var -> the equations of ``block`` (nested blocks included) that read it; a block's
    results count as a use by None."""
    found = {}

    def walk(b):
        for eqn in b.eqns:
            for x in eqn.inputs:
                if isinstance(x, Var):
                    found.setdefault(x, []).append(eqn)
            for sub in sub_blocks(eqn):
                walk(sub)
        for x in b.results:
            if isinstance(x, Var):
                found.setdefault(x, []).append(None)

    walk(block)
    return found
