"""Supported sizes: a kernel past them is refused at the user's line, before it is lowered.

The code generation unrolls every element a thread holds into its own statements and
registers, so compile time and register use grow with a tile's elements per thread:
measured on the CPU backend (numba) a 32768-element vector add at 512 threads (64
elements per thread) compiles in ~12 s, at 65536 (128 per thread) ~55 s, and a 2**20
add does not finish; on CUDA (sm_90) 64 elements per thread use 167 registers and 128
use all 255 and spill. Shared memory is bounded by the GPU: 227 KB per block on sm_90
(the largest dynamic allocation a kernel may opt in to). docs/language.md, "Supported
sizes", states the limits for users.
"""

from __future__ import annotations

from .._ir.core import Program, tile_outputs, uses
from .._lower.layout import WgmmaLayout, padded_size
from .._lower.thread_ir import shared_offsets
from ..errors import TileLimitError

MAX_ELEMENTS_PER_THREAD = 64  # of one tile value under its layout (padded to powers of two)
# a wgmma accumulator (and the epilogue on it, in its layout) may hold twice as many: the
# m64n256 instructions of 2 warpgroups over a 128x256 block take 128 a thread; so may a
# tile read only by wgmma (copied ahead to shared memory, never in registers: a 256 x 128
# float8 operand at 256 threads)
MAX_ACCUMULATOR_ELEMENTS = 128
MAX_THREADS = 1024  # what num_threads may be
SHARED_LIMIT = 227 * 1024  # bytes of shared memory per block (sm_90's opt-in maximum)


def check_tile_sizes(program: Program, layouts: dict, num_threads: int) -> None:
    """Every tile holds at most MAX_ELEMENTS_PER_THREAD elements per thread (the first one past
    it is reported, at the line that makes it)."""
    used = uses(program.body)
    for eqn, out in tile_outputs(program.body):
        layout = layouts.get(out)
        if not out.type.shape or layout is None or layout.num_regs <= MAX_ELEMENTS_PER_THREAD:
            continue
        wide = isinstance(layout, WgmmaLayout) or _read_by_wgmma(out, used, layouts)
        most = MAX_ACCUMULATOR_ELEMENTS if wide else MAX_ELEMENTS_PER_THREAD
        if layout.num_regs <= most:
            continue
        padded = padded_size(out.type.shape)
        fix = "use smaller tiles (loop over the data with tl.range)"
        if num_threads < MAX_THREADS and padded <= most * MAX_THREADS:
            fix += f", or more threads per block: @tl.tile_kernel(num_threads={padded // most})"
        raise TileLimitError(
            f"this {out.type.strong()} tile is {layout.num_regs} elements per thread with {num_threads} threads per "
            f"block; a tile may hold at most {most} elements per thread (a tile of "
            f"{most * num_threads} elements at {num_threads} threads"
            + (f", {most * MAX_THREADS} at {MAX_THREADS}" if num_threads < MAX_THREADS else "")
            + f"): {fix}",
            eqn.loc,
        )


def _read_by_wgmma(x, used: dict, layouts: dict) -> bool:
    """Whether every use of ``x`` is an operand of a dot on wgmma, directly or through a
    transpose or a reshape dropping leading axes of 1 (a batched array's tile), as the
    pipeline copies such tiles."""
    users = used.get(x, [])
    for user in users:
        if user is not None and _passes_on(user):
            if not _read_by_wgmma(user.outputs[0], used, layouts):
                return False
        elif user is None or user.prim.name != "dot" or not isinstance(layouts.get(user.outputs[0]), WgmmaLayout):
            return False
        elif not any(x is v for v in user.inputs[:2]):
            return False
    return bool(users)


def _passes_on(eqn) -> bool:
    """A transpose, or a reshape that drops leading axes of 1."""
    if eqn.prim.name == "transpose":
        return True
    if eqn.prim.name != "reshape":
        return False
    before, after = eqn.inputs[0].type.shape, eqn.outputs[0].type.shape
    lead = len(before) - len(after)
    return lead > 0 and tuple(before[lead:]) == tuple(after) and set(before[:lead]) == {1}


def check_shared_memory(threads) -> None:
    """The thread program's shared memory fits one block's; the largest buffer's op is blamed."""
    total = shared_offsets(threads.shared)[1]  # as the CUDA backend lays them out
    if total <= SHARED_LIMIT:
        return
    name = max(threads.shared, key=lambda n: threads.shared[n][1] * threads.shared[n][0].itemsize)
    d, size = threads.shared[name]
    raise TileLimitError(
        f"the kernel needs {total} bytes of shared memory per block ({size * d.itemsize} of them for this "
        f"operation's {d.name} staging buffer), more than the {SHARED_LIMIT} bytes (227 KB) a block may have on "
        "sm_90: use smaller tiles (for a tl.dot, a smaller K step of its tl.range loop)",
        threads.shared_sites.get(name),
    )
