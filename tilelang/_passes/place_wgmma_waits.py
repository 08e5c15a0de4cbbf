"""Each tensor-core product waited for where its result is first needed, not where it is issued.

A ``Wgmma`` statement issues its product and commits it as one wgmma group; the lowering
follows it with a ``WgmmaWait`` on its result. Waiting there runs every product alone,
with the wait's latency after it and nothing else issued while the tensor cores work. This
pass sinks each such wait to the first statement that needs the product: one that reads its
result, a store into a shared tile it reads, or a statement the pass does not look into (a
loop, a copy, a product left in flight across iterations). Groups complete in the order they
were committed, so a wait for one product lets the products committed after it stay in
flight: ``wgmma.wait_group N`` with N the number of them. Two independent products issued
back to back then share one wait, and the first is waited for alone when its result is read
first (attention's backward: ``s = q @ k.T``, then ``dp = dout @ v.T`` runs while the
probabilities are computed from ``s``).

A product a loop carries into its next iteration (attention's ``acc = p @ v + acc * alpha``)
stays in flight across the iteration's end: the next iteration waits for it where it reads
the value, or where a wait for one of its own products would complete it anyway, and the
loop's exit edge waits for the last one. The tensor cores then run it and the next
iteration's first product back to back; a refill of the stage it read (``tma refill``: with
TMA the pipeline's copies ahead, lower_pipeline.py) waits for it. Only where ptxas keeps up:
the product is carried into one parameter that nothing reads after it is issued (else LLVM
copies its registers on the back edge while it runs), and a wait that completes it leaves
nothing in flight (ptxas follows no ``wait_group N`` around a loop); a product that would
need otherwise completes in its own iteration (either way ptxas would make every wgmma of
the kernel wait for the one before, C7514).

What may be issued while products are in flight: ops, shuffles and loads that do not read
their results, shared loads, shared stores to other tiles, global stores, fences, barriers,
mbarrier waits and refills of another stage. A barrier is one only if no thread may write
the product's tiles between it and the next barrier: past it, the other warpgroups run on,
and a thread's own wait says nothing of theirs (a staged operand's buffer is free again once
a barrier has passed). So a product is waited for before a barrier followed, before the next
one, by a write into its tiles or by anything the pass does not look into; the statements
that may follow are walked on through nested loops, a loop body's end (into its next
iteration and the code after the loop) and out to the program's end. Waits left at the end
of a statement list are written there. Each ``WgmmaWait`` ties its product's registers, so
nothing reads them before it. The CPU backend runs each product when issued: its results do
not change.
"""

from __future__ import annotations

import dataclasses
import itertools

from .._lower.thread_ir import (
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    Barrier,
    LdMatrix,
    Load,
    Loop,
    Mbarriers,
    MbarrierWait,
    Mma,
    Op,
    ProxyFence,
    SharedLoad,
    SharedStore,
    Shuffle,
    Store,
    ThreadProgram,
    TmaLoad,
    Wgmma,
    WgmmaWait,
    registers,
    walk_statements,
)

# statements that may be issued while a product is in flight, unless they touch it
_ALONGSIDE = (Op, Shuffle, Load, Store, SharedLoad, SharedStore, ProxyFence, Barrier, MbarrierWait, Wgmma)
# statements that write no shared tile: those of them but shared stores, and waits and reads of other kinds
_NO_TILE_WRITES = (*(t for t in _ALONGSIDE if t is not SharedStore), WgmmaWait, AsyncCommit, AsyncWait, Mbarriers, Mma,
                   LdMatrix)  # fmt: skip


def place_wgmma_waits(program: ThreadProgram) -> ThreadProgram:
    program.body, _ = _place(program.body, _nothing_after)
    return program


def _nothing_after(product) -> bool:
    return True


def _place(stmts: list, after, loop: Loop | None = None) -> tuple:
    """``stmts`` with their products' waits placed, and the result registers of the products
    they leave in flight: ``loop``'s body carrying them into its next iteration (else none).
    ``after(product)``: whether what may run after ``stmts``, before a barrier, leaves the
    product's tiles alone."""
    exits = {}  # each loop inside first, once: what it leaves in flight completes on its exit edge
    for i, s in enumerate(stmts):
        if isinstance(s, Loop):
            s.body, left = _place(s.body, _after_body(s, stmts, i, after), s)
            exits[id(s)] = [WgmmaWait(param, 0) for result, param in zip(s.results, s.params) if result in left]
    issued = {s.dst for s in stmts if isinstance(s, Wgmma) and not s.pending}
    seeds = _may_carry(stmts, loop, issued) if loop else set()
    while True:  # (a product the iteration cannot leave in flight is not waited for at the next one's top)
        out, left = _schedule(stmts, after, loop, issued, seeds, exits)
        if left == seeds:
            return out, left
        seeds = left


