"""Lowering rules of reductions, scans and histograms (registered by ``lower_threads``).

A reduction or scan combines along the index bits of its axis, each by where it lives in
the layout: a register bit inside the thread (slots picked in pairs), a lane bit by warp
shuffles, a warp bit through shared memory.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np

from .. import dtypes as D
from .._ir.core import Var
from .._lower.lowering import b1, i32, output
from .._lower.thread_ir import Imm, Loop, SharedLoad, SharedStore, Shuffle, SlotMap, slots

_COMBINE = {"reduce_sum": "add", "reduce_prod": "mul", "reduce_max": "maximum", "reduce_min": "minimum"}


def _identity(name, dtype):
    if name in ("reduce_sum",):
        return 0
    if name == "reduce_prod":
        return 1
    high = name in ("reduce_min", "argmin")
    if dtype.is_bool:
        return high
    if dtype.is_float:
        return D.highest(dtype) if high else -D.highest(dtype)
    info = np.iinfo(dtype.np)
    return int(info.max if high else info.min)


class _Reducer:
    """A builtin reduction's combine: (value) or (value, index) tuples; argmax/argmin keep the
    first index on ties and treat NaN as the extreme, as NumPy does. Phantom slots start
    as the identity."""

    in_order = False  # (its ops commute in rounded arithmetic too)

    def __init__(self, lw, name, dtype):
        self.lw, self.name, self.dtype = lw, name, dtype
        self.arg = name in ("argmax", "argmin")

    def start(self, xs, src, axis):
        item = (self.lw.regs(xs[0], src), self.lw.coord(src, axis)) if self.arg else (self.lw.regs(xs[0], src),)
        valid = self.lw.valid(src)
        return tuple(self.lw.op(a.dtype, "select", valid, a, ident) for a, ident in zip(item, self.identity()))

    def identity(self):
        value = Imm(_identity(self.name, self.dtype), self.dtype)
        return (value, Imm(2**31 - 1, i32)) if self.arg else (value,)

    def combine(self, a, b):
        lw = self.lw
        if not self.arg:
            return (lw.op(self.dtype, _COMBINE[self.name], a[0], b[0]),)
        (va, ia), (vb, ib) = a, b
        better = lw.op(b1, "gt" if self.name == "argmax" else "lt", vb, va)
        tie = lw.land(lw.op(b1, "eq", vb, va), lw.op(b1, "lt", ib, ia))
        take = lw.op(b1, "lor", better, tie)
        if self.dtype.is_float:
            nan_a, nan_b = lw.op(b1, "ne", va, va), lw.op(b1, "ne", vb, vb)
            both = lw.land(nan_a, nan_b)
            take = lw.op(
                b1,
                "select",
                both,
                lw.op(b1, "lt", ib, ia),
                lw.op(b1, "lor", nan_b, lw.land(_not(lw, nan_a), take)),
            )
        return (lw.op(self.dtype, "select", take, vb, va), lw.op(i32, "select", take, ib, ia))

    def results(self, partial):
        return [partial[-1 if self.arg else 0]]


class _Commuting(_Reducer):
    """A combine function that commutes (``Combine.commutes``), so the tree may take its
    operands in any order. It has no identity element: where the axis has phantom slots,
    a last component says whether a partial holds any real element, and a combine with an
    empty side keeps the other. Lanes combine in one order (``in_order``): a function that
    commutes in exact arithmetic may not in rounded (``s1*e1 + s2*e2`` contracts to an fma
    of either product), and every lane must hold the same bits of the result."""

    in_order = True

    def __init__(self, lw, combine, phantoms):
        self.lw, self.combine_fn, self.phantoms = lw, combine, phantoms

    def start(self, xs, src, axis):
        values = tuple(self.lw.regs(x, src) for x in xs)
        return (*values, self.lw.valid(src, dims=[axis])) if self.phantoms else values

    def identity(self):  # (the dtypes of the components)
        zeros = tuple(Imm(0, p.type.dtype) for p in self.combine_fn.body.results)
        return (*zeros, Imm(False, b1)) if self.phantoms else zeros

    def combine(self, a, b):
        lw = self.lw
        if not self.phantoms:
            return _applied(lw, self.combine_fn, a, b)
        (*a, real_a), (*b, real_b) = a, b
        both = _applied(lw, self.combine_fn, a, b)
        return (*_select(lw, real_b, _select(lw, real_a, both, b), a), lw.op(b1, "lor", real_a, real_b))

    def results(self, partial):
        return list(partial[: len(partial) - self.phantoms])


def lower_reduce(lw, eqn, *xs, axis, combine=None):
    """A tree inside each thread, butterfly shuffles across lanes, one round through shared
    memory across warps: for the builtin reductions and combine functions that commute."""
    src = lw.layout(xs[0])
    out_layout = lw.layout(eqn.outputs[0])
    if combine is None:
        red = _Reducer(lw, eqn.prim.name, xs[0].type.dtype)
    else:
        red = _Commuting(lw, combine, src.shape[axis] != src.padded[axis])
    bits = src.dim_bits(axis)
    where, total = lw.scan_totals.get((xs[0], axis, eqn.prim.name, src), (None, None))
    if where is lw.stmts and eqn.outputs[0].type.dtype == xs[0].type.dtype:
        return output(lw, eqn, total)  # a scan of x along axis, made in this statement list, has the totals
    partial = red.start(xs, src, axis)

    # 1. inside each thread: halve the slots along each register bit of the axis, a tree (a
    # loop folding them one by one compiles smaller, but its chain of dependent adds made a
    # sum 13% slower on the H200)
    reg = list(src.reg)
    while any(b in bits for b in reg):
        i = next(i for i, b in enumerate(reg) if b in bits)  # the lowest first: neighbours combine
        n = 1 << (len(reg) - 1)
        pairs = [(k, k) for k in range(i)] + [(k, k + 1) for k in range(i, len(reg) - 1)]
        partial = red.combine(*([lw.pick(a, pairs, n, const) for a in partial] for const in (0, 1 << i)))
        del reg[i]

    # 2. across lanes: butterfly shuffles over the lane bits of the axis
    lane_bits = [t for t, b in src.hardware() if b is not None and b in bits and t < 5]
    for t in lane_bits:
        others = tuple(from_lane(lw, a, 1 << t) for a in partial)
        if red.in_order:  # the lower lane's partial on the left in both lanes
            partial, others = _in_order(lw, tid_bit(lw, t), partial, others)
        partial = red.combine(partial, others)

    # 3. across warps: through shared memory, every thread combining all partials
    warp_bits = [t for t, b in src.hardware() if b is not None and b in bits and t >= 5]
    if warp_bits:
        groups, size = 1 << len(warp_bits), _padded_size(out_layout)
        bufs = [lw.buffer(a.dtype, groups * size) for a in red.identity()]
        group = _tid_bits(lw, warp_bits, 0)
        writer = lw.leader(sum(1 << t for t in src.replicated_bits() + lane_bits))
        index = _padded_flat(lw, out_layout)
        at = lw.op(i32, "add", lw.op(i32, "mul", group, Imm(size, i32)), index)
        for buf, a in zip(bufs, partial):
            lw.stmts.append(SharedStore(buf, at, a, writer))
        lw.barrier()

        n = max(slots(index), out_layout.num_regs)

        def gather(at):
            out = []
            for buf, a in zip(bufs, red.identity()):
                out.append(lw.reg(a.dtype, n, "w"))
                lw.stmts.append(SharedLoad(out[-1], buf, at))
            return tuple(out)

        def step(acc, g):
            return red.combine(acc, gather(lw.op(i32, "add", index, lw.op(i32, "mul", g, Imm(size, i32)))))

        partial = _folded(lw, gather(index), groups, n, step)
        lw.release(*bufs)
    lw.values.update(zip(eqn.outputs, red.results(partial)))


def _folded(lw, first, count, n, step):
    """``first`` combined by ``step(acc, j)`` for ``j`` in ``1..count-1``, over ``n`` slots: a
    loop of constant trip count, so the program does not grow with it (NVVM unrolls it)."""
    if count == 1:
        return tuple(first)
    j = lw.reg(i32, 1, "j")
    params = [lw.reg(a.dtype, n, "f") for a in first]
    outer, lw.stmts = lw.stmts, []
    results = step(tuple(params), j)
    body, lw.stmts = lw.stmts, outer
    lw.stmts.append(Loop(j, Imm(1, i32), Imm(count, i32), Imm(1, i32), params, list(first), body, list(results)))
    return tuple(params)


def _padded_size(layout):
    return int(np.prod(layout.padded)) if layout.shape else 1


def _padded_flat(lw, layout):
    """The padded row-major index of each slot (distinct for distinct elements)."""
    out, stride = Imm(0, i32), 1
    for d in reversed(range(len(layout.shape))):
        out = lw.op(i32, "add", out, lw.op(i32, "mul", lw.coord(layout, d), Imm(stride, i32)))
        stride *= layout.padded[d]
    return out


def lower_scan(lw, eqn, x, *, axis):
    layout = lw.layout(eqn.outputs[0])
    combine = "add" if eqn.prim.name == "cumsum" else "mul"
    dtype = x.type.dtype
    ((prefix,), (total,)) = _butterfly(
        lw, layout, axis, (lw.regs(x, layout),), lambda a, b: (lw.op(dtype, combine, a[0], b[0]),), ordered=False
    )
    if layout.shape[axis] == layout.padded[axis] and eqn.outputs[0].type.dtype == dtype:
        # no padding along the axis: the totals are the whole axis's, which a reduction of x
        # along it in the same statement list reads instead of reducing again
        reduction = {"add": "reduce_sum", "mul": "reduce_prod"}[combine]
        lw.scan_totals[(x, axis, reduction, layout)] = (lw.stmts, total)
    output(lw, eqn, prefix)


def lower_combined_scan(lw, eqn, *xs, axis, combine, reverse):
    layout = lw.layout(eqn.outputs[0])
    values = tuple(lw.regs(x, layout) for x in xs)
    scan, _ = _butterfly(lw, layout, axis, values, functools.partial(_applied, lw, combine), reverse=reverse)
    lw.values.update(zip(eqn.outputs, scan))


def lower_combined_reduce(lw, eqn, *xs, axis, combine):
    """A combine function that commutes reduces as the builtins do; any other takes the
    scan's totals (they leave the padding out), which hold the non-axis register slots in
    the reduced layout's order (the scan itself is dead code)."""
    if combine.commutes:
        return lower_reduce(lw, eqn, *xs, axis=axis, combine=combine)
    layout = lw.layout(xs[0])
    values = tuple(lw.regs(x, layout) for x in xs)
    _, total = _butterfly(lw, layout, axis, values, functools.partial(_applied, lw, combine), exact=True)
    lw.values.update(zip(eqn.outputs, total))


