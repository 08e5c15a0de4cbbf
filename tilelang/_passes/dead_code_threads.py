"""Values of the thread program that nothing reads, not computed at all.

The lowering makes some values on speculation: a 16-bit tile read with ``ldmatrix`` (or
loaded packed) is also unpacked into its elements in case an elementwise op wants them,
and a dot that takes the words leaves those elements unread. LLVM would delete them, but
only after numba has typed and lowered every one of their statements, which is most of
the compile time. An ``Op`` (pure: thread and block ids included) or a load (global or
shared: a read changes nothing; a layout conversion may leave the first load of a value
unread) or a warp shuffle (every lane drops it alike: a scan's last totals, when only its
prefixes are read) whose register no statement reads is dropped, repeatedly, so chains of
them go too; every other statement (stores, barriers, mma, loops) stays.
"""

from __future__ import annotations

from .._lower.thread_ir import Load, Loop, Op, Reg, SharedLoad, Shuffle, ThreadProgram, registers, walk_statements


def eliminate_dead_code(program: ThreadProgram) -> ThreadProgram:
    while True:
        read = {r for s in walk_statements(program.body) for r in registers(s, s.USES) if isinstance(r, Reg)}
        body, dropped = _without_unread(program.body, read)
        program.body = body
        if not dropped:
            return program


def _without_unread(stmts: list, read: set) -> tuple[list, int]:
    out, dropped = [], 0
    for s in stmts:
        if isinstance(s, (Op, Load, SharedLoad, Shuffle)) and s.dst not in read:
            dropped += 1
            continue
        if isinstance(s, Loop):
            s.body, inner = _without_unread(s.body, read)
            dropped += inner
        out.append(s)
    return out, dropped
