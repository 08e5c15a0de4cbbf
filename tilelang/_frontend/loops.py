"""``for k in tl.range(...)``: runtime loops traced once into one structured equation.

Tracing runs the Python function once, so a runtime loop has to be captured as a whole.
Before the first trace, the kernel's source is rewritten (line and column numbers kept):

    for k in tl.range(a, b, c):            def __tl_body_1(k, acc, m):
        acc = acc + f(k)            →          acc = acc + f(k)
                                               return (acc, m)
                                           (acc, m) = __tl_loop(tl.range(a, b, c), __tl_body_1,
                                                                ("acc", "m"), locals())

Every name the body assigns is a candidate. At trace time ``__tl_loop`` traces the body
once with fresh values for the candidates that are tiles; those the body rebinds become
loop-carried (whatever the spelling: ``acc += x``, ``m, l = m2, l2``), the rest are
passed through. Python scalars the body changes are promoted to 0-d tiles and the body
traced again. Anything that cannot be captured faithfully (``break``, a rebound list, a
type that changes across an iteration) is a TileError, never a wrong program.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import itertools
import linecache
import types

import numpy as np

from .. import dtypes
from .._ir import primitives as P
from .._ir.core import Block, Literal, TileType, Var
from ..errors import SourceLoc, TileSyntaxError, TileTypeError, user_location
from .captures import EMPTY, read_cell
from .coercion import weak_as
from .tracing import (
    Tile,
    TraceScope,
    Unbound,
    as_atom,
    bind,
    bind1,
    check_in_scope,
    current_block,
    literal,
    located,
)


class range:
    """A runtime loop ``for k in tl.range(start, stop, step):``, traced once.

    Bounds may be runtime scalars; ``k`` is an integer scalar tile. Tiles the body
    rebinds are loop-carried. Example::

        acc = tl.zeros((BM, BN), tl.float32)
        for k in tl.range(0, tl.cdiv(K, BK)):
            acc = tl.dot(tl.load(a, index=(i, k), shape=(BM, BK)),
                         tl.load(b, index=(k, j), shape=(BK, BN)), acc)
    """

    def __init__(self, *args, **kwargs):
        current_block("range")
        try:
            start, stop, step = _bounds(*args, **kwargs)
        except TypeError as err:  # (Python's would count `self` among the arguments)
            raise located(TileTypeError(str(err).replace("_bounds()", "tl.range(start, stop=None, step=1)"))) from None
        if stop is None:
            start, stop = 0, start
        atoms = [as_atom(x, "tl.range bound") for x in (start, stop, step)]
        for a in atoms:
            if a.type.shape != () or not (a.type.dtype.is_int or a.type.dtype.is_bool):
                raise located(TileTypeError(f"tl.range bounds must be integer scalars, got {a.type}"))
        d, weak = atoms[0].type.dtype, atoms[0].type.weak
        for a in atoms[1:]:
            d, weak = dtypes.promote(d, weak, a.type.dtype, a.type.weak)
        if d.is_bool:
            d = dtypes.int32
        self.index_dtype = d
        self.bounds = [_as_dtype(a, d) for a in atoms]

    def __iter__(self):
        loc = user_location()
        if loc is not None and not linecache.getline(loc.file, loc.line):  # so the loop could not be rewritten
            raise TileSyntaxError(
                "the source of this kernel cannot be read (it was defined in `python -`, an interactive session "
                "or exec()), so its loops cannot be traced: kernels with tl.range loops must be defined in a file "
                "or a notebook cell",
                loc,
            )
        raise located(
            TileSyntaxError(
                "tl.range can only be the iterable of a `for` statement written in the @tl.tile_kernel "
                "function itself (not in a helper, a comprehension or a list())"
            )
        )


def _bounds(start, stop=None, step=1):
    return start, stop, step


def _as_dtype(atom, d):
    if atom.type.dtype is d and not atom.type.weak:
        return atom
    if isinstance(atom, Literal):
        return literal(atom.value.item(), d)
    return bind1(P.convert, [atom], "range", dtype=d).var


# ------------------------------------------------------------------ trace time


def run_loop(rng: range, body_fn, names, scope, index_name):
    """Trace ``body_fn`` once as the body of a structured loop; returns the names' new values
    and, last, what the loop index is after the loop (nothing: using it is an error)."""
    values = [
        scope[n] if n in scope else Unbound(f"`{n}` is used in a tl.range loop body before it is assigned")
        for n in names
    ]
    while True:
        result = _trace_once(rng, body_fn, names, values)
        if result is not None:
            return [*result, Unbound(f"`{index_name}`, the index of a tl.range loop, has no value after the loop")]


def _is_scalar(v):
    return isinstance(v, (bool, int, float, np.generic))


def _trace_once(rng, body_fn, names, values):
    """Trace the body; None if it must be traced again (a Python scalar became carried)."""
    index = Var(TileType((), rng.index_dtype), hint="k")
    params = {n: Var(v.type, hint=n) for n, v in zip(names, values) if isinstance(v, Tile)}
    block = Block(params=[index, *params.values()])  # narrowed to the carried ones below
    args = [Tile(params[n]) if n in params else v for n, v in zip(names, values)]
    with TraceScope(block):
        outs = body_fn(Tile(index), *args)
        changed = [i for i, (v, o) in enumerate(zip(values, outs)) if _is_scalar(v) and not _same_scalar(v, o)]
        if not changed:
            new = {n: _carried_result(n, params[n], o) for n, o in zip(names, outs) if n in params}
    if changed:
        for i in changed:
            lit = as_atom(values[i])
            values[i] = bind1(P.full, [lit], "range", shape=(), dtype=lit.type.dtype)
        return None

    init = dict(zip(names, values))
    carried = [n for n in params if new[n] is not params[n]]
    block.params = [index] + [params[n] for n in carried]
    block.results = [new[n] for n in carried]
    _substitute(block, {params[n]: init[n].var for n in params if n not in carried})
    finals = bind(P.range_loop, [*rng.bounds, *(init[n] for n in carried)], "range", body=block)
    finals = dict(zip(carried, finals))
    out = []
    for n, v, o in zip(names, values, outs):
        if n in finals:
            out.append(finals[n])
        elif isinstance(v, Unbound):
            out.append(
                Unbound(f"`{n}` is assigned in a tl.range loop body and used after the loop; assign it before the loop")
            )
        elif n in params or o is v or _same_scalar(v, o):
            out.append(v)
        else:
            raise located(
                TileSyntaxError(
                    f"`{n}` (a {type(v).__name__}) is rebound in a tl.range loop body; only tiles and "
                    "scalars can be carried from one iteration to the next"
                )
            )
    return out


def _same_scalar(v, o):
    return type(v) is type(o) and v == o


def _carried_result(name, param, out):
    """The body's new value for a carried tile, checked to keep the tile's type."""
    if isinstance(out, Tile) and out.var is param:
        return param
    atom = as_atom(out, f"loop-carried `{name}`")
    check_in_scope(atom)
    want = param.type
    if isinstance(atom, Literal) or atom.type.shape == want.shape:  # a weak scalar takes the carried tile's dtype
        atom = weak_as(atom, want.dtype, "astype")
    if atom.type.shape != want.shape or atom.type.dtype is not want.dtype:
        raise located(
            TileTypeError(
                f"loop-carried `{name}` is {want.strong()} before the loop but {atom.type.strong()} after the body; "
                f"a carried tile must keep its shape and dtype (convert with .astype(tl.{want.dtype.name}))"
            )
        )
    if isinstance(atom, Literal) or atom.type.weak != want.weak:
        atom = bind1(P.full, [atom], "range", shape=want.shape, dtype=want.dtype).var
    return atom


def _substitute(block: Block, mapping: dict):
    if not mapping:
        return
    for eqn in block.eqns:
        eqn.inputs = tuple(mapping.get(a, a) if isinstance(a, Var) else a for a in eqn.inputs)
        for v in eqn.params.values():
            if isinstance(v, Block):
                _substitute(v, mapping)
    block.results = [mapping.get(a, a) if isinstance(a, Var) else a for a in block.results]


# ---------------------------------------------------------------- source rewrite

_NESTED_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp, ast.SetComp,
                  ast.DictComp, ast.GeneratorExp)  # fmt: skip


def _walk_scope(nodes):
    """Nodes of ``nodes`` without descending into nested function, class or comprehension scopes."""
    stack = list(reversed(nodes))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, _NESTED_SCOPES):
            stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _assigned_names(body):
    names = []

    def add(name):
        if name not in names:
            names.append(name)

    for node in _walk_scope(body):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            add(node.id)
        elif isinstance(node, _NESTED_SCOPES[:2] + (ast.ClassDef,)):
            add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, _NESTED_SCOPES[4:]):  # a walrus in a comprehension binds in the body's scope
            for inner in ast.walk(node):
                if isinstance(inner, ast.NamedExpr):
                    add(inner.target.id)
    return names


def _declared(body, kinds) -> set:
    """The names ``global`` (or ``nonlocal``: ``kinds``) statements of this scope declare."""
    return {n for node in _walk_scope(body) if isinstance(node, kinds) for n in node.names}


def _rebound_by_closures(fn, own: set) -> list:
    """Names of ``fn``'s own scope (``own``) that functions nested in it rebind through ``nonlocal``."""
    inner = [n for node in ast.walk(fn) if isinstance(node, ast.Nonlocal) for n in node.names]
    return [n for n in dict.fromkeys(inner) if n in own]