def _applied(lw, combine, left, right):
    """``combine`` (a traced combine function) on the tuples of operands ``left`` and ``right``:
    its elementwise equations, each an op on all their slots."""
    env = dict(zip(combine.body.params, (*left, *right)))

    def read(a):
        return env[a] if isinstance(a, Var) else lw.scalar(a)

    for eqn in combine.body.eqns:
        args, out = [read(a) for a in eqn.inputs], eqn.outputs[0]
        if eqn.prim.name == "full":  # (a 0-d constant)
            env[out] = args[0]
        else:
            env[out] = lw.elementwise(eqn.prim.name, out.type.dtype, args, eqn.params.get("dtype"))
    return tuple(read(r) for r in combine.body.results)


def _butterfly(lw, layout, axis, values, combine, *, ordered=True, reverse=False, exact=False):
    """An inclusive scan along ``axis`` of the tuple of operands ``values`` (``reverse``: of
    the flipped axis) by ``combine(left, right)`` on tuples, and the axis's totals: ``(scan,
    totals)``.

    A butterfly over the axis's index bits, lowest first: after bit ``b`` each element holds
    its scan inside its aligned run of ``2**(b+1)`` elements and the run's total. An element
    whose bit ``b`` is 1 takes the total of the run below it on its left (``reverse``, the
    scan of the flipped axis: one whose bit is 0 takes the run above's, on its left too).
    The partner run's total comes from another slot (a register bit), a warp shuffle (a lane
    bit) or shared memory (a warp bit); across lane and warp bits the runs taken gather into
    one prefix per held total, combined into each element once, before the next register bit
    or at the end (one combine an element, not one per bit); consecutive lane bits go at once,
    by a Kogge-Stone scan (``scan_lanes``). The totals drop each register bit once it is
    combined, so later steps work on fewer slots: they end up in the register slots of the
    other axes. ``ordered``: each thread puts the lower run on the left (the builtin sums and
    products commute, so they need not). A forward scan never takes padding (it sits
    past the end of the axis, above every real element); ``reverse`` and ``exact`` (totals
    without padding) skip the runs that hold padding only.
    """
    bits, n = layout.dim_bits(axis), layout.num_regs
    hardware = {b: t for t, b in layout.hardware() if b is not None}
    scan, total, held = values, values, list(layout.reg)  # ``total`` holds the register bits in ``held``
    padded = (exact or reverse) and layout.shape[axis] != layout.padded[axis]
    coord = lw.coord(layout, axis) if padded else None

    def held_slots(x, of, const=0):  # ``x`` (its slots: the register bits ``of``) in ``held``'s slots
        return lw.pick(x, [(j, of.index(h)) for j, h in enumerate(held)], 1 << len(held), const)

    def every_slot(x):  # the totals ``x`` in every slot of the layout
        return tuple(lw.pick(v, [(layout.reg.index(h), j) for j, h in enumerate(held)], n) for v in x)

    def fold_warps(group, total):
        """The consecutive warp bits ``group`` of the axis at once, as Triton's scan does: each
        group of warps' totals to shared memory, one barrier, and every thread folds the runs'
        totals in order: ``(prefix, has, totals)``, its prefix those of the runs below its own
        (``reverse``: above), in the held slots, where ``has``."""
        ts, low, count = [hardware[b] for b in group], bits.start, 1 << len(group)
        distinct, writer = _distinct_runs(lw, layout, low, group[-1], ts)
        size = 1 << (len(held) + len(distinct))

        run = lw.cached(("warp run", tuple(ts)), lambda: _tid_bits(lw, ts, 0))  # this thread's run
        inner = _run_index(lw, held, distinct)
        at = lw.op(i32, "add", inner, lw.op(i32, "mul", run, Imm(size, i32)))
        reads = [lw.op(i32, "add", inner, Imm(r * size, i32)) for r in range(count)]
        totals = _through_buffers(lw, total, size * count, at, writer, *reads)
        if padded:  # whether run r holds a real element, per held slot
            k0, coords = group[0] - low, held_slots(coord, layout.reg)
            first = lw.op(i32, "and", coords, Imm(-(1 << (k0 + len(group))), i32))
            filled = [
                lw.op(b1, "lt", lw.op(i32, "or", first, Imm(r << k0, i32)), Imm(layout.shape[axis], i32))
                for r in range(count)
            ]
        acc = has = before = before_has = None
        for r in reversed(range(count)) if reverse else range(count):
            real = filled[r] if padded else Imm(True, b1)
            if acc is None:
                acc, has = totals[r], real
            else:
                both = combine(acc, totals[r])
                acc = _select(lw, real, _select(lw, has, both, totals[r]), acc) if padded else both
                has = lw.op(b1, "lor", has, real)
            here = lw.op(b1, "eq", run, Imm(r - 1 if reverse else r + 1, i32))  # the run next past r is this one
            before = acc if before is None else _select(lw, here, acc, before)
            before_has = lw.land(here, has) if before_has is None else lw.op(b1, "select", here, has, before_has)
        return before, before_has, acc

    pending = None  # (prefix, has): the runs before this thread's own taken since the scan was last updated

    def prepend(runs, take):
        """``runs`` (totals in the held slots), where ``take``, before the pending prefix: the
        runs of higher bits lie further from the element than those of lower bits."""
        nonlocal pending
        if pending is None:
            pending = (runs, take)
        else:
            prefix, has = pending
            prefix = _select(lw, take, _select(lw, has, combine(runs, prefix), runs), prefix)
            pending = (prefix, lw.op(b1, "lor", has, take))

    def settled(scan):
        """``scan`` with the pending prefix combined into every slot (one combine a slot for
        all the lane and warp bits since the last register bit, not one per bit)."""
        nonlocal pending
        if pending is None:
            return scan
        (prefix, has), pending = pending, None
        return _select(lw, every_slot((has,))[0], combine(every_slot(prefix), scan), scan)

    def scan_lanes(group, total):
        """The consecutive lane bits ``group`` of the axis at once, as Triton's scan does: a
        Kogge-Stone scan of the threads' totals over the run of lanes by ``shfl.sync.up``
        (``reverse``: ``down``), one shuffle and one combine a bit; this thread's prefix is the
        lane before's inclusive total, the run's total the last lane's (``reverse``: the first's)."""
        t0, last = hardware[group[0]], (1 << len(group)) - 1
        i = lw.cached(
            ("lane run", t0, last), lambda: lw.op(i32, "and", lw.op(i32, "shr", lw.tid, Imm(t0, i32)), Imm(last, i32))
        )
        mode = "down" if reverse else "up"

        def within(d):  # whether the lane d before this one (in the scan's order) is in the run
            return lw.op(b1, "le", i, Imm(last - d, i32)) if reverse else lw.op(b1, "ge", i, Imm(d, i32))

        inclusive = total
        for k in range(len(group)):
            partner = tuple(from_lane(lw, x, 1 << (t0 + k), mode) for x in inclusive)
            inclusive = _select(lw, within(1 << k), combine(partner, inclusive), inclusive)
        prepend(tuple(from_lane(lw, x, 1 << t0, mode) for x in inclusive), within(1))
        ends = 0 if reverse else last << t0
        return tuple(from_lane(lw, x, ends, "idx", 31 & ~(last << t0)) for x in inclusive)

    position = 0
    while position < len(bits):
        b = bits[position]
        lanes = _lane_run(bits[position:], layout.reg, hardware)
        if len(lanes) > 1 and not padded:
            total = scan_lanes(lanes, total)
            position += len(lanes)
            continue
        group = list(itertools.takewhile(lambda c: c not in layout.reg and hardware[c] >= 5, bits[position:]))
        group = group[:3]  # (at most 8 groups a pass: each thread reads and folds every group's totals)
        if len(group) > 1:
            before, before_has, total = fold_warps(group, total)
            prepend(before, before_has)
            position += len(group)
            continue
        position += 1
        k = b - bits.start
        filled = None  # whether the upper run holds a real element, per slot
        if padded:
            start = lw.op(i32, "or", lw.op(i32, "and", coord, Imm(-(2 << k), i32)), Imm(1 << k, i32))
            filled = lw.op(b1, "lt", start, Imm(layout.shape[axis], i32))
        upper = index_bit(lw, layout, b)
        if b in layout.reg:
            scan = settled(scan)
            j, before = held.index(b), list(held)
            del held[j]
            low, high = (tuple(held_slots(x, before, c) for x in total) for c in (0, 1 << j))
            below = tuple(lw.pick(x, [(layout.reg.index(h), before.index(h)) for h in held], n) for x in total)
            above = tuple(lw.pick(x, [(layout.reg.index(h), before.index(h)) for h in held], n, 1 << j) for x in total)
        else:
            t = hardware[b]
            if t < 5:
                partner = tuple(from_lane(lw, x, 1 << t) for x in total)
            else:
                partner = _exchange(lw, layout, total, t, upper, held, bits.start, b)
            low, high = _in_order(lw, upper, total, partner) if ordered else (partner, total)
        if b in layout.reg and reverse:
            take = lw.land(_not(lw, upper), *([filled] if padded else []))
            scan = _select(lw, take, combine(above, scan), scan)
        elif b in layout.reg:
            scan = _select(lw, upper, combine(below, scan), scan)
        elif reverse:  # (a run above: its totals, in the held slots, once it holds a real element)
            prepend(partner, lw.land(_not(lw, upper), *([held_slots(filled, layout.reg)] if padded else [])))
        else:
            prepend(partner, upper)
        combined = combine(high, low) if reverse else combine(low, high)
        total = _select(lw, held_slots(filled, layout.reg), combined, low) if padded else combined
    return settled(scan), total


