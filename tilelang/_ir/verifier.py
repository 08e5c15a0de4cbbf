"""Checks that a tile IR program is well formed; run after every pass in tests and debug mode.

Well formed: every variable is defined once before it is used (a loop body may use
variables of the blocks around it), every literal is a scalar of its type, every
equation's outputs have the types its primitive's type rule gives, and loop bodies take
and return what their equation carries.
"""

from __future__ import annotations

from ..errors import TileCompilerError, TileError
from .core import PRIMITIVES, Block, Literal, Program, TileType, Var


def _same(a, b) -> bool:
    if isinstance(a, TileType) and isinstance(b, TileType):
        return a.shape == b.shape and a.dtype is b.dtype
    return a == b


def verify(program: Program, stage: str = "") -> None:
    """Raise TileCompilerError naming the stage and the equation if ``program`` is malformed."""
    _verify_block(program.body, [set()], stage)


def _fail(stage, eqn, message):
    where = f" at {eqn.loc}" if eqn is not None and eqn.loc is not None else ""
    what = f" in '{eqn.prim.name}'" if eqn is not None else ""
    raise TileCompilerError(f"invalid tile IR after {stage or 'tracing'}{what}{where}: {message}")


def _verify_block(block: Block, scopes, stage):
    defined = set()
    scopes = scopes + [defined]

    def define(v, eqn):
        if not isinstance(v, Var):
            _fail(stage, eqn, f"{v!r} is not a variable")
        if any(v in s for s in scopes):
            _fail(stage, eqn, f"{v!r} is defined twice")
        defined.add(v)

    def check_use(a, eqn):
        if isinstance(a, Literal):
            if not isinstance(a.type, TileType) or a.type.shape != ():
                _fail(stage, eqn, f"literal {a!r} is not a scalar")
        elif not any(a in s for s in scopes):
            _fail(stage, eqn, f"{a!r} is used before it is defined")

    for p in block.params:
        define(p, None)
    for eqn in block.eqns:
        if PRIMITIVES.get(eqn.prim.name) is not eqn.prim:
            _fail(stage, eqn, "unknown primitive")
        for a in eqn.inputs:
            check_use(a, eqn)
        params = eqn.params
        try:
            expected = eqn.prim.rule("type")(*(a.type for a in eqn.inputs), **params)
        except TileCompilerError:
            raise
        except TileError as err:  # a user-facing type error here means a stage built a bad equation
            _fail(stage, eqn, f"the type rule rejects the inputs: {err.message}")
        if len(expected) != len(eqn.outputs) or not all(_same(e, o.type) for e, o in zip(expected, eqn.outputs)):
            got = ", ".join(str(o.type) for o in eqn.outputs)
            _fail(stage, eqn, f"outputs are ({got}) but the type rule gives ({', '.join(map(str, expected))})")
        for sub in params.values():
            if isinstance(sub, Block):
                _verify_block(sub, scopes, stage)
                _check_loop(eqn, sub, stage)
        for o in eqn.outputs:
            define(o, eqn)
    for r in block.results:
        check_use(r, None)


def _check_loop(eqn, body, stage):
    carried = eqn.inputs[3:]
    if len(body.params) != 1 + len(carried) or len(body.results) != len(carried):
        _fail(stage, eqn, "the body's parameters and results do not match the carried values")
    for init, param, result in zip(carried, body.params[1:], body.results):
        if not (_same(init.type, param.type) and _same(param.type, result.type)):
            _fail(stage, eqn, f"carried value {init.type} / {param.type} / {result.type} changes type")