_OUTSIDE = (
    "is declared global or nonlocal, outside the kernel, and assigned inside a tl.range loop: the body is "
    "traced once, so it would be assigned once, not per iteration; keep the value in a name of the kernel "
    "(it is then carried)"
)


def _params(fn) -> set:
    return {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)}


def _check_body(body, filename, outside: set, params: set):
    """Refuses what a body traced once cannot mean: control flow out of it, and changes to
    state outside the kernel's own names (``outside``: its global and nonlocal names)."""

    def fail(node, what):
        loc = SourceLoc(filename, node.lineno, node.col_offset, node.end_col_offset)
        raise TileSyntaxError(f"`{what}` inside a tl.range loop cannot be traced; restructure with tl.where", loc)

    loops = (ast.For, ast.While, ast.AsyncFor)
    local = set(_assigned_names(body)) | params  # (a parameter's own error says more: arrays take tl.store)
    for node in _walk_scope(body):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id in outside:
            raise TileSyntaxError(
                f"`{node.id}` {_OUTSIDE}", SourceLoc(filename, node.lineno, node.col_offset, node.end_col_offset)
            )
        if isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom)):
            fail(node, type(node).__name__.lower())
        if isinstance(node, (ast.Break, ast.Continue)) and not _inside(node, body, loops):
            fail(node, type(node).__name__.lower())
        if isinstance(node, ast.Delete) and any(isinstance(t, ast.Name) for t in node.targets):
            fail(node, "del")  # (the body returns every name it assigns)
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                _check_store(target, local, filename)


