"""Loads issued before their data is used: the work on loaded values waits for what needs it.

A GPU thread issues its instructions in order, and one that reads a register a load is
still filling waits for the data. A load followed by work on its data (16-bit values
widened to float32, say) and then by another load pays both latencies one after the
other: a bf16 layernorm loading its weight and bias ran at 2060 GB/s against 3207 without
the bias on the H200, the bias load waiting behind the weight's widening. This pass moves
each ``Op`` that depends (directly or through other such ops) on a global ``Load`` down
past later loads and the arithmetic between them, to just before the first statement that
reads it, and no further than the next statement of any other kind (a store, a barrier,
a shuffle, a loop): held longer, the values took registers (a row cumsum went from 128 to
254). Every statement list is scheduled on its own (a loop body too). Ops stay in their
original order among themselves and never move past a use of their results, so the
program computes the same values.
"""

from __future__ import annotations

from .._lower.thread_ir import Load, Loop, Op, ThreadProgram, registers


def schedule_loads(program: ThreadProgram) -> ThreadProgram:
    program.body = _schedule(program.body)
    return program


def _schedule(stmts: list) -> list:
    out, waiting, loaded = [], [], set()  # waiting: ops on loaded data not yet needed
    for s in stmts:
        if isinstance(s, Loop):
            s.body = _schedule(s.body)
        if isinstance(s, Op) and loaded & set(s.args):
            waiting.append(s)
            loaded.add(s.dst)
            continue
        _flush(waiting, set(registers(s, s.USES)) if isinstance(s, (Op, Load)) else None, out)
        out.append(s)
        if isinstance(s, Load):
            loaded.add(s.dst)
    _flush(waiting, None, out)
    return out


def _flush(waiting: list, needed, out: list):
    """Move the waiting ops ``needed`` (all when None), and those they read, to ``out``."""
    if needed is None:
        out.extend(waiting)
        waiting.clear()
        return
    take = set()
    for i in reversed(range(len(waiting))):
        if waiting[i].dst in needed:
            take.add(i)
            needed |= set(waiting[i].args)
    out.extend(op for i, op in enumerate(waiting) if i in take)
    waiting[:] = [op for i, op in enumerate(waiting) if i not in take]