def _lane_run(bits, reg, hardware) -> list:
    """The first of the axis's ``bits`` and those after it held by the lane bits after its
    lane bit, in order: the bits a Kogge-Stone scan over lanes takes at once."""
    run = []
    for c in bits:
        if c in reg or hardware[c] >= 5 or (run and hardware[c] != hardware[run[-1]] + 1):
            break
        run.append(c)
    return run


def _exchange(lw, layout, values, t, upper, held, low, b):
    """The totals ``values`` (a tuple; in the slots of the register bits ``held``) of the
    threads whose thread id differs in bit ``t`` (another warp; ``upper``: this thread's bit
    is 1), through shared memory, all behind one barrier: for a warp bit between register
    bits of the axis (a group of consecutive ones is folded in one pass). The buffers hold
    one total per run still distinct at bit ``b`` of the axis (``_run_index``): the threads
    that differ only in replicated bits or the axis's bits ``low..b-1`` hold the same totals
    by now, to the bit (each combined the lower run on the left, or by a builtin sum or
    product, which commute exactly): one of them writes, all read. The partner's index is
    this one's plus one offset per thread, not a per-slot xor (per-slot addresses hoisted
    out of a loop took 64 registers in a row cumsum)."""
    distinct, writer = _distinct_runs(lw, layout, low, b - 1)
    at = _run_index(lw, held, distinct)
    read = _toward_partner(lw, at, upper, 1 << (len(held) + distinct.index(t)))
    return _through_buffers(lw, values, 1 << (len(held) + len(distinct)), at, writer, read)[0]


