"""Independent tensor-core products issued back to back, waited for together.

A ``Wgmma`` statement ends by waiting for its product (``wgmma.wait_group 0``), so two
products in a row run one after the other with the wait's latency between them, even when
the second does not read the first's result (attention's backward: ``dp = dout @ v.T``
then ``s = q @ k.T``). When what lies between two wgmmas cannot disturb the first (ops and
loads that do not read its result, shared stores to other buffers than it reads, proxy
fences, barriers) and the second does not read its result, the first is ``deferred``
(issued with no wait): it runs while those statements are issued, the second's wait
completes both, and a ``WgmmaWait`` on the first's result right after it ties its registers
(no read of them moves before it; at run time nothing is left to wait for). Chains of three
or more work the same way. The CPU backend runs each product when issued, so its results
do not change.
"""

from __future__ import annotations

from .._lower.thread_ir import (
    Barrier,
    Load,
    Loop,
    Op,
    ProxyFence,
    SharedLoad,
    SharedStore,
    ThreadProgram,
    Wgmma,
    WgmmaWait,
    registers,
)


def share_wgmma_waits(program: ThreadProgram) -> ThreadProgram:
    program.body = _share(program.body)
    return program


def _share(stmts: list) -> list:
    for s in stmts:
        if isinstance(s, Loop):
            s.body = _share(s.body)
    following = {}  # index of a deferred wgmma -> index of the next one
    for i, s in enumerate(stmts):
        if not isinstance(s, Wgmma) or s.pending:
            continue
        j = i + 1
        while j < len(stmts) and _leaves_alone(stmts[j], s):
            j += 1
        after = stmts[j] if j < len(stmts) else None
        if isinstance(after, Wgmma) and not after.pending and s.dst not in registers(after, after.USES):
            s.deferred, following[i] = True, j
    waits = {}  # index -> the WgmmaWaits to write after that statement
    for i, j in following.items():
        while j in following:  # (the next one deferred too: the last of the chain waits)
            j = following[j]
        waits.setdefault(j, []).append(WgmmaWait(stmts[i].dst, 0))
    out = []
    for i, s in enumerate(stmts):
        out.append(s)
        out += waits.get(i, [])
    return out


def _leaves_alone(s, product: Wgmma) -> bool:
    """Whether ``s`` may be issued while ``product`` is in flight: it neither reads its
    result nor writes the shared tiles it reads."""
    if isinstance(s, (ProxyFence, Barrier)):
        return True
    if isinstance(s, SharedStore) and s.buffer in (product.a_buffer, product.b_buffer):
        return False
    return isinstance(s, (Op, Load, SharedLoad, SharedStore)) and product.dst not in registers(s, s.USES)