def _schedule(stmts: list, after, loop: Loop | None, issued: set, carried: set, exits: dict) -> tuple:
    """``_place`` with the products of ``carried`` (result registers) taken to be in flight at
    the top of the body (as the loop's parameters they become) and left in flight at its end
    where they can be."""
    params = [(r, p) for r, p in zip(loop.results, loop.params) if r in carried] if loop else []
    stand_ins = [dataclasses.replace(s, dst=p) for s in stmts if isinstance(s, Wgmma) for r, p in params if r == s.dst]
    out, flight = [], list(stand_ins)  # flight: the products issued and not yet waited for, in commit order
    earlier = {id(p) for p in stand_ins}  # (of the iteration before: they read the stage a refill writes)
    for i, s in enumerate(stmts):
        if isinstance(s, WgmmaWait) and s.pending == 0 and s.acc in issued:
            continue  # (written where the product is needed)
        needed = [
            k
            for k, product in enumerate(flight)
            if _needs(s, product, id(product) in earlier)
            or (isinstance(s, Barrier) and not _untouched(stmts, i + 1, product, id(product) in earlier, after))
        ]
        if needed:  # (ptxas follows no group around a loop: one of the iteration before completes with all)
            _wait(flight, len(flight) - 1 if _any_earlier(flight, earlier) else max(needed), out)
        out.append(s)
        out.extend(exits.get(id(s), ()))
        if isinstance(s, Wgmma) and s.dst in issued:
            flight.append(s)
    stay = not _any_earlier(flight, earlier)  # (else all complete here, for the same reason)
    waited = [k for k, product in enumerate(flight) if not (stay and product.dst in carried)]
    if waited:
        _wait(flight, max(waited), out)
    return out, {product.dst for product in flight}


def _may_carry(body: list, loop: Loop, issued: set) -> set:
    """The products of ``loop``'s ``body`` (result registers) that may stay in flight into its
    next iteration: carried into one parameter, which nothing reads after the product is issued,
    the back edge included (else LLVM copies registers while the product is in flight, and ptxas
    serializes every wgmma of the kernel, C7514, or adds a wait of its own, C7517)."""
    out = set()
    for k, s in enumerate(body):
        if isinstance(s, Wgmma) and s.dst in issued and loop.results.count(s.dst) == 1:
            param = loop.params[loop.results.index(s.dst)]
            later = (param in registers(t, t.USES) for t in walk_statements(body[k + 1 :]))
            if param not in loop.results and not any(later):
                out.add(s.dst)
    return out


def _any_earlier(flight: list, earlier: set) -> bool:
    return any(id(product) in earlier for product in flight)


def _after_body(loop: Loop, stmts: list, i: int, after):
    """``after`` for the body of ``loop`` (``stmts[i]``): its next iteration up to a barrier, and
    what follows the loop."""

    def untouched(product) -> bool:
        return _untouched(loop.body, 0, product, True, _nothing_after) and _untouched(
            stmts, i + 1, product, True, after
        )

    return untouched


def _wait(flight: list, k: int, out: list):
    """Waits completing ``flight[: k + 1]``, the products after them left in flight."""
    left = len(flight) - k - 1
    out.extend(WgmmaWait(product.dst, left) for product in flight[: k + 1])
    del flight[: k + 1]


def _untouched(stmts: list, start: int, product: Wgmma, earlier: bool, after) -> bool:
    """Whether no thread may write ``product``'s tiles in ``stmts`` from ``start`` (what
    follows a barrier) before the next barrier (``earlier``: a product of the iteration before;
    ``after``: as for ``_place``)."""
    for s in itertools.islice(stmts, start, None):
        if isinstance(s, Barrier):
            return True
        if isinstance(s, Loop):  # (it may run: its body up to a barrier, each iteration)
            if not _untouched(s.body, 0, product, True, _nothing_after):
                return False
        elif _writes(s, product, earlier):
            return False
    return after(product)


def _writes(s, product: Wgmma, earlier: bool) -> bool:
    """Whether ``s`` may write ``product``'s tiles (a refill writes the stage the iteration
    before read, another than this iteration's products read)."""
    if isinstance(s, TmaLoad):
        return earlier if s.refill else any(b in _tiles(product) for b in s.buffers)
    if isinstance(s, (SharedStore, AsyncCopy)):
        return s.buffer in _tiles(product)
    return not isinstance(s, _NO_TILE_WRITES)


def _tiles(product: Wgmma) -> tuple:
    """The shared buffers ``product`` reads."""
    return (product.a_buffer, product.b_buffer)


def _needs(s, product: Wgmma, earlier: bool) -> bool:
    """Whether ``s`` must wait for ``product``: it reads its result, writes a tile it reads, or
    is a statement not known to leave it alone."""
    refill = isinstance(s, TmaLoad) and s.refill  # (issued alongside, unless it writes the product's stage)
    if not (refill or isinstance(s, _ALONGSIDE)) or (isinstance(s, Wgmma) and s.pending):
        return True
    return _writes(s, product, earlier) or product.dst in registers(s, s.USES)
