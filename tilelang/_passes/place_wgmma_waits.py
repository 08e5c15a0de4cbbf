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

What may be issued while products are in flight: ops, shuffles and loads that do not read
their results, shared loads, shared stores to other tiles, global stores, fences, barriers
and mbarrier waits. A barrier is one only if no thread may write the product's tiles between
it and the next barrier: past it, the other warpgroups run on, and a thread's own wait says
nothing of theirs (a staged operand's buffer is free again once a barrier has passed). So a
product is waited for before a barrier followed by a store into its tiles, or by anything the
pass does not look into, or by the end of a loop's body (the next iteration, or the code
after the loop, comes before any further barrier). Waits left at the end of a statement list
are written there. Each ``WgmmaWait`` ties its product's registers, so nothing reads them
before it. The CPU backend runs each product when issued: its results do not change.
"""

from __future__ import annotations

import itertools

from .._lower.thread_ir import (
    Barrier,
    Load,
    Loop,
    MbarrierWait,
    Op,
    ProxyFence,
    SharedLoad,
    SharedStore,
    Shuffle,
    Store,
    ThreadProgram,
    Wgmma,
    WgmmaWait,
    registers,
)

# statements that may be issued while a product is in flight, unless they touch it
_ALONGSIDE = (Op, Shuffle, Load, Store, SharedLoad, SharedStore, ProxyFence, Barrier, MbarrierWait, Wgmma)


def place_wgmma_waits(program: ThreadProgram) -> ThreadProgram:
    program.body = _place(program.body, whole_program=True)
    return program


def _place(stmts: list, whole_program: bool = False) -> list:
    """``stmts`` with their products' waits placed; ``whole_program``: nothing runs after
    them (else a loop's body: the next iteration may)."""
    issued = {s.dst for s in stmts if isinstance(s, Wgmma) and not s.pending}
    out, flight = [], []  # flight: the products issued and not yet waited for, in commit order
    for i, s in enumerate(stmts):
        if isinstance(s, Loop):
            s.body = _place(s.body)
        if isinstance(s, WgmmaWait) and s.pending == 0 and s.acc in issued:
            continue  # (written where the product is needed)
        needed = [
            k
            for k, product in enumerate(flight)
            if _needs(s, product) or (isinstance(s, Barrier) and not _untouched(stmts, i + 1, product, whole_program))
        ]
        if needed:
            _wait(flight, max(needed), out)
        out.append(s)
        if isinstance(s, Wgmma) and s.dst in issued:
            flight.append(s)
    if flight:
        _wait(flight, len(flight) - 1, out)
    return out


def _wait(flight: list, k: int, out: list):
    """Waits completing ``flight[: k + 1]``, the products after them left in flight."""
    left = len(flight) - k - 1
    out.extend(WgmmaWait(product.dst, left) for product in flight[: k + 1])
    del flight[: k + 1]


def _untouched(stmts: list, start: int, product: Wgmma, whole_program: bool) -> bool:
    """Whether no thread may write ``product``'s tiles in ``stmts`` from ``start`` (what
    follows a barrier) before the next barrier."""
    for s in itertools.islice(stmts, start, None):
        if isinstance(s, Barrier):
            return True
        if isinstance(s, WgmmaWait):
            continue
        if not isinstance(s, _ALONGSIDE) or (isinstance(s, SharedStore) and s.buffer in _tiles(product)):
            return False
    return whole_program


def _tiles(product: Wgmma) -> tuple:
    """The shared buffers ``product`` reads."""
    return (product.a_buffer, product.b_buffer)


def _needs(s, product: Wgmma) -> bool:
    """Whether ``s`` must wait for ``product``: it reads its result, stores into a tile it
    reads, or is a statement not known to leave it alone."""
    if not isinstance(s, _ALONGSIDE) or (isinstance(s, Wgmma) and s.pending):
        return True
    if isinstance(s, SharedStore) and s.buffer in _tiles(product):
        return True
    return product.dst in registers(s, s.USES)
