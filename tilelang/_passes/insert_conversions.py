"""Layout conversions, made explicit: after assignment, wherever an equation needs an
input in a layout other than the one it has (``wants`` rules, in assign_layouts.py), the
input is either

- **renamed**, when the same threads hold the same elements in both (``same_threads``):
  nothing to insert, the lowering picks register slots;
- **rebuilt** in the wanted layout, when it is cheap to compute anywhere: a ``full``, an
  ``iota``, a ``broadcast`` of a value already held the right way, or elementwise ops and
  reshapes of those (an ``arange`` mask, a broadcast statistic): the producing equations
  are cloned with the new layout;
- **converted** by a ``convert_layout`` equation (through shared memory in the lowering),
  one per value and layout, reused by every later consumer in scope.

Every conversion left is an equation of the ``layouts`` stage of explain, with its
layouts beside it.
"""

from __future__ import annotations

from .._ir.core import Block, Eqn, Program, Var
from .._ir.primitives import ELEMENTWISE, convert_layout
from .._lower.layout import Layout, same_threads
from .assign_layouts import is_tile, wants

_REBUILT = {"full", "iota", "broadcast", "reshape", *ELEMENTWISE}
_DEPTH = 4  # equations cloned at most per rebuilt value, down any path


class _Converter:
    def __init__(self, layouts: dict):
        self.layouts = layouts
        self.producers: dict = {}  # Var -> its equation, for every value in scope
        self.made: dict = {}  # (Var, lane bits, warp bits) -> the value in that layout, in scope
        self.eqns: list = []  # the block being rewritten

    def block(self, block: Block, results_want=None):
        outer_eqns, outer_made = self.eqns, dict(self.made)
        self.eqns = []
        for eqn in block.eqns:
            if eqn.prim.name == "range_loop":
                self.loop(eqn)
            else:
                eqn.inputs = tuple(self.provide(x, wants(self.layouts, eqn, i)) for i, x in enumerate(eqn.inputs))
            self.eqns.append(eqn)
            for out in eqn.outputs:
                self.producers[out] = eqn
        if results_want:
            block.results = [self.provide(x, want) for x, want in zip(block.results, results_want)]
        block.eqns, self.eqns, self.made = self.eqns, outer_eqns, outer_made

    def loop(self, eqn: Eqn):
        body = eqn.params["body"]
        carried = body.params[1:]
        want = [self.layouts.get(p) for p in carried]
        eqn.inputs = eqn.inputs[:3] + tuple(self.provide(x, w) for x, w in zip(eqn.inputs[3:], want))
        self.block(body, want)

    def provide(self, x, want: Layout | None):
        """``x`` in a layout the same threads hold as ``want``."""
        if want is None or not is_tile(x) or same_threads(self.layouts[x], want):
            return x
        key = _key(x, want)
        if key not in self.made:
            self.made[key] = self.rebuild(x, want, _DEPTH) or self.convert(x, want)
        return self.made[key]

    def rebuild(self, x: Var, want: Layout, depth: int):
        """``x`` recomputed in ``want`` by clones of its producing equations, or None when
        that would take more than ``depth`` equations down a path or reach an expensive one."""
        eqn = self.producers.get(x)
        if eqn is None or eqn.prim.name not in _REBUILT or depth == 0:
            return None
        out, mark, made = Var(x.type, x.hint), len(self.eqns), dict(self.made)
        clone = Eqn(eqn.prim, eqn.inputs, (out,), eqn.params, eqn.loc)
        self.layouts[out] = want
        inputs = []
        for i, a in enumerate(eqn.inputs):
            need = wants(self.layouts, clone, i)
            if need is not None and not same_threads(self.layouts[a], need):
                key = _key(a, need)
                a = self.made.get(key) or self.rebuild(a, need, depth - 1)
                if a is None:  # not cheap after all: drop the clones made on the way
                    del self.eqns[mark:]
                    self.made = made
                    return None
                self.made[key] = a
            inputs.append(a)
        clone.inputs = tuple(inputs)
        self.eqns.append(clone)
        self.producers[out] = clone
        return out

    def convert(self, x: Var, want: Layout) -> Var:
        out = Var(x.type, x.hint)
        self.layouts[out] = want
        self.eqns.append(Eqn(convert_layout, (x,), (out,), {}, self.producers[x].loc if x in self.producers else None))
        self.producers[out] = self.eqns[-1]
        return out


def _key(x: Var, layout: Layout):
    """What makes ``x`` in ``layout`` reusable: the same threads (slot order aside)."""
    return x, layout.lane, layout.warp


def insert_conversions(program: Program, layouts: dict) -> Program:
    """``program`` with each layout mismatch renamed, rebuilt or converted (``layouts`` gains
    the new values' layouts)."""
    _Converter(layouts).block(program.body)
    return program
