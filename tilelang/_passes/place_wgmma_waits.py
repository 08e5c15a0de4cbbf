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
the value (here, at the latest with the first wait for one of its own products, which comes
after it), and the loop's exit edge waits for the last one. In between, the tensor cores run
it and the next iteration's first product back to back; a TMA refill of the stage it read
(``tma refill``: the pipeline issues it where the body first needs a product) waits for it.

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
)

# statements that may be issued while a product is in flight, unless they touch it
_ALONGSIDE = (Op, Shuffle, Load, Store, SharedLoad, SharedStore, ProxyFence, Barrier, MbarrierWait, Wgmma)
# statements that write no shared tile
_NO_TILE_WRITES = (Op, Shuffle, Load, Store, SharedLoad, ProxyFence, MbarrierWait, Wgmma, WgmmaWait, AsyncCommit,
                   AsyncWait, Mbarriers, Mma, LdMatrix)  # fmt: skip


def place_wgmma_waits(program: ThreadProgram) -> ThreadProgram:
    program.body = _place(program.body, _nothing_after)
    return program


def _nothing_after(product) -> bool:
    return True


def _place(stmts: list, after, loop: Loop | None = None) -> list:
    """``stmts`` with their products' waits placed; ``after(product)``: whether what may run
    after them, before a barrier, leaves the product's tiles alone; ``loop``: the loop whose
    body they are (its carried products stay in flight across the iteration's end)."""
    issued = {s.dst for s in stmts if isinstance(s, Wgmma) and not s.pending}
    carried = _carried(stmts, issued, loop)
    out, flight = [], list(carried)  # flight: the products issued and not yet waited for, in commit order
    earlier = {id(p) for p in carried}  # (of the iteration before: they read the stage a refill writes)
    for i, s in enumerate(stmts):
        if isinstance(s, Loop):
            s.body = _place(s.body, _after_body(s, stmts, i, after), s)
        if isinstance(s, WgmmaWait) and s.pending == 0 and s.acc in issued:
            continue  # (written where the product is needed)
        needed = [
            k
            for k, product in enumerate(flight)
            if _needs(s, product, id(product) in earlier)
            or (isinstance(s, Barrier) and not _untouched(stmts, i + 1, product, id(product) in earlier, after))
        ]
        if needed:  # (ptxas follows no group around a loop: a product of the iteration before, with none left)
            _wait(flight, len(flight) - 1 if any(id(flight[k]) in earlier for k in needed) else max(needed), out)
        out.append(s)
        if isinstance(s, Loop):  # its last carried products complete on its exit edge
            out.extend(WgmmaWait(p.dst, 0) for p in _carried(s.body, issued=None, loop=s))
        if isinstance(s, Wgmma) and s.dst in issued:
            flight.append(s)
    waited = [k for k, product in enumerate(flight) if id(product) in earlier or _result_of(product, loop) is None]
    if waited:
        _wait(flight, max(waited), out)
    return out


def _carried(body: list, issued, loop: Loop | None) -> list:
    """The products of ``loop``'s body (``issued`` there, None: find them) that it carries into
    the next iteration, each as the next iteration sees it (its register the loop's parameter),
    in commit order."""
    if loop is None:
        return []
    if issued is None:
        issued = {s.dst for s in body if isinstance(s, Wgmma) and not s.pending}
    params = dict(zip(loop.results, loop.params))
    return [
        dataclasses.replace(s, dst=params[s.dst])
        for s in body
        if isinstance(s, Wgmma) and s.dst in issued and s.dst in params
    ]


def _result_of(product: Wgmma, loop: Loop | None):
    """The parameter a product of ``loop``'s body is carried into (None: it is not)."""
    return dict(zip(loop.results, loop.params)).get(product.dst) if loop else None


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
    if isinstance(s, TmaLoad) and s.refill:
        return earlier
    if not isinstance(s, _ALONGSIDE) or (isinstance(s, Wgmma) and s.pending):
        return True
    if isinstance(s, SharedStore) and s.buffer in _tiles(product):
        return True
    return product.dst in registers(s, s.USES)
