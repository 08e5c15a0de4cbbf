"""What a kernel reads besides its arguments: module globals and closure variables.

Tracing reads them as Python values, once per specialization. A kernel compiled before one
of them changed would go on computing with the old value, and a specialization compiled
after it with the new one: two launches of one kernel computing different functions,
silently. So a kernel remembers what it read when it was first compiled, and every launch
checks that it is still there (by identity, or equality for plain values; the fast path
checks the identities in C): a change is a ``TileArgumentError`` naming it. Read are the
globals and closure cells the kernel's code names, and through the Python functions among
them (helpers, not tilelang's own), theirs. Names the kernel or a helper assigns (its own
``global``/``nonlocal`` state) are not watched; nor is the inside of a mutable object.
"""

from __future__ import annotations

import dis
import types

import numpy as np

from ..dtypes import DType

_MAX_DEPTH = 4  # helpers of helpers of ... of the kernel
_EMPTY = object()  # an empty closure cell (assigned after the kernel was made)
_PLAIN = (bool, int, float, complex, str, bytes, tuple, frozenset, DType, np.generic, type(None))
_STORES = {"STORE_GLOBAL", "STORE_DEREF", "DELETE_GLOBAL", "DELETE_DEREF"}


class Captures:
    """The globals and closure cells ``fn`` (and the helpers it names) read, as they are now."""

    def __init__(self, fn):
        self.entries = []  # (what, holder: a globals dict or a cell, name, value)
        self.renewed = False  # whether changed() remembered an equal value anew
        self._seen = set()
        self._visit(fn, 0)

    def _visit(self, fn, depth):
        if id(fn) in self._seen or depth > _MAX_DEPTH:
            return
        self._seen.add(id(fn))
        codes = list(_code_objects(fn.__code__))
        stored = {i.argval for code in codes for i in dis.get_instructions(code) if i.opname in _STORES}
        names = [n for n in dict.fromkeys(n for code in codes for n in code.co_names) if n not in stored]
        first = len(self.entries)
        for name in names:
            if name in fn.__globals__:
                self._watch(f"global `{name}` of module {fn.__globals__.get('__name__')}", fn.__globals__, name, depth)
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            if name not in stored:
                self._watch(f"closure variable `{name}` of {fn.__qualname__}", cell, name, depth)
        modules = {id(v): v for *_, v in self.entries[first:] if isinstance(v, types.ModuleType) and _users(v)}
        for module in modules.values():  # (`helper.R`: the names the code reads that the module has)
            for name in names:
                if name in vars(module):
                    self._watch(f"global `{name}` of module {module.__name__}", vars(module), name, depth)

    def _watch(self, what, holder, name, depth):
        value = _read(holder, name)
        self.entries.append((what, holder, name, value))
        if isinstance(value, types.FunctionType) and _owner(value.__module__) != "tilelang":
            self._visit(value, depth + 1)

    def changed(self) -> str | None:
        """What changed since, or None; values equal to the remembered ones (a new 1000 for
        1000) are remembered anew, so that the fast path's identity checks hold again."""
        for k, (what, holder, name, value) in enumerate(self.entries):
            now = _read(holder, name)
            if now is value:
                continue
            if value is not _EMPTY and not _same(now, value):  # (an unassigned one was not read)
                return f"{what} is {_show(now)}, not {_show(value)} as when the kernel was compiled"
            self.entries[k], self.renewed = (what, holder, name, now), True
        return None

    def guards(self) -> tuple:
        """``(holder, name, value)`` per entry, for the fast path: a cell's name is None."""
        return tuple((h, None if isinstance(h, types.CellType) else n, v) for _, h, n, v in self.entries)

    def fingerprint(self) -> str:
        """What was read, as text that another process gives alike (a key for what is cached
        across processes): plain values by repr, helper functions by their code."""
        lines = []
        for what, _, _, value in self.entries:
            if isinstance(value, _PLAIN):
                lines.append(f"{what} = {value!r}")
            elif isinstance(value, types.FunctionType):
                lines.append(f"{what} = {_code_text(value.__code__)}")
        return "\n".join(lines)


def _code_objects(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _users(module) -> bool:
    """Whether ``module`` may hold the user's state (not tilelang's or NumPy's own)."""
    return _owner(module.__name__) not in ("tilelang", "numpy", "ml_dtypes", "builtins")


def _owner(module_name) -> str:
    return (module_name or "").partition(".")[0]


def _code_text(code) -> str:
    consts = (_code_text(c) if isinstance(c, types.CodeType) else repr(c) for c in code.co_consts)
    return f"{code.co_code.hex()} {code.co_names} ({', '.join(consts)})"


def _read(holder, name):
    if isinstance(holder, types.CellType):
        try:
            return holder.cell_contents
        except ValueError:
            return _EMPTY
    return holder.get(name, _EMPTY)


def _same(a, b) -> bool:
    if type(a) is not type(b) or not isinstance(a, _PLAIN):
        return False
    try:
        return bool(a == b) or (a != a and b != b)  # (NaN is NaN's own)
    except Exception:
        return False


def _show(value) -> str:
    return "unassigned" if value is _EMPTY else repr(value)[:80]
