"""What a kernel reads besides its arguments: module globals and closure variables.

Tracing reads them as Python values, once per specialization. A kernel compiled before one
of them changed would go on computing with the old value, and a specialization compiled
after it with the new one: two launches of one kernel computing different functions,
silently. So a kernel remembers what it read once it has compiled, and every launch checks
that it is still there (the fast path in C: the same object, or an equal int, float or
str): a change is a ``TileArgumentError`` naming it. Read are the globals the kernel's
code loads and its closure cells, the names it reads from a user's module (``cfg.BLOCK``),
and through the Python functions among them (helpers, not tilelang's own), theirs. An
equal value in a new object (a helper defined again with the same code, ``N = 1000``
again) is no change. Names the kernel or a helper assigns (its own ``global``/``nonlocal``
state) are not watched; nor is the inside of a mutable object.
"""

from __future__ import annotations

import dataclasses
import dis
import enum
import hashlib
import types

import numpy as np

from ..dtypes import DType

_MAX_DEPTH = 4  # helpers of helpers of ... of the kernel
EMPTY = object()  # an empty closure cell, or a global not there (it cannot have been read)
_PLAIN = (bool, int, float, complex, str, bytes, DType, np.generic, type(None))
_GLOBALS = {"LOAD_GLOBAL", "LOAD_NAME"}
_ATTRIBUTES = {"LOAD_ATTR", "LOAD_METHOD"}
_STORES = {"STORE_GLOBAL", "DELETE_GLOBAL", "STORE_DEREF", "DELETE_DEREF"}


class Captures:
    """The globals and closure cells ``fn`` (and the helpers it names) read, as they are now."""

    def __init__(self, fn):
        self.entries = []  # (what, holder: a globals dict or a cell, name, value)
        self._seen = set()
        self._visit(fn, 0)

    def _visit(self, fn, depth):
        if id(fn) in self._seen or depth > _MAX_DEPTH:
            return
        self._seen.add(id(fn))
        code = [i for c in _code_objects(fn.__code__) for i in dis.get_instructions(c)]
        stored = {i.argval for i in code if i.opname in _STORES}
        loaded = dict.fromkeys(i.argval for i in code if i.opname in _GLOBALS and i.argval not in stored)
        attributes = dict.fromkeys(i.argval for i in code if i.opname in _ATTRIBUTES)
        for name in loaded:
            if name in fn.__globals__:
                self._watch(f"global `{name}` of module {fn.__globals__.get('__name__')}", fn.__globals__, name, depth)
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            if name not in stored:
                self._watch(f"closure variable `{name}` of {fn.__qualname__}", cell, name, depth)
        modules = {id(v): v for *_, v in self.entries if isinstance(v, types.ModuleType) and _users(v.__name__)}
        for module in modules.values():  # (`cfg.BLOCK`: what the code reads from a module of the user's)
            for name in attributes:
                if name in vars(module) and not isinstance(vars(module)[name], types.ModuleType):
                    self._watch(f"global `{name}` of module {module.__name__}", vars(module), name, depth)

    def _watch(self, what, holder, name, depth):
        value = _read(holder, name)
        if any(h is holder and n == name for _, h, n, _ in self.entries):
            return
        self.entries.append((what, holder, name, value))
        if isinstance(value, types.FunctionType) and _users(value.__module__):
            self._visit(value, depth + 1)

    def check(self) -> str | None:
        """What changed since, or None. An equal value in a new object is remembered instead
        (so that fast paths made from now on check for it)."""
        for k, (what, holder, name, value) in enumerate(self.entries):
            now = _read(holder, name)
            if now is value:
                continue
            if value is not EMPTY and not _same(now, value):
                return f"{what} is {_show(now)}, not {_show(value)} as when the kernel was compiled"
            self.entries[k] = (what, holder, name, now)
        return None

    def guards(self) -> tuple:
        """``(holder, name, value)`` per entry, for the fast path: a cell's name is None."""
        return tuple(
            (h, None if isinstance(h, types.CellType) else n, v) for _, h, n, v in self.entries if v is not EMPTY
        )

    def fingerprint(self) -> str:
        """What was read, as text another process gives alike: a key for what is cached on disk."""
        return "\n".join(f"{what} = {_stable(value)}" for what, _, _, value in self.entries)


