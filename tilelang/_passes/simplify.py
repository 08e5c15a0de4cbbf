"""Simplification that never changes results: constant folding, common subexpressions,
identity operations, dead code.

- Folding evaluates pure equations whose inputs are all literals and whose result is a
  scalar, with the primitive's own interpreter rule (so folding and running agree).
- Common subexpressions: pure equations with the same primitive, inputs and params are
  computed once. Memory reads are never merged (a store may sit between them).
- Identities: a convert to the same type, a reshape or broadcast to the same shape.
- Dead code: pure equations and reads whose results are unused are dropped; stores,
  atomics and loops containing them stay.
- Transposes move after the dtype conversions they feed (``p.T.astype(f16)`` becomes
  ``p.astype(f16).T``): a transpose whose only use is a dot operand is free (the dot stores
  the tile transposed), one in front of a conversion moves the tile between threads.
"""

from __future__ import annotations

import numpy as np

from .._ir.core import Block, Literal, Program, TileType, Var, sub_blocks, uses


def simplify(program: Program) -> Program:
    _rewrite(program.body, {})
    _eliminate_dead(program.body)
    _sink_transposes(program.body, uses(program.body))
    return program


def drop_unused(program: Program) -> Program:
    """Only the dead code of :func:`simplify` dropped: what debug mode's checks are added to
    (an unused load is not checked, as it does not run) before folding would hide lines."""
    _eliminate_dead(program.body)
    return program


def _atom_key(a):
    if isinstance(a, Literal):
        return ("lit", a.type, a.value.tobytes() if hasattr(a.value, "tobytes") else a.value)
    return ("var", id(a))


def _params_key(params):
    return tuple((k, v if not isinstance(v, Block) else id(v)) for k, v in sorted(params.items()))


def _rewrite(block: Block, env: dict, seen: dict | None = None):
    """Fold, merge and drop identities in ``block``; ``env`` maps replaced vars to atoms."""
    seen = dict(seen or {})
    kept = []
    for eqn in block.eqns:
        eqn.inputs = tuple(env.get(a, a) if isinstance(a, Var) else a for a in eqn.inputs)
        for sub in sub_blocks(eqn):
            _rewrite(sub, env, seen)
        if eqn.prim.effect is None and not sub_blocks(eqn):
            replacement = _identity(eqn) or _fold(eqn)
            if replacement is not None:
                env[eqn.outputs[0]] = replacement
                continue
            key = (eqn.prim.name, tuple(_atom_key(a) for a in eqn.inputs), _params_key(eqn.params))
            if key in seen:
                for old, new in zip(eqn.outputs, seen[key]):
                    env[old] = new
                continue
            seen[key] = eqn.outputs
        kept.append(eqn)
    block.eqns = kept
    block.results = [env.get(a, a) if isinstance(a, Var) else a for a in block.results]


def _identity(eqn):
    if eqn.prim.name not in ("convert", "reshape", "broadcast") or len(eqn.inputs) != 1:
        return None  # (other one-input primitives may take an array, which has no shape)
    (x,), out = eqn.inputs, eqn.outputs[0].type
    same = x.type.shape == out.shape and x.type.dtype is out.dtype  # weakness aside
    return x if same else None


def _fold(eqn):
    if not eqn.inputs or not all(isinstance(a, Literal) for a in eqn.inputs):
        return None
    if len(eqn.outputs) != 1 or eqn.outputs[0].type.shape != ():
        return None
    values = [np.asarray(a.value) for a in eqn.inputs]
    (result,) = eqn.prim.rule("interpret")(None, *values, **eqn.params)
    return Literal(eqn.outputs[0].type.dtype.cast(result)[()], eqn.outputs[0].type)


def _eliminate_dead(block: Block, live: set | None = None) -> bool:
    """Drop unused pure equations; returns whether the block has side effects."""
    live = live if live is not None else set()
    live.update(a for a in block.results if isinstance(a, Var))
    kept, effects = [], False
    for eqn in reversed(block.eqns):
        body_effects = any(_eliminate_dead(sub, set(live)) for sub in sub_blocks(eqn))
        lasting = eqn.prim.effect in ("write", "print") or body_effects
        if not (lasting or any(o in live for o in eqn.outputs)):
            continue
        effects |= lasting
        kept.append(eqn)
        live.update(a for a in eqn.inputs if isinstance(a, Var))
        for sub in sub_blocks(eqn):
            live.update(_free_vars(sub))
    block.eqns = kept[::-1]
    return effects


def _sink_transposes(block: Block, used: dict):
    """``z = convert(transpose(x))``, the transpose used once, as ``transpose(convert(x))``:
    the two equations swap primitives in place (the convert's result gets x's shape)."""
    made = {}  # the transpose's result -> its equation
    for i, eqn in enumerate(block.eqns):
        for sub in sub_blocks(eqn):
            _sink_transposes(sub, used)
        if eqn.prim.name == "transpose" and len(used.get(eqn.outputs[0], [])) == 1:
            made[eqn.outputs[0]] = i
        elif eqn.prim.name == "convert" and eqn.inputs[0] in made:
            t = block.eqns[made.pop(eqn.inputs[0])]
            (x,), z = t.inputs, eqn.outputs[0]
            converted = Var(TileType(x.type.shape, z.type.dtype), z.hint)
            t.prim, t.inputs, t.outputs, t.params, eqn.prim, eqn.inputs, eqn.params = (
                eqn.prim, (x,), (converted,), eqn.params, t.prim, (converted,), t.params
            )  # fmt: skip


def _free_vars(block: Block) -> set:
    used, defined = set(), set(block.params)
    for eqn in block.eqns:
        used.update(a for a in eqn.inputs if isinstance(a, Var))
        for sub in sub_blocks(eqn):
            used |= _free_vars(sub)
        defined.update(eqn.outputs)
    used.update(a for a in block.results if isinstance(a, Var))
    return used - defined
