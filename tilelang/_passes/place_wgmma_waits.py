"""Each tensor-core product waited for where its result is first needed, not where it is issued.

A ``Wgmma`` statement issues its product and commits it as one wgmma group; the lowering
follows it with a ``WgmmaWait`` on its result. Waiting there runs every product alone,
with the wait's latency after it and nothing else issued while the tensor cores work. This
pass sinks each such wait to the first statement that needs the product: one that reads its
result, a store into a shared tile it reads, or a statement the pass does not look into (a
loop, a copy, a product left in flight across iterations). Groups complete in the order they
were committed, so a wait for one product lets the products committed after it stay in
flight: ``wgmma.wait_group N`` with N the number of them. Two independent products issued
back to back then share one wait (attention's backward: ``dp = dout @ v.T`` beside ``s = q @
k.T``), and an attention forward written with its key loop rotated (the scores of block ``j``
issued, then block ``j - 1``'s ``p @ v``) computes the softmax of ``j`` while ``p @ v`` runs.
What may be issued while products are in flight: ops, shuffles and loads that do not read
their results, shared loads, shared stores to other tiles, global stores, fences, barriers
and mbarrier waits. Waits left at the end of a statement list are written there (a loop body
ends with nothing in flight). Each ``WgmmaWait`` ties its product's registers, so nothing
reads them before it. The CPU backend runs each product when issued: its results do not change.
"""

from __future__ import annotations

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
    program.body = _place(program.body)
    return program


def _place(stmts: list) -> list:
    issued = {s.dst for s in stmts if isinstance(s, Wgmma) and not s.pending}
    out, flight = [], []  # flight: the products issued and not yet waited for, in commit order
    for s in stmts:
        if isinstance(s, Loop):
            s.body = _place(s.body)
        if isinstance(s, WgmmaWait) and s.pending == 0 and s.acc in issued:
            continue  # (written where the product is needed)
        needed = [k for k, product in enumerate(flight) if _needs(s, product)]
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


def _needs(s, product: Wgmma) -> bool:
    """Whether ``s`` must wait for ``product``: it reads its result, stores into a tile it
    reads, or is a statement not known to leave it alone."""
    if not isinstance(s, _ALONGSIDE) or (isinstance(s, Wgmma) and s.pending):
        return True
    if isinstance(s, SharedStore) and s.buffer in (product.a_buffer, product.b_buffer):
        return True
    return product.dst in registers(s, s.USES)