def _distinct_runs(lw, layout, low, top, group=()):
    """The thread-id bits whose threads hold distinct totals once the axis's index bits
    ``low..top`` are combined (all but the replicated bits and those of ``low..top``), and
    the one writer among the threads that differ only in the others (``group``'s excepted)."""
    distinct = [t for t, lb in layout.hardware() if lb is not None and not low <= lb <= top]
    return distinct, lw.leader(sum(1 << t for t, _ in layout.hardware() if t not in distinct and t not in group))


def _run_index(lw, held, distinct):
    """Each held slot's place in a buffer of one total per distinct run: the slot's number
    (of the register bits ``held``), then this thread's bits ``distinct`` above it; one
    base register plus constants."""
    thread = lw.cached(("exchange", tuple(distinct), len(held)), lambda: _tid_bits(lw, distinct, len(held)))
    slot = lw.op(i32, "slot", attr=SlotMap.of_bits([(j, j) for j in range(len(held))]), n=1 << len(held))
    return lw.op(i32, "add", thread, slot)


def _tid_bits(lw, bits, shift):
    """The thread-id bits ``bits`` gathered into one number, from its bit ``shift`` up."""
    out = Imm(0, i32)
    for k, t in enumerate(bits):
        bit = lw.op(i32, "and", lw.op(i32, "shr", lw.tid, Imm(t, i32)), Imm(1, i32))
        out = lw.op(i32, "or", out, lw.op(i32, "shl", bit, Imm(shift + k, i32)))
    return out


