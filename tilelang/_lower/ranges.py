"""Value ranges: what the lowering knows of the integers a register can hold, an interval
``(lo, hi)`` from the op that made it (``Lowering.range``), and the ops that knowledge
decides.

A window's bounds test its corner against the array: a row ``block_id(0)`` checks
``0 >= max(-row, -1)`` with int64 arithmetic in every thread, though a block id is never
negative; a shape is clamped below at -1, though it never is. Knowing that block ids lie in
``[0, 2**31)``, thread ids in ``[0, threads)``, shapes in ``[0, 2**63)`` and how ``add``,
``mul``, ``neg``, ``and``, ``shl``, ``convert``... carry intervals, :func:`decided` turns
such a comparison into a constant and such a ``maximum``/``minimum`` into its operand, and
the ops that fed them die. An interval is only kept where the op cannot wrap around in its
dtype: a result that might is unknown (None), as is every float.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import bool_ as BOOL
from .thread_ir import Imm

# ops whose interval follows from their operands' (all integer, of the result's dtype)
_ARITHMETIC = {
    "add": lambda a, b: (a[0] + b[0], a[1] + b[1]),
    "sub": lambda a, b: (a[0] - b[1], a[1] - b[0]),
    "mul": lambda a, b: (min(p := [x * y for x in a for y in b]), max(p)),
    "neg": lambda a: (-a[1], -a[0]),
    "maximum": lambda a, b: (max(a[0], b[0]), max(a[1], b[1])),
    "minimum": lambda a, b: (min(a[0], b[0]), min(a[1], b[1])),
}
_COMPARE = {
    "lt": lambda a, b: True if a[1] < b[0] else False if a[0] >= b[1] else None,
    "le": lambda a, b: True if a[1] <= b[0] else False if a[0] > b[1] else None,
    "gt": lambda a, b: True if a[0] > b[1] else False if a[1] <= b[0] else None,
    "ge": lambda a, b: True if a[0] >= b[1] else False if a[1] < b[0] else None,
}


def dtype_range(d) -> tuple:
    """Every value an integer dtype holds."""
    info = np.iinfo(d.np)
    return int(info.min), int(info.max)


def within(r, d):
    """``r`` if a register of integer dtype ``d`` holds all of it (no wrap-around), else None."""
    if r is None:
        return None
    lo, hi = dtype_range(d)
    return r if lo <= r[0] and r[1] <= hi else None


def op_range(op: str, d, args: list, ranges: list, attr, threads: int):
    """The interval of ``op``'s integer result of dtype ``d`` given its operands' intervals
    (None where unknown), or None."""
    if not d.is_int:
        return None
    if op == "thread_id":
        return 0, threads - 1
    if op == "block_id":
        return 0, 2**31 - 1
    if op == "num_blocks":
        return 1, 2**31 - 1
    if op == "slot":  # a constant plus register bits moved up
        return attr.const, attr.const + sum(mask << left for _, mask, left in attr.terms)
    if op == "convert":
        src = args[0].dtype
        return within((0, 1) if src.is_bool else ranges[0] if src.is_int else None, d)
    if op == "select":
        arms = ranges[1:]
        return None if None in arms else within((min(a[0] for a in arms), max(a[1] for a in arms)), d)
    if op == "and" and any(isinstance(a, Imm) and a.value >= 0 for a in args):  # x & c lies in [0, c]
        return 0, min(int(a.value) for a in args if isinstance(a, Imm) and a.value >= 0)
    if op in ("floordiv", "mod") and isinstance(args[1], Imm) and args[1].value > 0 and ranges[0] is not None:
        c, (lo, hi) = int(args[1].value), ranges[0]  # (floor division and its nonnegative remainder)
        return within((lo // c, hi // c) if op == "floordiv" else (0, c - 1), d)
    if op in ("shl", "shr") and isinstance(args[1], Imm) and ranges[0] is not None and 0 <= args[1].value < d.bits:
        k, (lo, hi) = int(args[1].value), ranges[0]
        if op == "shl":
            return within((lo << k, hi << k), d)
        return (lo >> k, hi >> k) if lo >= 0 else None  # (a logical shift of a negative value is large)
    if op in _ARITHMETIC and all(a.dtype.is_int and within(r, d) for a, r in zip(args, ranges)):
        return within(_ARITHMETIC[op](*ranges), d)  # (operands that fit: none wraps converted)
    return None


def decided(op: str, d, args: list, ranges: list):
    """What ``op`` (of result dtype ``d``) gives whatever its operands hold within their
    intervals: a comparison's outcome as a bool immediate, the operand of dtype ``d`` a
    ``maximum``/``minimum`` always picks; else None."""
    if None in ranges or not all(a.dtype.is_int and a.dtype.name != "uint64" for a in args):
        return None  # (uint64 meets a signed int in int64, wrapping: docs/dtypes.md)
    a, b = ranges
    if op in _COMPARE:
        outcome = _COMPARE[op](a, b)
        return None if outcome is None else Imm(outcome, BOOL)
    if op in ("maximum", "minimum") and all(x.dtype == d for x in args):
        if op == "minimum":
            a, b = (-a[1], -a[0]), (-b[1], -b[0])  # min(x, y) = -max(-x, -y)
        return args[0] if a[0] >= b[1] else args[1] if b[0] >= a[1] else None
    return None


def loop_index_range(start, stop, step):
    """The interval a loop index lies in where the body runs, from its bounds' intervals: from
    the start to just short of the stop, counting up or down by the step's sign (unknown: None)."""
    if None in (start, stop, step):
        return None
    if step[0] > 0:
        return start[0], max(start[0], stop[1] - 1)
    if step[1] < 0:
        return min(start[1], stop[0] + 1), start[1]
    return None
