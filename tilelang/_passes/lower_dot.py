"""Lowering of ``tl.dot`` (registered by ``_passes/lower_threads.py``).

The one strategy today, on CUDA cores: both operands staged in one shared buffer, then a
loop over ``k`` in which each thread reads the ``a`` value of each of its rows and the
``b`` value of each of its columns and multiply-adds them into its accumulator slots.
"""

from __future__ import annotations

from .._lower.lowering import b1, i32, output
from .._lower.thread_ir import Imm, Loop, SharedLoad, SharedStore, SlotMap, slots


def lower_dot(lw, eqn, a, b, acc):
    """Operands staged in shared memory; each thread accumulates its register block of
    the result over k, reading each operand value once per row or column it owns."""
    out = eqn.outputs[0]
    layout = lw.layout(out)
    (m, k), (_, n) = a.type.shape, b.type.shape
    init = lw.regs(acc, layout)  # before the operands are staged (a conversion would need its own buffer)
    buf = lw.buffer(a.type.dtype, m * k + k * n)
    for atom, shape, base in ((a, (m, k), 0), (b, (k, n), m * k)):
        src = lw.layout(atom)
        at = lw.op(i32, "add", lw.flat(lw.coords(src), shape), Imm(base, i32))
        lw.stmts.append(SharedStore(buf, at, lw.regs(atom, src), lw.land(lw.valid(src), lw.owner(src))))
    lw.barrier()

    # each thread's rows (and columns): the register bits of that dimension, as their own slots
    bases, picks = [], []
    for d, size, scale, base in ((0, m, k, 0), (1, n, 1, m * k)):
        bits = layout.dim_bits(d)
        own = [(i, b - bits.start) for i, b in enumerate(layout.reg) if b in bits]
        c = lw.op(i32, "add", lw.thread_coord(layout, d), lw.op(i32, "slot", attr=SlotMap.of_bits(
            [(j, pos) for j, (_, pos) in enumerate(own)]), n=1 << len(own)))  # fmt: skip
        c = lw.op(i32, "select", lw.op(b1, "lt", c, Imm(size, i32)), c, Imm(0, i32))
        bases.append(lw.op(i32, "add", lw.op(i32, "mul", c, Imm(scale, i32)), Imm(base, i32)))
        picks.append([(i, j) for j, (i, _) in enumerate(own)])
    dtype = out.type.dtype
    param = lw.reg(dtype, layout.num_regs, "acc")
    kk = lw.reg(i32, 1, "k")
    outer, lw.stmts = lw.stmts, []
    a_vals = _shared_at(lw, buf, a.type.dtype, dtype, lw.op(i32, "add", bases[0], kk))
    b_vals = _shared_at(lw, buf, a.type.dtype, dtype, lw.op(i32, "add", bases[1], lw.op(i32, "mul", kk, Imm(n, i32))))
    products = lw.op(dtype, "mul", *(lw.pick(v, p, layout.num_regs) for v, p in zip((a_vals, b_vals), picks)))
    result = lw.op(dtype, "add", param, products)
    body, lw.stmts = lw.stmts, outer
    lw.stmts.append(Loop(kk, Imm(0, i32), Imm(k, i32), Imm(1, i32), [param], [init], body, [result]))
    lw.release(buf)
    output(lw, eqn, param)


def _shared_at(lw, buf, dtype, acc_dtype, index):
    dst = lw.reg(dtype, slots(index), "v")
    lw.stmts.append(SharedLoad(dst, buf, index))
    return dst if dtype is acc_dtype else lw.op(acc_dtype, "convert", dst, attr=acc_dtype)
