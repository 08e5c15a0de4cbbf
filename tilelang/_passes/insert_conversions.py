"""Layout conversions, made explicit: after assignment, wherever an equation needs an
input in a layout other than the one it has (``wants`` rules, in assign_layouts.py), the
input is either

- **renamed**, when the same threads hold the same elements in both (``same_threads``):
  nothing to insert, the lowering picks register slots;
- **rebuilt** in the wanted layout, when it is cheap to compute anywhere: a ``full``, an
  ``iota``, a ``broadcast`` of a value already held the right way, a small load of an array
  the kernel never writes (a row statistic), or elementwise ops and reshapes of those (an
  ``arange`` mask, a broadcast statistic): the producing equations are cloned with the new
  layout;
- **converted** by a ``convert_layout`` equation (through shared memory in the lowering),
  one per value and layout, reused by every later consumer in scope.

Both happen in the block that defines the value: a loop converts what it reads but does not
change once, before it, not in every iteration.

Every conversion left is an equation of the ``layouts`` stage of explain, with its
layouts beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .._ir.core import Block, Eqn, Program, Var, sub_blocks
from .._ir.primitives import ELEMENTWISE, convert_layout
from .._lower.layout import Layout, same_threads
from .assign_layouts import is_tile, wants

_REBUILT = {"full", "iota", "broadcast", "reshape", *ELEMENTWISE}
_DEPTH = 4  # equations cloned at most per rebuilt value, down any path
_RELOADED = 1024  # elements at most of a vector load repeated in another layout


@dataclass
class _Scope:
    """One block being rewritten: its equations so far, the values it defines and the
    conversions made in it (reusable by every later consumer inside it)."""

    eqns: list = field(default_factory=list)
    defined: set = field(default_factory=set)
    made: dict = field(default_factory=dict)  # (Var, lane bits, warp bits) -> the value in that layout


class _Converter:
    def __init__(self, layouts: dict, written: set):
        self.layouts = layouts
        self.written = written  # arrays some equation writes: their loads stay where they are
        self.producers: dict = {}  # Var -> its equation, for every value in scope
        self.scopes: list[_Scope] = []  # the blocks open, outermost first

    def block(self, block: Block, results_want=None):
        scope = _Scope(defined=set(block.params))
        self.scopes.append(scope)
        for eqn in block.eqns:
            if eqn.prim.name == "range_loop":
                self.loop(eqn)
            else:
                eqn.inputs = tuple(self.provide(x, wants(self.layouts, eqn, i)) for i, x in enumerate(eqn.inputs))
            scope.eqns.append(eqn)
            for out in eqn.outputs:
                self.producers[out] = eqn
                scope.defined.add(out)
        if results_want:
            block.results = [self.provide(x, want) for x, want in zip(block.results, results_want)]
        block.eqns = self.scopes.pop().eqns

    def loop(self, eqn: Eqn):
        body = eqn.params["body"]
        carried = body.params[1:]
        want = [self.layouts.get(p) for p in carried]
        eqn.inputs = eqn.inputs[:3] + tuple(self.provide(x, w) for x, w in zip(eqn.inputs[3:], want))
        self.block(body, want)

    def provide(self, x, want: Layout | None):
        """``x`` in a layout the same threads hold as ``want``: made in the block that defines
        ``x`` (a value a loop reads but does not change is converted once, before it)."""
        if want is None or not is_tile(x) or same_threads(self.layouts[x], want):
            return x
        scope, key = self.scope_of(x), _key(x, want)
        if key not in scope.made:
            scope.made[key] = self.rebuild(x, want, _DEPTH, scope) or self.convert(x, want, scope)
        return scope.made[key]

    def scope_of(self, x: Var) -> _Scope:
        """The innermost open block that defines ``x`` (the outermost for parameters)."""
        return next((s for s in reversed(self.scopes) if x in s.defined), self.scopes[0])

    def rebuild(self, x: Var, want: Layout, depth: int, scope: _Scope):
        """``x`` recomputed in ``want`` by clones of its producing equations (appended to
        ``scope``), or None when that would take more than ``depth`` equations down a path or
        reach an expensive one."""
        eqn = self.producers.get(x)
        if eqn is None or depth == 0 or not (eqn.prim.name in _REBUILT or self.reloadable(eqn)):
            return None
        out, mark, made = Var(x.type, x.hint), len(scope.eqns), dict(scope.made)
        clone = Eqn(eqn.prim, eqn.inputs, (out,), eqn.params, eqn.loc)
        self.layouts[out] = want
        inputs = []
        for i, a in enumerate(eqn.inputs):
            need = wants(self.layouts, clone, i)
            if need is not None and not same_threads(self.layouts[a], need):
                inner, key = self.scope_of(a), _key(a, need)
                source, a = a, inner.made.get(key) or self.rebuild(a, need, depth - 1, inner)
                if a is None and inner is not scope:  # made before the loop that reads it, once
                    a = self.convert(source, need, inner)
                if a is None:  # not cheap after all: drop the clones made here on the way
                    del scope.eqns[mark:]
                    scope.made = made
                    return None
                inner.made[key] = a
            inputs.append(a)
        clone.inputs = tuple(inputs)
        scope.eqns.append(clone)
        scope.defined.add(out)
        self.producers[out] = clone
        return out

    def reloadable(self, eqn: Eqn) -> bool:
        """A load of a vector (one axis longer than 1, at most ``_RELOADED`` elements: a row
        statistic) from an array nothing writes: loading it again in another layout (from L1,
        lanes that share an element sharing the access) beats a shared-memory round trip."""
        shape = eqn.outputs[0].type.shape
        vector = sum(n > 1 for n in shape) <= 1 and eqn.outputs[0].type.size <= _RELOADED
        return eqn.prim.name == "load" and vector and eqn.inputs[0] not in self.written

    def convert(self, x: Var, want: Layout, scope: _Scope) -> Var:
        out = Var(x.type, x.hint)
        self.layouts[out] = want
        scope.eqns.append(Eqn(convert_layout, (x,), (out,), {}, self.producers[x].loc if x in self.producers else None))
        scope.defined.add(out)
        self.producers[out] = scope.eqns[-1]
        return out


def _key(x: Var, layout: Layout):
    """What makes ``x`` in ``layout`` reusable: the same threads (slot order aside)."""
    return x, layout.lane, layout.warp


def insert_conversions(program: Program, layouts: dict) -> Program:
    """``program`` with each layout mismatch renamed, rebuilt or converted (``layouts`` gains
    the new values' layouts)."""
    _Converter(layouts, _written(program.body)).block(program.body)
    return program


def _written(block: Block) -> set:
    """The arrays (parameters) some equation of ``block``, or of a body in it, writes."""
    arrays = set()
    for eqn in block.eqns:
        if eqn.prim.effect == "write":
            arrays.add(eqn.inputs[0])
        for sub in sub_blocks(eqn):
            arrays |= _written(sub)
    return arrays