def _check_store(target, local, filename):
    """Refuses ``lst[0] += 1`` or ``obj.x = t`` on an object from before the loop: the body runs once,
    at trace time, so the change would happen once, not per iteration (an object the body itself
    makes, a list of this iteration's tiles, is fine)."""
    if isinstance(target, (ast.Tuple, ast.List)):
        for t in target.elts:
            _check_store(t, local, filename)
    elif isinstance(target, ast.Starred):
        _check_store(target.value, local, filename)
    elif isinstance(target, (ast.Subscript, ast.Attribute)):
        root = target.value
        while isinstance(root, (ast.Subscript, ast.Attribute)):
            root = root.value
        if not (isinstance(root, ast.Name) and root.id in local):
            raise TileSyntaxError(
                f"`{ast.unparse(target)}` is assigned inside a tl.range loop, but it belongs to an object from "
                "before the loop: the body is traced once, so the change would be made once, not per iteration; "
                "keep the value in a plain name (a tile or scalar the body rebinds is carried)",
                SourceLoc(filename, target.lineno, target.col_offset, target.end_col_offset),
            )


def _inside(target, body, kinds):
    """Whether ``target`` sits in a loop nested inside ``body`` (so break/continue are Python's)."""
    for node in _walk_scope(body):  # (a loop's `else:` is not inside it: a break there ends the loop around)
        if isinstance(node, kinds) and any(n is target for stmt in node.body for n in ast.walk(stmt)):
            return True
    return False


