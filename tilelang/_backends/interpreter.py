"""The reference semantics: run the tile IR with NumPy, one block at a time.

Each primitive's ``interpret`` rule (in ``_ir/primitives.py``) computes on NumPy arrays
of the declared dtypes; 16-bit floats are computed in float32 and rounded once per
operation, integers wrap. Blocks run in row-major order of their ids.
"""

from __future__ import annotations

import itertools
from collections import ChainMap

import numpy as np

from .._ir.core import Block, Literal, Program
from ..errors import TileError


class _BlockContext:
    """What interpret rules may ask of the running block, and the values it has computed:
    one per launch (launches from several threads must not share them)."""

    def __init__(self, grid):
        self.grid = grid
        self.block = (0, 0, 0)
        self.env = ChainMap()  # a loop body sees the values of the blocks around it

    def run_block(self, block: Block, values):
        outer = self.env
        env = self.env = outer.new_child(dict(zip(block.params, values)))

        def read(a):
            return np.asarray(a.value) if isinstance(a, Literal) else env[a]

        try:
            for eqn in block.eqns:
                try:
                    outs = eqn.prim.rule("interpret")(self, *(read(a) for a in eqn.inputs), **eqn.params)
                except TileError as err:  # a runtime error (a zero loop step) points at its operation
                    err.loc = err.loc or eqn.loc
                    raise
                env.update(zip(eqn.outputs, outs))
            return [read(r) for r in block.results]
        finally:
            self.env = outer


class Interpreter:
    def __init__(self, program: Program):
        self.program = program

    def __call__(self, grid, args):
        ctx = _BlockContext(tuple(grid) + (1,) * (3 - len(grid)))
        with np.errstate(all="ignore"):
            for z, y, x in itertools.product(*(range(g) for g in reversed(ctx.grid))):
                ctx.block = (x, y, z)
                ctx.run_block(self.program.body, args)
