"""Layout assignment: for every tile value, which thread holds which elements.

Runs forward over the program. Loads, constants and transposes take the default
``blocked`` layout (coalesced, 16 bytes per thread where the tile allows); elementwise
results take their first tiled operand's layout (the lowering converts the others);
reductions take the ``sliced`` layout of their input; ``dot`` results a register-blocked
layout; reshapes that keep the padded numbering keep the layout. Loop-carried values take
the layout their body produces (iterated to a fixed point), so a loop does not convert
its carried values every iteration.
"""

from __future__ import annotations

from .._ir.core import Block, Program, TileType, Var, tile_outputs
from .._lower.layout import Layout, blocked, matmul_result, padded_size, reshaped, scalar_layout, sliced


def default_num_threads(program: Program) -> int:
    """Threads per block from the largest tile: about 32 elements per thread (independent
    loads in flight per thread, few warps to combine in reductions), at least 4 warps
    once a tile has 1024 elements, between 32 and 512. Measured on the H200: a 4096-wide
    softmax row is fastest with 128 threads, a 1024-element vector add with 128."""
    largest = max((padded_size(v.type.shape) for _, v in tile_outputs(program.body)), default=1)
    t = 32
    while t < 512 and t * 32 < largest:
        t *= 2
    return max(t, 128) if largest >= 1024 else t


class _Assigner:
    def __init__(self, num_threads):
        self.t = num_threads
        self.layouts: dict[Var, Layout] = {}

    def of(self, atom) -> Layout:
        if isinstance(atom, Var) and atom in self.layouts:
            return self.layouts[atom]
        return scalar_layout(self.t)

    def default(self, t: TileType) -> Layout:
        return blocked(t.shape, t.dtype.itemsize, self.t) if t.shape else scalar_layout(self.t)

    def block(self, block: Block):
        for p in block.params:
            if p not in self.layouts and isinstance(p.type, TileType):
                self.layouts[p] = self.default(p.type)
        for eqn in block.eqns:
            self.eqn(eqn)

    def eqn(self, eqn):
        name = eqn.prim.name
        if name == "range_loop":
            return self.loop(eqn)
        for out in eqn.outputs:
            self.layouts[out] = self.rule(name, eqn, out.type)

    def rule(self, name, eqn, out: TileType) -> Layout:
        if out.shape == ():
            return scalar_layout(self.t)
        tiled = [a for a in eqn.inputs if isinstance(a.type, TileType) and a.type.shape != ()]
        if name.startswith("reduce_") or name in ("argmax", "argmin"):
            return sliced(self.of(eqn.inputs[0]), eqn.params["axis"])
        if name == "reshape":
            return reshaped(self.of(eqn.inputs[0]), out.shape) or self.default(out)
        if name == "dot":
            return matmul_result(out.shape[0], out.shape[1], self.t)
        if name in ("load", "full", "iota", "transpose", "broadcast") or not tiled:
            return self.default(out)
        return self.of(tiled[0])

    def loop(self, eqn):
        body = eqn.params["body"]
        carried = list(zip(body.params[1:], eqn.inputs[3:], body.results))
        for param, init, _ in carried:
            self.layouts[param] = self.of(init)
        self.layouts[body.params[0]] = scalar_layout(self.t)
        for _ in range(4):  # carried layouts settle on what the body produces
            self.block(body)
            changed = False
            for param, _, result in carried:
                if self.of(result) != self.layouts[param] and self.of(result).shape == param.type.shape:
                    self.layouts[param] = self.of(result)
                    changed = True
            if not changed:
                break
        else:  # still moving (a long chain of carried values): keep these, and make the body agree
            self.block(body)
        for out, (param, _, _) in zip(eqn.outputs, carried):
            self.layouts[out] = self.layouts[param]


def assign_layouts(program: Program, num_threads: int | None = None) -> tuple[dict, int]:
    """Layouts for every tile value of ``program`` and the block's thread count."""
    t = num_threads or default_num_threads(program)
    assigner = _Assigner(t)
    assigner.block(program.body)
    return assigner.layouts, t