class _LoopRewriter(ast.NodeTransformer):
    def __init__(self, is_tl_range, filename):
        self.is_tl_range = is_tl_range
        self.filename = filename
        self.scopes = []  # per enclosing function: what visit_FunctionDef says
        self.count = itertools.count(1)
        self.changed = False

    def visit_FunctionDef(self, node):
        # its names outside the kernel: a global, a nonlocal no function of the kernel around it binds
        # (a def nested in the kernel shares the kernel's names); and those its closures rebind
        declared = _declared(node.body, (ast.Global, ast.Nonlocal))
        bound = (set(_assigned_names(node.body)) | _params(node)) - declared
        inner = [scope[3] for scope in self.scopes]  # (the functions of the kernel around it)
        outside = _declared(node.body, ast.Global) | {
            n for n in _declared(node.body, ast.Nonlocal) if not any(n in b for b in inner)
        }
        self.scopes.append((outside, _rebound_by_closures(node, bound), _params(node), bound))
        try:
            return self.generic_visit(node)
        finally:
            self.scopes.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_For(self, node):
        self.generic_visit(node)  # inner loops first
        if not (isinstance(node.iter, ast.Call) and self.is_tl_range(node.iter.func)):
            return node
        loc = SourceLoc(self.filename, node.lineno, node.col_offset, node.end_col_offset)
        if not isinstance(node.target, ast.Name):
            raise TileSyntaxError("the target of a tl.range loop must be a single name", loc)
        if node.orelse:
            raise TileSyntaxError("`for ... else` is not supported with tl.range", loc)
        outside, by_closures, _, _ = self.scopes[-1] if self.scopes else (set(), [], set(), set())
        kernel_params = self.scopes[0][2] if self.scopes else set()
        _check_body(node.body, self.filename, outside, kernel_params)
        self.changed = True
        assigned = _assigned_names(node.body)
        if bound_outside := [n for n in assigned if n in outside]:  # (by an import, a def, a walrus: not a plain `=`)
            raise TileSyntaxError(f"`{bound_outside[0]}` {_OUTSIDE}", loc)
        assigned += [n for n in by_closures if n not in assigned and n not in outside]
        names = [n for n in assigned if n != node.target.id]
        fn_name = f"__tl_body_{next(self.count)}"
        args = [ast.arg(arg=node.target.id)] + [ast.arg(arg=f"__tl_in_{n}") for n in names]
        ret = ast.Return(value=ast.Tuple(elts=[ast.Name(id=n, ctx=ast.Load()) for n in names], ctx=ast.Load()))
        # the carried names are the kernel's own while the body is traced (nonlocal, set from the
        # arguments first): a closure defined before the loop that reads one sees this iteration's
        enter = [ast.Nonlocal(names=names)] if names else []
        enter += [
            ast.Assign(targets=[ast.Name(id=n, ctx=ast.Store())], value=ast.Name(id=f"__tl_in_{n}", ctx=ast.Load()))
            for n in names
        ]
        fn = ast.FunctionDef(
            name=fn_name,
            args=ast.arguments(posonlyargs=[], args=args, kwonlyargs=[], kw_defaults=[], defaults=[]),
            body=enter + node.body + [ret],
            decorator_list=[],
            returns=None,
            type_params=[],
        )
        call = ast.Call(
            func=ast.Name(id="__tl_loop", ctx=ast.Load()),
            args=[
                node.iter,
                ast.Name(id=fn_name, ctx=ast.Load()),
                ast.Tuple(elts=[ast.Constant(n) for n in names], ctx=ast.Load()),
                ast.Call(func=ast.Name(id="locals", ctx=ast.Load()), args=[], keywords=[]),
                ast.Constant(node.target.id),
            ],
            keywords=[],
        )
        # The index is rebound too, so that using it after the loop is an error (not an older value).
        elts = [ast.Name(id=n, ctx=ast.Store()) for n in (*names, node.target.id)]
        assign = ast.Assign(targets=[ast.Tuple(elts=elts, ctx=ast.Store())], value=call)
        for new in (fn, ret, assign):
            ast.copy_location(new, node)
        ast.copy_location(call, node.iter)  # errors in the loop as a whole point at `tl.range(...)`
        return [fn, assign]


