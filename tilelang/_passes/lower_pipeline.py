"""Software pipelining of the loads that feed tensor-core dots in a ``tl.range`` loop
(used by the loop's lower rule in ``lower_threads.py``).

Each such tile is copied from global to shared memory asynchronously (``cp.async``), its
copies issued ``S - 1`` iterations ahead into a ring of ``S`` buffers (``S`` is the
kernel's ``num_stages``, 3 by default; 1 turns pipelining off),
and read from there with ``ldmatrix`` in the fragment layout the dot wants (mma.sync) or
by the tensor cores themselves (wgmma: the ring's stages are swizzled tiles,
``_lower/swizzled.py``): the copies take no registers and no shared stores, and their
latency hides behind the dots of the iterations in between. A load qualifies when it is a
2-d 16-bit float tile of 16-byte groups padded with zeros, its only use is its conversion
to an ldmatrix layout, or every use is an operand of a wgmma dot (directly, or through a
transpose folded into the read: ``a @ w.T``; attention backward's ``q`` feeds two dots, as
``a`` of one and ``b`` of the other: one stage, read both ways), its window
is computed by pure scalar equations from the loop index and values from outside the loop,
every read of it is in the loop's own body (none in a loop nested in it), and nothing in
the loop writes memory (a store could change what an early copy reads).

Per iteration: wait until this iteration's copies are done (at most ``S - 2`` groups in
flight), a proxy fence where wgmma reads them, barrier (every thread's copies are
visible, and every thread is done with the stage read the iteration before), issue the
copies for the iteration ``S - 1`` ahead (``S - 2`` while a wgmma dot stays in flight)
into that stage, then the body (with TMA and a dot in flight, the barrier and the copies
``S - 1`` ahead come after the body instead; with TMA and the body's first product read
before another is issued, after that product: see below). Before the loop the copies of as many iterations are
issued; after it, those past its end are waited for, and a barrier frees the ring. Copies
past the end read only what the window's bounds allow (nothing past an array's end). A loop
the next one walks on from, over the same copies, hands its ring over running
(``Pipeline.chain``): no drain after it, no prologue before the next.

With TMA (sm_90a; ``Lowering.tma`` and every copied tile read by wgmma, its shape whole
swizzled column blocks of at most 256 rows), thread 0 copies a stage's tiles instead, a
tensor-memory-accelerator box per column block (``TmaLoad``), counted by the stage's
mbarrier: the wait at the top of an iteration is on that mbarrier's phase (a parity carried
with the stage), no fence is needed (TMA and wgmma are both the async proxy), and no copy
is issued for an iteration past the loop's end. With a dot in flight, the copies come after
it: its ``wgmma.wait_group 1`` completes the dot of the iteration before, whose stage, once
the barrier passes, takes the copies ``S - 1`` ahead (the 128x128x64 matmul at 4 stages:
524 -> 600 TFLOP/s on the H200; copies first, 2 ahead, it waited on them). Attention's body needs ``q @ k.T``
before it issues ``p @ v``: its copies come after the first product (``tma refill``), whose wait also completes the
``p @ v`` of the iteration before, left in flight across the iteration's end (place_wgmma_waits.py): the stage that
product read is free once the barrier passes. The mbarriers are made valid before the
loop and invalid after it. The boxes are read through tensor maps the launcher encodes (an
array they cannot describe runs the kernel built without TMA: ``thread_ir.TensorMap``).
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import dtypes as D
from .._ir.core import Block, Eqn, Literal, Var, nested_blocks, sub_blocks, uses
from .._lower.layout import Layout, reshaped
from .._lower.lowering import (
    InShared,
    Lowering,
    i32,
    i64,
    matrix_layout,
    matrix_tile,
    stored_as_matrices,
    stored_as_words,
)
from .._lower.swizzled import OperandTile, SwizzledTile
from .._lower.thread_ir import (
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    Imm,
    Mbarriers,
    MbarrierWait,
    ProxyFence,
    TensorMap,
    TmaLoad,
    WgmmaWait,
)
from .._lower.window import Window
from .check_limits import SHARED_LIMIT
from .lower_dot import operand_tile, reads_operand_tiles, transposed_read
from .lower_wgmma import is_matrix_transpose, is_wgmma_operand, overlapped_dots
from .lower_wgmma import operand_tile as wgmma_tile


@dataclass
class _Copied:
    load: Eqn  # x = load(...)
    convert: Eqn  # y = convert_layout x (or of transpose x)
    chain: list  # the body's equations computing the load's window
    read: Layout  # what ldmatrix reads, in x's coordinates: y's layout (or its transpose)
    transpose: Eqn | None = None  # folded into the read
    reshape: Eqn | None = None  # of a load with leading axes of 1 (a 4-d array's 2-d tile), folded too
    tile: SwizzledTile | OperandTile | None = None  # the stage's layout when a dot reads it (else ldmatrix's rows)
    more: tuple = ()  # further wgmma dots reading the same stage: (dot, transpose or None) each
    buffer: str = ""
    stage_words: int = 0

    def dots(self) -> list:
        """The dots reading the copied tile in place (one, or more: attention's ``q`` feeds two)."""
        return [self.convert, *(dot for dot, _ in self.more)] if self.tile else []

    def wgmma(self) -> bool:
        """Whether tensor cores read the tile (in the wgmma layout), not threads."""
        return isinstance(self.tile, SwizzledTile)

    def operands(self) -> list:
        """``(equation whose result a wgmma reads, read transposed)`` for each read."""
        direct = self.reshape or self.load
        return [(t or direct, t is not None) for t in (self.transpose, *(t for _, t in self.more))]

    def words(self, lw) -> int:
        """32-bit words a stage of this tile takes (ldmatrix's: padded rows of 16-bit pairs)."""
        if self.tile:
            return self.tile.words
        rows, cols = matrix_tile(self.tile_layout(lw))
        return rows * cols // 2

    def tile_layout(self, lw) -> Layout:
        """The layout of the 2-d tile the copies land (the load's, or its reshape's)."""
        return lw.layout((self.reshape or self.load).outputs[0])

    def tma_boxes(self) -> bool:
        """Whether TMA boxes can land this tile: a wgmma operand whose shape is its swizzled
        tile's (no padding to zero along k), at most 256 rows (a box's limit), rank <= 5."""
        shape = tuple((self.reshape or self.load).outputs[0].type.shape)
        tile = self.tile
        return self.wgmma() and shape == (tile.rows, tile.cols) and tile.rows <= 256 and len(self.load.inputs) <= 7


class Pipeline:
    """The pipelined loads of one loop, and the statements that move them."""

    def __init__(self, lw: Lowering, loop: Eqn, copies: list, stages: int, before: Pipeline | None = None):
        self.lw, self.copies, self.stages, self.before = lw, copies, stages, before
        body = loop.params["body"]
        # wgmma dots left in flight across iterations: the stage they read is refilled one
        # iteration later, so cp.async copies go one iteration less far ahead. Only from 4 stages: on
        # the H200 copies two iterations ahead pay more than the overlap (128x128x32 fp16,
        # 3 stages: 273 TFLOP/s not overlapped, 233 overlapped; 4 stages overlapped 256)
        self.overlapped = overlapped_dots(body, copies) if self.stages >= 4 else {}
        self.index, (self.start, self.stop, self.step) = body.params[0], loop.inputs[:3]
        self.until = None  # the end of the next loop's iterations, where this one's copies run on into them
        self.registers = ()  # the loop's stage (and mbarrier parity) registers, once it is lowered
        self.tma = lw.tma and all(c.tma_boxes() for c in copies)
        for c, earlier in zip(copies, before.copies if before else [None] * len(copies)):
            c.stage_words = c.words(lw)
            kind = "swizzled" if c.wgmma() else "smem"
            dtype = D.float32 if isinstance(c.tile, OperandTile) else D.uint32
            c.buffer = earlier.buffer if earlier else lw.ring(dtype, self.stages * c.stage_words, kind, self.tma)
        if self.tma:  # one mbarrier per stage, counting the bytes of its copies
            self.barriers = before.barriers if before else lw.buffer(D.uint64, self.stages, "mbarriers")
        # TMA copies with a dot in flight are issued after the body, once the dot of the
        # iteration before has completed (its stage is the one refilled): S - 1 ahead, as
        # without overlap, behind the one barrier an iteration takes anyway
        self.copies_last = self.tma and bool(self.overlapped)
        # the refilled stage is the one the iteration before read. With TMA, where the body's first product is
        # needed before another is issued (attention's q @ k.T), its copies come after that product: its wait
        # completes the products left in flight from the iteration before (p @ v: place_wgmma_waits.py), the two
        # back to back on the tensor cores, and the stage is free
        self.refill_at = None if lw.copies_first or not self.tma or self.copies_last else _needed_first(body)
        self.ahead = self.stages - 1 - (bool(self.overlapped) and not self.copies_last)

    def chain(self, following: list):
        """When the next loop (past pure equations only) walks on from this one's end, step 1
        both, copying the same windows of the same arrays the same way (attention's masked key
        loop after the unmasked one), this loop's copies run on into its iterations: one ring
        and one set of mbarriers, no drain and no prologue between, and the next loop's first
        tiles are on their way while this one ends. Iterations are copied from ``min(start,
        stop)`` (an empty first loop starts the next one's) up to the larger of the two ends."""
        loop = next((e for e in following if sub_blocks(e) or e.prim.effect == "write"), None)
        if self.before or self.overlapped or loop is None or loop.prim.name != "range_loop":
            return
        start, stop, step = loop.inputs[:3]
        if not (_same_atom(start, self.stop, {}) and _is_one(step) and _is_one(self.step)):
            return
        copies, stages = _copies(self.lw, loop)
        body = loop.params["body"]
        if stages != self.stages or (stages >= 4 and overlapped_dots(body, copies)):
            return
        same = _same_copies(self.lw, self.copies, copies, {self.index: body.params[0]})
        if same and _lowered_early(self.lw, stop, following[: following.index(loop)]):
            self.until = stop
            self.lw.continued[id(loop)] = (self, copies)

    def initial(self) -> list:
        """The stage (and parity) the loop's first iteration reads: 0, or where the loop it
        continues left them."""
        n = 2 if self.tma else 1
        return list(self.before.registers[:n]) if self.before else [Imm(0, i32)] * n

    def prologue(self):
        """The copies of the first ``ahead`` iterations, a group (or a stage's mbarrier) each
        (none where the loop before issued them)."""
        lw = self.lw
        if self.before:
            return
        if self.tma:  # (every thread sees them valid before it waits on one)
            lw.stmts.append(Mbarriers(self.barriers, self.stages, True))
            lw.barrier()
        start, step = lw.scalar(self.start), lw.scalar(self.step)
        if self.until is not None:
            start = lw.op(i64, "minimum", start, lw.scalar(self.stop))
        for s in range(self.ahead):
            self._issue(lw.op(i64, "add", start, lw.op(i64, "mul", step, Imm(s, i64))), Imm(s, i32))

    def refill(self, index, stage, phase):
        """At the top of the body: wait for this iteration's tiles, then copy ahead (unless
        the copies come last, :meth:`copy_last`, or after the product ``refill_at``: :meth:`rules`)."""
        lw = self.lw
        if self.tma:
            lw.stmts.append(MbarrierWait(self.barriers, stage, phase))
        else:
            lw.stmts.append(AsyncWait(self.ahead - 1))
            if any(c.wgmma() for c in self.copies):  # the tensor cores read what the copies wrote
                lw.stmts.append(ProxyFence())
        if not self.copies_last and self.refill_at is None:
            self.copy_ahead(index, stage)

    def copy_last(self, index, stage):
        """At the end of the body, where the copies come last."""
        if self.copies_last:
            self.copy_ahead(index, stage)

    def copy_ahead(self, index, stage):
        """A barrier (every thread is done with the stage about to be refilled), then the
        copies of the iteration ``ahead`` of ``index``."""
        lw = self.lw
        lw.barrier()
        ahead = lw.op(i64, "add", index, lw.op(i64, "mul", lw.scalar(self.step), Imm(self.ahead, i64)))
        self._issue(ahead, self.stage_after(stage, self.ahead), refill=True)

    def advance(self, stage, phase) -> list:
        """The next iteration's stage (and, with TMA, its mbarrier's parity: flipped at each wrap)."""
        lw, after = self.lw, self.stage_after(stage, 1)
        if not self.tma:
            return [after]
        wrapped = lw.op(i32, "convert", lw.op(D.bool_, "eq", after, Imm(0, i32)), attr=i32)
        return [after, lw.op(i32, "xor", phase, wrapped)]

    def stage_after(self, stage, k: int):
        """The ring's stage ``k`` (< stages) after ``stage``."""
        lw, later = self.lw, self.lw.op(i32, "add", stage, Imm(k, i32))
        wrapped = lw.op(i32, "sub", later, Imm(self.stages, i32))
        return lw.op(i32, "select", lw.op(D.bool_, "ge", later, Imm(self.stages, i32)), wrapped, later)

    def rules(self, stage, index, others: dict) -> dict:
        """Lower rules standing in for the loads (nothing: they are copied) and their conversions,
        and the copies ahead issued after the product ``refill_at`` (``others``: the body's
        other rules)."""

        def convert(c):
            def rule(lw, eqn, x):
                base = lw.op(i32, "mul", stage, Imm(c.stage_words, i32))
                words = lw.read_matrices(c.read, c.buffer, base, matrix_tile(c.tile_layout(lw)))
                lw.set_words(eqn.outputs[0], words)

            return rule

        def in_shared(c, transposed):
            def rule(lw, eqn, *args, **params):
                base = lw.op(i32, "mul", stage, Imm(c.stage_words, i32))
                lw.in_shared[eqn.outputs[0]] = InShared(c.buffer, base, c.tile, transposed)

            return rule

        nothing = {
            id(e): lambda lw, eqn, *args, **params: None
            for c in self.copies
            for e in (c.load, c.reshape, c.transpose, *(t for _, t in c.more))
            if e
        }
        in_place = {id(e): in_shared(c, t) for c in self.copies if c.tile for e, t in c.operands()}
        rules = others | nothing | in_place | {id(c.convert): convert(c) for c in self.copies if not c.tile}
        if (at := self.refill_at) is not None:
            lower = rules.get(id(at)) or at.prim.rule("lower")

            def then_copies(lw, eqn, *args, **params):
                lower(lw, eqn, *args, **params)
                self.copy_ahead(index, stage)

            rules[id(at)] = then_copies
        return rules

    def drain(self, carried: dict):
        """After the loop: the dots left in flight complete (into the loop's results,
        ``carried``: body result Var -> its register), the copies past its end land, and
        every thread is done with the ring (the loop may run again, inside another, and its
        prologue refill the stages). Nothing where the next loop goes on with the copies."""
        if self.until is not None:
            return
        for dot in self.overlapped.values():
            self.lw.stmts.append(WgmmaWait(carried[dot.outputs[0]], 0))
        # (with TMA no copy is in flight: each was waited for by its iteration)
        self.lw.stmts.append(Mbarriers(self.barriers, self.stages, False) if self.tma else AsyncWait(0))
        self.lw.barrier()
        self.lw.idle_rings.extend(c.buffer for c in self.copies)
        if not self.tma:
            self.lw.written_by_threads.update(c.buffer for c in self.copies)
        if self.lw.depth == 0:  # nothing copies into the ring again: its words are scratch from here on
            self.lw.retired.extend(c.buffer for c in self.copies if self.lw.shared[c.buffer][0] == D.uint32)

    def _issue(self, index, stage, refill=False):
        lw = self.lw
        saved = {out: lw.values.get(out) for c in self.copies for e in c.chain for out in e.outputs}
        outer_index, lw.values[self.index] = lw.values.get(self.index), index
        for c in self.copies:
            for e in c.chain:
                e.prim.rule("lower")(lw, e, *e.inputs, **e.params)
        if self.tma:
            self._issue_boxes(index, stage, refill)
        else:
            self._issue_copies(stage)
        lw.values[self.index] = outer_index
        for out, value in saved.items():
            if value is None:
                lw.values.pop(out, None)
            else:
                lw.values[out] = value

    def _issue_boxes(self, index, stage, refill):
        """Thread 0's TMA copies of iteration ``index`` into ``stage``, if it is one of the loop's
        (``refill``: in the loop, into the stage the iteration before read)."""
        lw, boxes, size = self.lw, [], 0
        for c in self.copies:
            array, *starts, _ = c.load.inputs
            starts = [lw.scalar(x) for x in starts]
            shape = c.load.outputs[0].type.shape
            per_block = c.tile.per_block
            box = (*shape[:-1], per_block)
            m = lw.tensor_map(TensorMap(lw.array_names[array], box, c.tile.width, c.tile.itemsize))
            ring = lw.op(i32, "mul", stage, Imm(c.stage_words, i32))
            for j in range(c.tile.cols // per_block):  # a box per column block
                at = lw.op(i32, "add", ring, Imm(j * c.tile.rows * c.tile.width // 4, i32))
                last = lw.op(i64, "add", starts[-1], Imm(j * per_block, i64))
                coords = [_clamp32(lw, x) for x in (last, *starts[-2::-1])]
                boxes.append((c.buffer, at, m, len(starts), coords))
            size += c.tile.rows * c.tile.cols * c.tile.itemsize
        step, stop = lw.scalar(self.step), lw.scalar(self.stop)
        if self.until is not None:
            stop = lw.op(i64, "maximum", stop, lw.scalar(self.until))
        up = lw.land(lw.op(D.bool_, "gt", step, Imm(0, i64)), lw.op(D.bool_, "lt", index, stop))
        down = lw.land(lw.op(D.bool_, "lt", step, Imm(0, i64)), lw.op(D.bool_, "gt", index, stop))
        inside = lw.op(D.bool_, "lor", up, down)
        buffers, indices, maps, ranks, coords = zip(*boxes)
        flat = [x for xs in coords for x in xs]
        lw.stmts.append(TmaLoad(buffers, list(indices), maps, ranks, flat, self.barriers, stage, size, inside, refill))

    def _issue_copies(self, stage):
        """Every thread's cp.async copies of the iteration's windows into ``stage``, a group."""
        lw = self.lw
        for c in self.copies:
            array, *starts, _ = c.load.inputs
            # (copies test their groups as they run, in two versions: known whole, the copies were one
            # straight block with the loop's products, and ptxas spilled float32 pipelines' registers)
            starts = [lw.scalar(x) for x in starts]
            window = Window(lw, array, lw.layout(c.load.outputs[0]), starts, whole_groups=False)
            layout = c.tile_layout(lw)  # (the load's with its axes of 1 dropped: the same slots)
            offset, mask, first, last = window.access(with_base=False)
            ring = lw.op(i32, "mul", stage, Imm(c.stage_words, i32))  # the stage's first word
            if c.tile:
                at = c.tile.group_words(lw, layout, window.lanes, plus=ring)
            else:
                at = lw.op(i32, "shr", lw.flat(lw.coords(layout, lanes=8), matrix_tile(layout)), Imm(1, i32))
                at = lw.op(i32, "add", at, ring)
            owned = lw.land(mask, lw.owner(layout))
            aligned = window.groups_aligned()
            lw.stmts.append(AsyncCopy(c.buffer, at, window.name, window.base, offset, owned, first, last, aligned))
        lw.stmts.append(AsyncCommit())


def _clamp32(lw, x):
    """An int64 coordinate as int32, saturated (a box corner past either end stays past it:
    the tensor map refuses arrays of 2**31 elements along an axis)."""
    return lw.op(i32, "convert", lw.clamp(x, -(2**31), 2**31 - 1), attr=i32)


def plan(lw: Lowering, loop: Eqn) -> Pipeline | None:
    """The pipeline of ``loop``'s loads, or None when none qualifies."""
    before, copies = lw.continued.pop(id(loop), (None, None))  # (found already by the loop before)
    copies, stages = (copies, before.stages) if before else _copies(lw, loop)
    if stages < 2:
        return None
    pipeline = Pipeline(lw, loop, copies, stages, before)
    pipeline.chain(lw.following)
    return pipeline


def _copies(lw: Lowering, loop: Eqn) -> tuple:
    """``(copies, stages)``: the loads of ``loop`` a pipeline would copy, and its stages (< 2:
    no pipeline)."""
    body = loop.params["body"]
    if lw.num_stages < 2 or not _contains_dot(body) or _writes(body):
        return [], 0
    varying = set(body.params[1:])
    producer, used = {}, uses(body)
    for eqn in body.eqns:
        moves = any(x in varying for x in eqn.inputs if isinstance(x, Var))
        if sub_blocks(eqn) or eqn.prim.effect is not None or moves:
            varying.update(eqn.outputs)
        producer.update((out, eqn) for out in eqn.outputs)
    copies, here = [], {id(e) for e in body.eqns}
    for eqn in body.eqns:
        if eqn.prim.name != "load" or any(x in varying for x in eqn.inputs[1:] if isinstance(x, Var)):
            continue
        out, array, padding = eqn.outputs[0], eqn.inputs[0], eqn.inputs[-1]
        if not _read_here(out, used, here):
            continue
        users, layout, reshape = used.get(out, []), lw.layout(out), None
        if len(users) == 1 and users[0] is not None and _drops_unit_axes(lw, users[0], layout):  # a 4-d array's tile
            reshape, out = users[0], users[0].outputs[0]
            users, layout = used.get(out, []), lw.layout(out)
        if not users or not (
            layout.vector_width() * out.type.dtype.itemsize >= 16  # (16-byte copies)
            and array.type.unit_stride
            and isinstance(padding, Literal)
            and float(padding.value) == 0.0
        ):
            continue
        chain = _chain(eqn.inputs[1:], producer)
        float32 = out.type.dtype.name == "float32" and len(out.type.shape) == 2
        if not float32 and not stored_as_words(out.type, layout):
            continue
        if reads := (_thread_reads if float32 else _wgmma_reads)(lw, out, users, used):
            (dot, transpose, tile), *more = reads
            if all(t == tile for *_, t in more):  # (read as either operand, the tile must be the same)
                more = tuple((d, t) for d, t, _ in more)
                copies.append(_Copied(eqn, dot, chain, layout, transpose, reshape, tile, more))
            continue
        if float32 or not stored_as_matrices(out.type, layout):  # (ldmatrix reads 16-bit words)
            continue
        if len(users) != 1 or users[0] is None:  # (a loop result)
            continue
        user = users[0]
        if user.prim.name == "convert_layout" and matrix_layout(lw.layout(user.outputs[0])):
            copies.append(_Copied(eqn, user, chain, lw.layout(user.outputs[0]), reshape=reshape))
        elif target := transposed_read(lw, user, used.get(user.outputs[0], [])):  # read in the transposed layout
            copies.append(_Copied(eqn, used[user.outputs[0]][0], chain, target, user, reshape))
    # as many stages as a block's shared memory holds (float32 128x128x128 tiles: one, so none)
    stages = min(lw.num_stages, SHARED_LIMIT // (4 * sum(c.words(lw) for c in copies))) if copies else 0
    return copies, stages


def _read_here(x, used, here: set) -> bool:
    """Whether every use of ``x`` (and of its reshapes, transposes and layout conversions) is
    an equation of the loop's body itself (``here``: their ids): a copy's rules replace how the
    body's equations are lowered, not those of a loop nested in it (there a ``k.T`` of a copied
    ``k`` found no registers to read)."""
    for user in used.get(x, []):
        if user is None:
            continue
        if id(user) not in here:
            return False
        if user.prim.name in ("reshape", "transpose", "convert_layout") and not _read_here(user.outputs[0], used, here):
            return False
    return True


def _lowered_early(lw: Lowering, x, between: list) -> bool:
    """Whether the scalar ``x`` is known here, lowering now what computes it among the pure
    scalar equations ``between`` (a later loop's bound, computed after this loop) if it can
    (not a result of this loop); those are not lowered again in their place."""
    early = _chain([x], {out: e for e in between for out in e.outputs})
    known = {out for e in early for out in e.outputs}.union(lw.values, lw.array_names)
    needed = [x, *(y for e in early for y in e.inputs)]
    if any(isinstance(y, Var) and y not in known for y in needed):
        return False
    if any(e.prim.effect or any(o.type.shape for o in e.outputs) for e in early):
        return False
    for e in early:
        e.prim.rule("lower")(lw, e, *e.inputs, **e.params)
        lw.early.add(id(e))
    return True


def _same_copies(lw, first: list, then: list, names: dict) -> bool:
    """Whether two loops' copies (``first``, ``then``) copy the same windows of the same arrays
    into the same stages, ``names`` mapping the first loop's index to the second's."""
    if len(first) != len(then):
        return False
    for a, b in zip(first, then):
        same_shape = [(x is None) == (y is None) for x, y in ((a.transpose, b.transpose), (a.reshape, b.reshape))]
        if not (all(same_shape) and a.load.params == b.load.params and a.tile == b.tile and a.read == b.read):
            return False
        if a.load.outputs[0].type != b.load.outputs[0].type or a.words(lw) != b.words(lw) or len(a.more) != len(b.more):
            return False
        if len(a.chain) != len(b.chain) or not all(_same_eqn(x, y, names) for x, y in zip(a.chain, b.chain)):
            return False
        if not all(_same_atom(x, y, names) for x, y in zip(a.load.inputs, b.load.inputs)):
            return False
    return True


def _same_eqn(a: Eqn, b: Eqn, names: dict) -> bool:
    """Whether ``b`` computes what ``a`` does, its inputs named by ``names`` (then its outputs too)."""
    same = a.prim is b.prim and a.params == b.params and len(a.inputs) == len(b.inputs)
    if not (same and all(_same_atom(x, y, names) for x, y in zip(a.inputs, b.inputs))):
        return False
    names.update(zip(a.outputs, b.outputs))
    return True


def _same_atom(a, b, names: dict) -> bool:
    if isinstance(a, Literal):
        return isinstance(b, Literal) and a.value == b.value and a.type == b.type
    return names.get(a, a) is b


def _is_one(x) -> bool:
    return isinstance(x, Literal) and x.value == 1


def _drops_unit_axes(lw, eqn: Eqn, layout: Layout) -> bool:
    """Whether ``eqn`` reshapes a loaded tile to 2-d by dropping leading axes of 1 (a
    ``(1, 1, BN, D)`` window of a 4-d array), its layout the load's renamed: the same slots."""
    if eqn.prim.name != "reshape":
        return False
    before, after = eqn.inputs[0].type.shape, eqn.outputs[0].type.shape
    lead = len(before) - len(after)
    return (
        len(after) == 2
        and lead > 0
        and before[lead:] == after
        and set(before[:lead]) == {1}
        and (reshaped(layout, after) == lw.layout(eqn.outputs[0]))
    )


def _wgmma_reads(lw, x, users, used) -> list:
    """``[(dot, transpose or None, swizzled tile), ...]`` when every use of ``x`` (``users``)
    is an operand of a wgmma dot, directly or through a transpose; else []."""

    def tile(dot, role, transposed):
        return wgmma_tile(lw.layout(dot.outputs[0]), role, x.type, transposed)[0]

    return _dot_reads(x, users, used, lambda dot, operand: is_wgmma_operand(lw, dot, operand), tile)


def _thread_reads(lw, x, users, used) -> list:
    """``[(dot, transpose or None, OperandTile), ...]`` when every use of the float32 tile
    ``x`` (``users``) is an operand of a dot whose threads read it from shared memory (on
    CUDA cores, or as TF32 fragments), directly or through a transpose; else []."""

    def tile(dot, role, transposed):
        return operand_tile(lw, dot, role, x, transposed)

    return _dot_reads(x, users, used, lambda dot, operand: reads_operand_tiles(lw, dot), tile)


def _dot_reads(x, users, used, reads_in_place, tile) -> list:
    """``[(dot, transpose or None, tile(dot, role, transposed)), ...]`` when every use of
    ``x`` is an operand of a dot that ``reads_in_place(dot, operand)``, directly or through
    a transpose (and not both operands of one dot); else []."""
    reads = []
    for user in users:
        transpose, operand = None, x
        if user is not None and is_matrix_transpose(user):
            after = used.get(user.outputs[0], [])
            if len(after) != 1:
                return []
            transpose, operand, user = user, user.outputs[0], after[0]
        if user is None or user.prim.name != "dot" or user.inputs[0] is user.inputs[1]:
            return []
        if not any(operand is v for v in user.inputs[:2]) or not reads_in_place(user, operand):
            return []
        role = 0 if user.inputs[0] is operand else 1
        reads.append((user, transpose, tile(user, role, transpose is not None)))
    return reads


def _chain(atoms, producer) -> list:
    """The equations of the body computing ``atoms``, in order."""
    out, seen = [], set()

    def visit(x):
        if isinstance(x, Var) and x in producer and id(producer[x]) not in seen:
            eqn = producer[x]
            seen.add(id(eqn))
            for y in eqn.inputs:
                visit(y)
            out.append(eqn)

    for x in atoms:
        visit(x)
    return out


def _contains_dot(block: Block) -> bool:
    return any(e.prim.name == "dot" for b in nested_blocks(block) for e in b.eqns)


def _writes(block: Block) -> bool:
    return any(e.prim.effect == "write" for b in nested_blocks(block) for e in b.eqns)


def _needed_first(body: Block) -> Eqn | None:
    """The first dot of ``body`` if its product is read before another dot is issued."""
    k = next((k for k, e in enumerate(body.eqns) if e.prim.name == "dot"), None)
    if k is None:
        return None
    first = body.eqns[k]
    for eqn in body.eqns[k + 1 :]:
        if first.outputs[0] in eqn.inputs:
            return first if eqn.prim.name != "dot" else None
        if eqn.prim.name == "dot" or sub_blocks(eqn):
            return None
    return None
