"""Common subexpressions of the thread program, computed once.

The lowering asks for the same value many times over (a coordinate, a mask, an offset
for each access that needs it); every duplicate is a statement numba must compile. An
``Op`` whose operation, operands and attribute match an earlier one in scope is dropped
and its register renamed to the earlier one; a register array (a value per slot: index
arithmetic, mostly) is only shared until the next memory access or barrier, since holding
a tile's worth of offsets and masks across a kernel costs more registers than recomputing
them (a softmax went from 55 to 72 registers). Ops are pure (thread and block ids
included), registers are assigned once (loop-carried ones are assigned by their loop
only), and memory reads, shuffles and other statements are never merged. Scopes follow
the structure: a value computed inside a ``Loop`` body is not available after it (a
loop's operands change per iteration).
"""

from __future__ import annotations

from .._lower.thread_ir import Imm, Loop, Op, ThreadProgram, replace_uses


def eliminate_common_subexpressions(program: ThreadProgram) -> ThreadProgram:
    program.body = _block(program.body, {}, {})
    return program


def _block(stmts: list, available: dict, rename: dict) -> list:
    """``stmts`` without duplicates of ``available`` Ops or of each other (``rename``: dropped
    register → the one that holds its value, shared by every scope)."""
    available = dict(available)
    out = []
    for s in stmts:
        if isinstance(s, Loop):
            s = replace_uses(s, rename)  # (results too: they are read where the body ends)
            s.body = _block(s.body, available, rename)
            s = replace_uses(s, rename)
        else:
            s = replace_uses(s, rename)
        if isinstance(s, Op):
            key = (s.op, tuple(map(_operand_key, s.args)), s.attr, s.dst.dtype, s.dst.slots)
            if key in available:
                rename[s.dst] = available[key]
                continue
            available[key] = s.dst
        else:  # past a memory access, register arrays are recomputed (cheap) rather than held (registers)
            available = {k: r for k, r in available.items() if r.slots == 1}
        out.append(s)
    return out


def _operand_key(x):
    """Immediates by their exact value: 0.0 and -0.0 are equal Python floats, not equal operands."""
    return ("imm", repr(x.value), x.dtype) if isinstance(x, Imm) else x