def source_lines(fn) -> list:
    """The lines of ``fn``'s file as they are now, when it is decorated: the file may be edited
    before the kernel is first traced (its line numbers would then point into other code)."""
    fn = inspect.unwrap(fn)  # (a wrapped kernel is refused below if it has loops)
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    linecache.checkcache(code.co_filename)
    return linecache.getlines(code.co_filename, fn.__globals__)


def rewrite_loops(fn, lines: list):
    """``fn`` (whose file held ``lines`` when it was decorated) with its tl.range loops
    rewritten, or ``fn`` itself when it has none. It shares ``fn``'s closure cells, so it sees
    their values when it is traced, as ``fn`` would."""
    first = inspect.unwrap(fn).__code__.co_firstlineno
    try:
        lines = inspect.getblock(lines[first - 1 :])
    except (IndexError, SyntaxError, TypeError):
        lines = []
    if not lines:
        return fn  # no source (e.g. a REPL): plain tracing, and tl.range raises if used
    source = "".join(lines)
    indented = source[:1].isspace()
    tree = ast.parse(("if 1:\n" + source) if indented else source)
    ast.increment_lineno(tree, first - 1 - (1 if indented else 0))
    fdef = tree.body[0].body[0] if indented else tree.body[0]
    fdef.decorator_list = []

    namespace = dict(vars(builtins))
    namespace.update(fn.__globals__)
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
    namespace.update((name, value) for name, cell in cells.items() if (value := read_cell(cell)) is not EMPTY)

    def is_tl_range(expr):
        try:
            return eval(compile(ast.Expression(expr), "<tilelang>", "eval"), namespace) is range
        except Exception:
            return False

    filename = fn.__code__.co_filename
    rewriter = _LoopRewriter(is_tl_range, filename)
    fdef = rewriter.visit(fdef)
    if not rewriter.changed:
        return fn
    if inspect.unwrap(fn) is not fn:  # (the source read is the wrapped function's: the rewrite would drop the wrapper)
        raise TileSyntaxError(
            f"`{fn.__name__}` is wrapped by another decorator under @tl.tile_kernel, and its tl.range loops are "
            "rewritten from the source of the function itself: put @tl.tile_kernel directly on the function",
            SourceLoc(filename, fdef.lineno, fdef.col_offset, fdef.col_offset + 3 + len(fdef.name)),
        )
    # compiled inside a function whose locals are fn's free variables, so that they stay free
    # variables: the new function is then made with fn's own cells
    factory = ast.FunctionDef(
        name="__tl_factory",
        args=ast.arguments(
            posonlyargs=[], args=[ast.arg(arg=a) for a in ("__tl_loop", *cells)],
            kwonlyargs=[], kw_defaults=[], defaults=[],
        ),
        body=[fdef, ast.Return(value=ast.Name(id=fdef.name, ctx=ast.Load()))],
        decorator_list=[], returns=None, type_params=[],
    )  # fmt: skip
    module = ast.fix_missing_locations(ast.Module(body=[ast.copy_location(factory, fdef)], type_ignores=[]))
    (code,) = (c for c in compile(module, filename, "exec").co_consts[0].co_consts if isinstance(c, types.CodeType))
    closure = tuple(types.CellType(run_loop) if n == "__tl_loop" else cells[n] for n in code.co_freevars)
    new = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, closure)
    new.__kwdefaults__ = fn.__kwdefaults__
    return new