def tid_bit(lw, t):
    """Whether this thread's id has bit ``t``."""
    return lw.op(b1, "ne", lw.op(i32, "and", lw.tid, Imm(1 << t, i32)), Imm(0, i32))


def index_bit(lw, layout, b):
    """Whether each element's padded index has bit ``b`` of ``layout``: a constant per slot
    (a register bit) or one per thread (a lane or warp bit)."""
    if b in layout.reg:
        slot = lw.op(i32, "slot", attr=SlotMap.of_bits([(layout.reg.index(b), 0)]), n=layout.num_regs)
        return lw.op(b1, "ne", slot, Imm(0, i32))
    return tid_bit(lw, next(t for t, lb in layout.hardware() if lb == b))


def _select(lw, cond, a, b):
    """The tuple of operands ``a`` where ``cond``, else ``b``."""
    return tuple(lw.op(x.dtype, "select", cond, x, y) for x, y in zip(a, b))


def _in_order(lw, upper, mine, partner):
    """(the lower one's, the upper one's) of this thread's and its partner's tuples, as
    ``upper`` says this thread is: the same pair, in the same order, in both threads."""
    return _select(lw, upper, partner, mine), _select(lw, upper, mine, partner)


def _not(lw, x):
    return lw.op(b1, "eq", x, Imm(False, b1))