def _code_objects(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _users(module_name) -> bool:
    """Whether a module may hold the user's state (not tilelang's or NumPy's own)."""
    return (module_name or "").partition(".")[0] not in ("tilelang", "numpy", "ml_dtypes", "builtins")


def read_cell(cell):
    """A closure cell's value, or EMPTY (assigned after the function was made, or deleted)."""
    try:
        return cell.cell_contents
    except ValueError:
        return EMPTY


def _read(holder, name):
    return read_cell(holder) if isinstance(holder, types.CellType) else holder.get(name, EMPTY)


def _same(a, b, comparing=None) -> bool:
    """Equal as far as a trace can tell: plain values and containers of them by ``==`` (NaN is
    NaN), functions by their code, defaults and closure (``comparing``: the pairs of functions
    under comparison, so that a function reaching itself through its closure ends)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, types.FunctionType):
        comparing = comparing or set()
        if (id(a), id(b)) in comparing:
            return True
        comparing.add((id(a), id(b)))
        cells, other = ([_read(c, None) for c in f.__closure__ or ()] for f in (a, b))
        return (
            _code_text(a.__code__) == _code_text(b.__code__)
            and a.__globals__ is b.__globals__
            and _same(a.__defaults__, b.__defaults__, comparing)
            and len(cells) == len(other)
            and all(x is y or _same(x, y, comparing) for x, y in zip(cells, other))
        )
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(x is y or _same(x, y, comparing) for x, y in zip(a, b))
    if not isinstance(a, (*_PLAIN, frozenset, set, dict)):
        return False
    try:
        return bool(a == b) or (a != a and b != b)
    except Exception:
        return False


def _code_text(code) -> str:
    consts = (_code_text(c) if isinstance(c, types.CodeType) else _stable(c) for c in code.co_consts)
    return f"{code.co_code.hex()} {code.co_names} ({', '.join(consts)})"


def _stable(value, seen: frozenset = frozenset()) -> str:
    """``value`` as text that does not depend on the process (no addresses, no hash order, no
    ``repr``: a set field's order, a thread's ident, a raising ``__repr__``). An object by its
    attributes (a dataclass by its fields, an enum member by its name), to a depth of 8, a
    cycle back to one on the way by its type."""
    if isinstance(value, _PLAIN):
        return repr(value)
    if isinstance(value, types.FunctionType):
        return f"function {value.__qualname__} {_code_text(value.__code__)} defaults {_stable(value.__defaults__)}"
    if isinstance(value, np.ndarray):  # (its contents, by digest)
        return f"array {value.dtype} {value.shape} {hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()}"
    if isinstance(value, types.ModuleType):
        return f"module {value.__name__}"
    if value is EMPTY:
        return "unassigned"
    kind = type(value)
    name = f"{kind.__module__}.{kind.__qualname__}"
    if isinstance(value, enum.Enum):
        return f"{name}.{value.name}"
    if id(value) in seen or len(seen) >= 8:
        return f"a {name}"
    inner = seen | {id(value)}
    if isinstance(value, (tuple, list)):
        return f"{kind.__name__}({', '.join(_stable(v, inner) for v in value)})"
    if isinstance(value, (set, frozenset)):
        return f"{kind.__name__}({', '.join(sorted(_stable(v, inner) for v in value))})"
    if isinstance(value, dict):
        return f"dict({', '.join(sorted(f'{_stable(k, inner)}: {_stable(v, inner)}' for k, v in value.items()))})"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return f"{name} {_stable({f.name: getattr(value, f.name, None) for f in dataclasses.fields(value)}, inner)}"
    if isinstance(getattr(value, "__dict__", None), dict) and not isinstance(value, type):
        return f"{name} {_stable(vars(value), inner)}"  # an object of a plain class: its attributes
    return f"a {name}"


def _show(value) -> str:
    return "unassigned" if value is EMPTY else repr(value)[:80]
