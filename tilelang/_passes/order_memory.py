"""Program order for a block's accesses to one array: barriers where threads would race.

Tile semantics say a block's loads and stores happen in program order. The threads of a
block do not: the thread that stores an element is usually not the one that later loads
it, so a load after a store to the same array (or a store after a load, or two stores)
needs a block barrier between them, which also makes the earlier writes visible
(``__syncthreads`` orders global memory within a block). This pass inserts a ``barrier``
equation before each access that may touch an element another thread accessed since the
last barrier, and only there:

- accesses to other arrays never conflict (distinct array arguments are assumed not to
  overlap: docs/language.md);
- two reads never conflict, nor two atomic adds (maxima, ..., xors) whose old values go
  unread (they commute; a float add up to rounding); exchanges and compare-and-swaps do not;
- two window accesses (``load``/``store``) with the same offsets, the same tile shape and
  the same layout, one thread per element, touch each element from one thread only, which
  sees its own accesses in order; windows at constant offsets that do not intersect
  touch no common element.

Loop bodies are entered with the accesses of their own previous iteration pending, so an
access that conflicts with a later one of the same body is ordered too. Blocks are not
ordered with each other (as on the GPU), except through an atomic's ``sem``: a release
takes a barrier before it where any access is pending (every thread's accesses then come
before the releasing thread's), an acquire one after it (the acquiring thread's atomic
then comes before every thread's later accesses).
"""

from __future__ import annotations

from dataclasses import dataclass

from .._ir.core import Block, Eqn, Literal, Program, sub_blocks, uses
from .._ir.primitives import ACQUIRING, RELEASING, barrier


@dataclass(frozen=True)
class _Access:
    write: bool
    op: object  # the atomic's operation; "window" for load/store, None for gather/scatter (and a read atomic)
    starts: tuple  # a window's offsets, as comparable keys
    shape: tuple
    layout: object


def order_memory(program: Program, layouts: dict) -> Program:
    """Insert ``barrier`` equations into ``program`` where a block's accesses to one array
    could otherwise run out of program order across threads."""
    _order(program.body, {}, layouts, set(uses(program.body)))
    return program


def _order(block: Block, pending: dict, layouts: dict, used: set) -> None:
    """``pending``: array → accesses since the last barrier (updated in place); ``used``: the
    values something reads."""
    eqns = []
    for eqn in block.eqns:
        sem = eqn.params.get("sem", "relaxed") if eqn.prim.name == "atomic" else "relaxed"
        if eqn.prim.name == "range_loop":
            body = eqn.params["body"]
            inside = {array: set(accesses) for array, accesses in pending.items()}
            local = _defined(body)
            for array, access in _accesses(body, layouts, used):  # the previous iteration's
                inside.setdefault(array, set()).add(_earlier_iteration(access, local))
            _order(body, inside, layouts, used)
            for array, accesses in inside.items():  # (the body may run no iteration at all)
                pending.setdefault(array, set()).update(accesses)
        elif eqn.prim.effect in ("read", "write"):
            array, access = eqn.inputs[0], _describe(eqn, layouts, used)
            released = sem in RELEASING and any(pending.values())
            if released or any(_conflict(access, other) for other in pending.get(array, ())):
                eqns.append(Eqn(barrier, (), (), {}, eqn.loc))
                pending.clear()
            pending.setdefault(array, set()).add(access)
        eqns.append(eqn)
        if sem in ACQUIRING:
            eqns.append(Eqn(barrier, (), (), {}, eqn.loc))
            pending.clear()
    block.eqns = eqns


def _accesses(block: Block, layouts: dict, used: set):
    for eqn in block.eqns:
        if eqn.prim.effect in ("read", "write"):
            yield eqn.inputs[0], _describe(eqn, layouts, used)
        for sub in sub_blocks(eqn):
            yield from _accesses(sub, layouts, used)


def _defined(block: Block) -> set:
    """Ids of the variables ``block`` defines (its parameters included)."""
    out = {id(p) for p in block.params}
    for eqn in block.eqns:
        out.update(id(o) for o in eqn.outputs)
        for sub in sub_blocks(eqn):
            out |= _defined(sub)
    return out


def _earlier_iteration(access: _Access, local: set) -> _Access:
    """``access`` as the next iteration sees it: an offset computed in the body had another value."""
    starts = tuple(("earlier", k) if k[0] == "var" and k[1] in local else k for k in access.starts)
    return _Access(access.write, access.op, starts, access.shape, access.layout)


def _describe(eqn: Eqn, layouts: dict, used: set) -> _Access:
    name, write = eqn.prim.name, eqn.prim.effect == "write"
    if name == "load":
        tile, starts = eqn.outputs[0], eqn.inputs[1:-1]
    elif name == "store":
        tile, starts = eqn.inputs[1], eqn.inputs[2:]
    else:  # (an atomic whose old values are read is ordered as a scatter: they say what came first)
        returns = name == "atomic" and eqn.outputs[0] in used
        return _Access(write, None if returns else eqn.params.get("op"), (), (), None)
    keys = tuple(("lit", s.type, int(s.value)) if isinstance(s, Literal) else ("var", id(s)) for s in starts)
    return _Access(write, "window", keys, tile.type.shape, layouts.get(tile))


_COMMUTING = ("add", "max", "min", "and", "or", "xor")  # atomics of one of these operations


def _conflict(a: _Access, b: _Access) -> bool:
    if not (a.write or b.write):
        return False
    if a.op == b.op and a.op in _COMMUTING:
        return False
    if a.op != "window" or b.op != "window":
        return True
    if (a.starts, a.shape, a.layout) == (b.starts, b.shape, b.layout):
        return a.layout is None or bool(a.layout.replicated_bits())  # one thread per element: no conflict
    return not _disjoint(a, b)


def _disjoint(a: _Access, b: _Access) -> bool:
    """Whether two windows at constant offsets are apart along some dimension."""
    for (ka, *sa), (kb, *sb), na, nb in zip(a.starts, b.starts, a.shape, b.shape):
        if ka == kb == "lit" and (sa[1] + na <= sb[1] or sb[1] + nb <= sa[1]):
            return True
    return False