def _toward_partner(lw, index, upper, step):
    """``index`` less ``step`` where ``upper``, else plus: the partner's across one bit."""
    return lw.op(i32, "add", index, lw.op(i32, "select", upper, Imm(-step, i32), Imm(step, i32)))


def _through_buffers(lw, values, size, at, writer, *reads):
    """``values`` (a tuple of operands) written at ``at`` by the ``writer`` threads, one
    barrier, and read back at each of ``reads``: a buffer per operand (an immediate, the same
    in every element, stays as it is). One tuple per read."""
    bufs = {i: lw.buffer(v.dtype, size) for i, v in enumerate(values) if not isinstance(v, Imm)}
    for i, buf in bufs.items():
        lw.stmts.append(SharedStore(buf, at, values[i], writer))
    if bufs:
        lw.barrier()
    out = []
    for read in reads:
        out.append(list(values))
        for i, buf in bufs.items():
            out[-1][i] = lw.reg(values[i].dtype, max(slots(read), slots(values[i])), "w")
            lw.stmts.append(SharedLoad(out[-1][i], buf, read))
    lw.release(*bufs.values())
    return [tuple(o) for o in out]


def lower_sort(lw, eqn, *xs, axis, descending):
    """A bitonic sorting network over the axis's index bits: for each stage ``k`` and bit ``j
    < k``, every element meets the one whose index differs in bit ``j`` (another slot, a
    shuffle, or shared memory for a warp bit) and keeps the one that sorts first or last,
    as its bits ``j`` and ``k`` say. Each element carries its first index, so equal keys
    compare by it (a stable sort: one permutation on every backend), and where the axis has
    phantom slots a flag that sorts them after every real element."""
    layout = lw.layout(eqn.outputs[0])
    bits, hardware = layout.dim_bits(axis), {b: t for t, b in layout.hardware() if b is not None}
    here = lw.coord(layout, axis)
    phantoms = layout.shape[axis] != layout.padded[axis]
    # (equal integer keys alone are the same bits: their order shows nowhere, no index to carry)
    indexed = len(xs) > 1 or xs[0].type.dtype.is_float
    values = (*(lw.regs(x, layout) for x in xs), *([here] if indexed else []))
    values += (lw.valid(layout, dims=[axis]),) if phantoms else ()

    def bit(j):  # whether this element's index has bit j (a constant per slot or one per thread)
        return index_bit(lw, layout, bits.start + j) if j < len(bits) else Imm(False, b1)

    for k in range(1, len(bits) + 1):
        for j in reversed(range(k)):
            b, upper = bits.start + j, bit(j)
            if b in layout.reg:
                i = layout.reg.index(b)
                keep = [(r, r) for r in range(len(layout.reg)) if r != i]
                halves = [
                    (lw.pick(v, keep, layout.num_regs), lw.pick(v, keep, layout.num_regs, 1 << i)) for v in values
                ]
                partner = _select(lw, upper, *zip(*halves))
            elif hardware[b] < 5:
                partner = tuple(from_lane(lw, v, 1 << hardware[b]) for v in values)
            else:
                partner = _across_warps(lw, layout, values, b, upper)
            want_first = lw.op(b1, "eq", upper, bit(k))  # (bit k past the axis: 0, the last stage ascends)
            take = lw.op(b1, "eq", _sorts_before(lw, values, partner, descending, indexed, phantoms), want_first)
            values = _select(lw, take, values, partner)
    lw.values.update(zip(eqn.outputs, values))


