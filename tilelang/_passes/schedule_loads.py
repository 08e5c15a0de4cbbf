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

First, a small load (at most ``HOISTED_BYTES`` a thread) from an array the kernel never
writes is hoisted, with the ops that compute its address and mask, above what it does not
depend on: the loads, reductions, shuffles and barriers before it (no loop is crossed but the
short folds of reductions: values held through one take its registers). A cross-entropy's
target index then goes out with its row, not after the row's reductions. Nothing writes such
an array while the kernel runs (array arguments do not overlap, docs/language.md), so the
load reads the same values earlier. Larger loads stay where they are: a norm's weight and
bias hoisted above its row's reductions held 16-64 bytes a thread through them, registers
that cost blocks per SM. H200, benchmarks/run.py, one run each (2026-12-05), GB/s, larger
loads hoisted vs not: layernorm 16384x4096 bf16 3539 vs 3814 (Triton 3742), 4096x4096 f32
3484 vs 3548 (3507), 16384x8192 f32 3972 vs 4106 (4048), rmsnorm 4096x8192 bf16 3501 vs 3554
(3605); rows of 4095 bf16 2180 vs 2134 (1617); cross-entropy (its 8-byte target) 4228 hoisted,
3741 not. (On the H100 hoisting the weights was ~1% faster.)
"""

from __future__ import annotations

from .._lower.thread_ir import (
    Atomic,
    Imm,
    Load,
    Loop,
    Op,
    Reg,
    SharedLoad,
    Store,
    ThreadProgram,
    registers,
    walk_statements,
)

HOISTED_BYTES = 16  # (a thread's share of a load hoisted above the reductions before it)


def schedule_loads(program: ThreadProgram) -> ThreadProgram:
    written = {s.array for s in walk_statements(program.body) if isinstance(s, (Store, Atomic))}
    if program.num_threads < 512:  # (at 512 the held loads cost blocks per SM: norms 1-27% slower on the H100)
        program.body = _hoisted(program.body, written)
    program.body = _schedule(program.body)
    return program


def _hoisted(stmts: list, written: set) -> list:
    """``stmts`` with each small load of an array not in ``written`` moved up, with the ops it reads
    (directly or through others), to just after the last statement of another kind that
    defines one of their registers or the last long loop, whichever is later: above the
    loads before it too."""
    for s in stmts:
        if isinstance(s, Loop):
            s.body = _hoisted(s.body, written)
    for load in [s for s in stmts if isinstance(s, Load) and s.array not in written and _small(s)]:
        p = stmts.index(load)
        need, members = {r for r in registers(load, load.USES) if isinstance(r, Reg)}, {p}
        for i in range(p - 1, -1, -1):
            s = stmts[i]
            if isinstance(s, Op) and s.dst in need:
                members.add(i)
                need |= {r for r in s.args if isinstance(r, Reg)}
        fixed = (i for i in range(p) if i not in members and (_long(stmts[i]) or need & _defs(stmts[i])))
        floor = 1 + max(fixed, default=-1)
        if all(isinstance(s, (Op, Load)) for s in stmts[floor:p]):
            continue  # (nothing to overlap: the later scheduling orders these)
        moved = [i for i in sorted(members) if i >= floor]
        stmts = (
            stmts[:floor]
            + [stmts[i] for i in moved]
            + [s for i, s in enumerate(stmts[floor:], floor) if i not in members]
        )
    return stmts


def _small(load: Load) -> bool:
    """Whether ``load`` moves at most ``HOISTED_BYTES`` a thread."""
    return load.dst.slots * load.dst.dtype.itemsize <= HOISTED_BYTES


def _long(s) -> bool:
    """A loop a hoisted load's values would be held through: one with a runtime trip count
    or memory accesses of its own (a K loop), not a short fold of a reduction's partials."""
    if not isinstance(s, Loop):
        return False
    constant = all(isinstance(x, Imm) for x in (s.start, s.stop, s.step))
    return not constant or any(not isinstance(t, (Op, SharedLoad)) for t in walk_statements(s.body))


def _defs(s) -> set:
    return {r for r in registers(s, s.DEFS) if isinstance(r, Reg)}


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
