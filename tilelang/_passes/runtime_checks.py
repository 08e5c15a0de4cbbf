"""Checks made when a kernel runs, at its launch: a top-level ``tl.range`` whose step is a
kernel argument is refused when that step is 0, before anything runs, on every backend
(a GPU loop cannot raise; it would run no iterations).
"""

from __future__ import annotations

import numpy as np

from .._ir.core import ArrayType, Program
from ..errors import TileValueError

# ------------------------------------------------------------------ at launch


def zero_step_checks(program: Program) -> list:
    """``(argument name, conversions, loc)`` of each top-level loop whose step is a scalar
    argument, through the integer conversions tl.range applied to it."""
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


class Checked:
    """A runner with the launch checks around each launch. It has no fast path: the checks
    run in Python at every launch."""

    def __init__(self, run, zero_steps: list):
        self.run, self.zero_steps = run, zero_steps

    def __call__(self, grid, arguments: dict, infos: dict, stream=None):
        if 0 not in grid:  # an empty grid runs nothing, so nothing fails
            for name, chain, loc in self.zero_steps:
                value = np.asarray(arguments[name])
                with np.errstate(all="ignore"):
                    for d in chain:
                        value = value.astype(d.np)
                if value == 0:
                    raise TileValueError(f"tl.range: step must not be zero (argument `{name}` is {value})", loc)
        return self.run(grid, arguments, infos, stream)

    def fast_launch(self, arguments: dict, infos: dict):
        return None