def _sorts_before(lw, a, b, descending, indexed, phantoms):
    """Whether element ``a`` (key, payloads[, first index][, real]) sorts before ``b``: by key,
    NaN the largest; equal keys by first index; phantoms after every real element."""
    ka, kb = a[0], b[0]
    d = ka.dtype
    first = lw.op(b1, "gt" if descending else "lt", ka, kb)
    tie = lw.op(b1, "eq", ka, kb)
    if d.is_float:
        nan_a, nan_b = lw.op(b1, "ne", ka, ka), lw.op(b1, "ne", kb, kb)
        nan_first, nan_last = lw.land(nan_a, _not(lw, nan_b)), lw.land(nan_b, _not(lw, nan_a))  # NaN the largest
        first = lw.op(b1, "lor", first, nan_first if descending else nan_last)
        tie = lw.op(b1, "lor", tie, lw.land(nan_a, nan_b))
    at = len(a) - (2 if phantoms else 1)  # (the first index: last but the flag)
    ia, ib = a[at], b[at]
    before = lw.op(b1, "lor", first, lw.land(tie, lw.op(b1, "lt", ia, ib))) if indexed else first
    if not phantoms:
        return before
    real_a, real_b = a[-1], b[-1]
    only_a = lw.land(real_a, _not(lw, real_b))
    return lw.op(b1, "lor", only_a, lw.land(lw.op(b1, "eq", real_a, real_b), before))


def _across_warps(lw, layout, values, bit, upper):
    """Each element's ``values`` (a tuple) from the element whose padded index differs in
    ``bit`` (held by another warp: ``upper`` says whether this element has it set), through
    shared memory at the padded index plus one offset per thread, behind one barrier."""
    index = _padded_flat(lw, layout)
    read = _toward_partner(lw, index, upper, 1 << bit)
    return _through_buffers(lw, values, _padded_size(layout), index, lw.owner(layout), read)[0]


def from_lane(lw, value, b: int, mode: str = "bfly", keep: int = 0):
    """``value`` of another lane (the lane ``lane ^ b``; ``Shuffle``'s other modes): a shuffle,
    or the value itself where it is an immediate (every lane holds it; the backends shuffle
    registers)."""
    if isinstance(value, Imm):
        return value
    dst = lw.reg(value.dtype, slots(value), "s")
    lw.stmts.append(Shuffle(dst, value, b, mode, keep))
    return dst


def lower_histogram(lw, eqn, x, *mask, num_bins, masked):
    """Counts in a shared buffer: zeroed, barrier, one atomic add per counted element (each
    element once: by the owner of its replicated copies), barrier, read in the result's layout."""
    src, out = lw.layout(x), lw.layout(eqn.outputs[0])
    buf = lw.buffer(D.int32, num_bins)
    in_range = lw.valid(out)
    bins = lw.op(i32, "select", in_range, lw.coord(out, 0), Imm(0, i32))
    lw.stmts.append(SharedStore(buf, bins, Imm(0, i32), lw.land(in_range, lw.owner(out))))
    lw.barrier()
    v = lw.regs(x, src)
    dtype = x.type.dtype
    # (every value of the dtype is below num_bins past its maximum: 256 bins of uint8, which as a uint8 is 0)
    below = [lw.op(b1, "lt", v, Imm(num_bins, dtype))] if num_bins <= np.iinfo(dtype.np).max else []
    counted = lw.land(lw.op(b1, "ge", v, Imm(0, dtype)), *below, lw.valid(src), lw.owner(src))
    if masked:
        counted = lw.land(counted, lw.regs(mask[0], src))
    at = lw.op(i32, "convert", lw.op(dtype, "select", counted, v, Imm(0, dtype)), attr=i32)
    lw.stmts.append(SharedStore(buf, at, Imm(1, i32), counted, add=True, count=src.num_regs))
    lw.barrier()
    dst = lw.reg(i32, out.num_regs, "v")
    lw.stmts.append(SharedLoad(dst, buf, bins))
    lw.release(buf)
    output(lw, eqn, dst)
