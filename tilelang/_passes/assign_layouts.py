"""Layout assignment: for every tile value, which thread holds which elements.

Anchors fix the layouts that decide speed: a ``load`` (and a ``gather``'s indices)
takes the ``blocked`` layout, 16 bytes per thread of the narrowest array its values
meet, so both the loads and the stores of a chain of elementwise ops move 16 bytes at a
time; reductions take the ``sliced`` layout of their input; ``dot`` results a
register-blocked one, or on tensor cores the mma fragments (its operands then want
theirs). The rest propagate:

1. forward, by each primitive's ``layout`` rule below: elementwise results take their
   first operand that has a layout. Values cheap to rebuild anywhere (``full``, ``iota``,
   ``broadcast``, elementwise ops of those) stay *open*;
2. backward, in reverse program order: an open value takes the layout its first consumer
   wants of it (``wants`` rule: an elementwise op its own layout, a broadcast the
   ``unbroadcast`` of its own), so a statistic broadcast back over a row is born in the
   row's layout and an ``arange`` mask in its ``where``'s.

Loop-carried values take the layout their body produces (iterated to a fixed point), so a
loop does not convert its carried values every iteration. The kernel for misaligned arrays,
whose accesses are one element wide, is laid out again with its blocked layouts lane-first.
Where layouts still disagree, ``insert_conversions`` (the next pass) rebuilds or converts,
visibly.
"""

from __future__ import annotations

from .._ir.core import PRIMITIVES, Block, Eqn, Program, TileType, Var, tile_outputs
from .._ir.primitives import ELEMENTWISE
from .._lower.layout import (
    Layout,
    WgmmaLayout,
    blocked,
    joined,
    matmul_result,
    padded_size,
    pair_in_registers,
    reshaped,
    scalar_layout,
    selected,
    slice_fixed_bits,
    sliced,
    unbroadcast,
)
from .lower_dot import dot_layouts
from .lower_wgmma import operand_wants


def default_num_threads(program: Program) -> int:
    """Threads per block from the largest tile: about 32 elements per thread (independent
    loads in flight per thread, few warps to combine in reductions), at least 4 warps
    once a tile has 1024 elements, between 32 and 512; at least 8 warps for a load of 16 KB
    outside loops in a program without dots (a row of 4096 float32: 16 a thread). Measured
    on the H200 (benchmarks/run.py, 2026-12-05): float32 rows of 4096 run 0.5-3% faster at
    256 threads than at 128 (softmax 8192x4095 0.0700 vs 0.0724 ms), 16-bit rows of 4096
    (8 KB) keep 128 (bf16 layernorm and softmax 4% slower at 256), rows of 8192 float32
    were fastest at 256 already; a 1024-element vector add at 128."""
    largest = max((padded_size(v.type.shape) for _, v in tile_outputs(program.body)), default=1)
    t = 32
    while t < 512 and t * 32 < largest:
        t *= 2
    t = max(t, 128) if largest >= 1024 else t
    loaded = [padded_size(e.outputs[0].type.shape) * e.outputs[0].type.dtype.itemsize
              for e in program.body.eqns if e.prim.name == "load"]  # fmt: skip
    dots = any(eqn.prim.name == "dot" for eqn, _ in tile_outputs(program.body))
    return max(t, 256) if max(loaded, default=0) >= 16384 and not dots else t


# ------------------------------------------------------------ per-primitive rules
# layout(assigner, eqn) -> the output's layout, or None (open: decided by its consumers)
# wants(layouts, eqn, i) -> the layout input i must have, up to a renaming of register
# slots (same_threads), or None (any: the rule copes with whatever it gets)


def is_tile(x) -> bool:
    return isinstance(x, Var) and isinstance(x.type, TileType) and x.type.shape != ()


def wants(layouts: dict, eqn: Eqn, i: int):
    """The layout ``eqn`` needs its input ``i`` in (None: any)."""
    rule = eqn.prim.rules.get("wants")
    return rule(layouts, eqn, i) if rule and is_tile(eqn.inputs[i]) else None


def _rules(*names, layout=None, wants=None):
    for n in names:
        if layout:
            PRIMITIVES[n].rules["layout"] = layout
        if wants:
            PRIMITIVES[n].rules["wants"] = wants


def _first_known(a, eqn):
    known = [a.layouts[x] for x in eqn.inputs if is_tile(x) and a.layouts.get(x) is not None]
    return known[0] if known else None


def _output_layout(layouts, eqn, i):
    return layouts[eqn.outputs[0]] if eqn.inputs[i].type.shape == eqn.outputs[0].type.shape else None


def _reshape_layout(a, eqn):
    src = a.layouts.get(eqn.inputs[0])
    return None if src is None else reshaped(src, eqn.outputs[0].type.shape) or a.default(eqn.outputs[0])


def _slice_layout(a, eqn):
    """A flip keeps its input's layout; an aligned power-of-two run held in each thread's
    registers keeps what each thread held (``selected``); another slice takes the default."""
    x, out, p = eqn.inputs[0], eqn.outputs[0], eqn.params
    if x.type.shape == out.type.shape:
        return a.known(x)
    fixed = slice_fixed_bits(a.known(x), p["starts"], p["steps"], p["shape"])
    return (fixed is not None and selected(a.known(x), p["shape"], fixed)) or a.default(out)


def _split_wants(layouts, eqn, i):
    """The pairs held in registers; none yet where the halves are 0-d (their scalar layout
    fixed nothing: the pairs are open until a consumer or the default decides)."""
    given = layouts.get(eqn.inputs[0])
    return given and pair_in_registers(given)


def _indexed_wants(layouts, eqn, i):
    """Indices, values and mask of a gather, scatter or atomic: in one layout (a gather's or
    atomic's result's, else the first tile's)."""
    first = eqn.outputs[0] if eqn.outputs else next(x for x in eqn.inputs[1:] if is_tile(x))
    return None if eqn.inputs[i] is first else layouts[first]


_rules(*ELEMENTWISE, "cumsum", "cumprod", layout=_first_known, wants=_output_layout)
_rules("full", "iota", "broadcast", layout=lambda a, eqn: None)
_rules("broadcast", wants=lambda layouts, eqn, i: unbroadcast(layouts[eqn.outputs[0]], eqn.inputs[0].type.shape))
_rules("reshape", layout=_reshape_layout, wants=lambda layouts, eqn, i: reshaped(
    layouts[eqn.outputs[0]], eqn.inputs[0].type.shape))  # fmt: skip
_rules("load", "transpose", "cat", layout=lambda a, eqn: a.default(eqn.outputs[0]))
_rules("slice", layout=_slice_layout, wants=_output_layout)
_rules("join", layout=lambda a, eqn: joined(a.known(eqn.inputs[0])), wants=lambda layouts, eqn, i: sliced(
    layouts[eqn.outputs[0]], len(eqn.outputs[0].type.shape) - 1))  # fmt: skip
_rules("split", layout=lambda a, eqn: sliced(pair_in_registers(a.known(eqn.inputs[0])), eqn.inputs[0].type.ndim - 1),
       wants=_split_wants)  # fmt: skip
_rules("gather", "atomic", layout=lambda a, eqn: _first_known(a, eqn) or a.default(eqn.outputs[0]))
_rules("gather", "atomic", "scatter", wants=_indexed_wants)
_rules("histogram", layout=lambda a, eqn: a.default(eqn.outputs[0]), wants=lambda layouts, eqn, i: (
    layouts[eqn.inputs[0]] if i == 1 else None))  # fmt: skip
_rules(
    "reduce_sum", "reduce_prod", "reduce_max", "reduce_min", "argmax", "argmin", "reduce",
    layout=lambda a, eqn: sliced(a.known(eqn.inputs[0]), eqn.params["axis"]),
)  # fmt: skip
_rules("associative_scan", "sort", layout=lambda a, eqn: a.known(eqn.inputs[0]), wants=_output_layout)
_rules("reduce", wants=lambda layouts, eqn, i: layouts[eqn.inputs[0]] if i else None)  # (the tiles combine together)


def _dot_layout(a, eqn):
    plan = dot_layouts(eqn, a.t, a.arch)
    return plan[2] if plan else matmul_result(*eqn.outputs[0].type.shape, a.t)


def _dot_wants(layouts, eqn, i):
    """The accumulator in the result's layout; on mma.sync the operands in fragments, on
    wgmma two elements to a word (they go to shared memory)."""
    if i == 2:
        return layouts[eqn.outputs[0]]
    if isinstance(layouts[eqn.outputs[0]], WgmmaLayout):
        return operand_wants(layouts, eqn, i)
    plan = dot_layouts(eqn, layouts[eqn.outputs[0]].num_threads)
    return plan[i] if plan else None


_rules("dot", layout=_dot_layout, wants=_dot_wants)


class _Assigner:
    def __init__(self, program: Program, num_threads: int, arch: str, general: bool):
        self.t, self.arch = num_threads, arch
        self.layouts: dict[Var, Layout | None] = {}
        self.itemsize, dotted = _vector_itemsizes(program)
        self.lane_first = {v for v in self.itemsize if v not in dotted} if general else set()

    def default(self, v: Var) -> Layout:
        return blocked(v.type.shape, self.itemsize.get(v, v.type.dtype.itemsize), self.t, v in self.lane_first)

    def known(self, v: Var) -> Layout:
        """``v``'s layout, fixed now to the default if it is still open."""
        if self.layouts.get(v) is None:
            self.layouts[v] = self.default(v)
        return self.layouts[v]

    def forward(self, block: Block):
        for p in filter(is_tile, block.params):
            self.layouts.setdefault(p, self.default(p))
        for eqn in block.eqns:
            if eqn.prim.name == "range_loop":
                self.loop(eqn)
                continue
            for out in eqn.outputs:
                if is_tile(out):
                    self.layouts[out] = eqn.prim.rule("layout")(self, eqn)
                elif isinstance(out.type, TileType):
                    self.layouts[out] = scalar_layout(self.t)

    def backward(self, block: Block):
        for eqn in reversed(block.eqns):
            for out in filter(is_tile, eqn.outputs):
                self.known(out)
            if eqn.prim.name == "range_loop":
                self.backward_loop(eqn)
                continue
            for i, x in enumerate(eqn.inputs):
                if is_tile(x) and self.layouts.get(x) is None:
                    self.layouts[x] = wants(self.layouts, eqn, i)

    def loop(self, eqn: Eqn):
        body = eqn.params["body"]
        carried = list(zip(body.params[1:], eqn.inputs[3:], body.results))
        for param, init, _ in carried:
            self.layouts[param] = self.layouts.get(init)
        self.layouts[body.params[0]] = scalar_layout(self.t)
        for _ in range(4):  # carried layouts settle on what the body produces
            self.forward(body)
            changed = False
            for param, _, result in carried:
                produced = self.layouts.get(result) if isinstance(result, Var) else None
                if produced is not None and produced != self.layouts[param]:
                    self.layouts[param] = produced
                    changed = True
            if not changed:
                break
        for param, _, _ in carried:  # open still (a constant carried through unchanged): the default
            if param.type.shape:
                self.known(param)
        self.forward(body)  # with the carried layouts final
        for out, (param, _, _) in zip(eqn.outputs, carried):
            self.layouts[out] = self.layouts[param]

    def backward_loop(self, eqn: Eqn):
        body = eqn.params["body"]
        for param, init, result in zip(body.params[1:], eqn.inputs[3:], body.results):
            for x in (init, result):
                if is_tile(x) and self.layouts.get(x) is None:
                    self.layouts[x] = self.layouts[param]
        self.backward(body)


_ALONG = (
    "reshape",
    "broadcast",
    "cumsum",
    "cumprod",
    "associative_scan",
    "sort",
    "slice",
    "join",
    "split",
)  # (results: the inputs' layout)


def _vector_itemsizes(program: Program) -> tuple[dict, set]:
    """Per tile value, the itemsize that sizes its vectors: the narrowest array loaded or
    stored by the values it is computed elementwise with (so a bfloat16 row computed in
    float32 still moves 16 bytes per access), else its narrowest non-bool dtype; and the
    values computed elementwise with a dot's operand or what it transposes."""
    parent: dict = {}

    def find(v):
        while parent.get(v, v) is not v:
            v = parent[v]
        return v

    def join(a, b):
        if isinstance(a, Var) and isinstance(b, Var):
            parent[find(a)] = find(b)

    memory, operands, moved = [], [], {}

    def walk(block: Block):
        for eqn in block.eqns:
            name = eqn.prim.name
            if name in ELEMENTWISE or name in _ALONG:
                for x in eqn.inputs:
                    if isinstance(x, Var) and x.type.shape:
                        for out in eqn.outputs:  # (a split's two halves)
                            join(x, out)
            elif name == "reduce":  # (its tiles are combined together: one layout)
                for x in eqn.inputs:
                    join(x, eqn.inputs[0])
            elif name == "load":
                memory.append((eqn.outputs[0], eqn.inputs[0].type.dtype))
            elif name == "store":
                memory.append((eqn.inputs[1], eqn.inputs[0].type.dtype))
            elif name == "dot":
                operands.extend(eqn.inputs[:2])
            elif name == "transpose":  # (a dot's k.T: k is its operand too)
                moved[eqn.outputs[0]] = eqn.inputs[0]
            elif name == "range_loop":
                body = eqn.params["body"]
                for param, init, result, out in zip(body.params[1:], eqn.inputs[3:], body.results, eqn.outputs):
                    join(param, init), join(param, result), join(param, out)
                walk(body)

    walk(program.body)
    narrowest: dict = {}  # component -> itemsize of its narrowest array
    for v, d in memory:
        narrowest[find(v)] = min(narrowest.get(find(v), 16), d.itemsize)
    values = [v for _, v in tile_outputs(program.body) if v.type.shape]
    touched = set(narrowest)
    for v in values:  # components that touch no array: their narrowest dtype
        if v.type.dtype.is_bool or find(v) in touched:
            continue
        narrowest[find(v)] = min(narrowest.get(find(v), 16), v.type.dtype.itemsize)
    dotted = set()
    for x in operands:
        while isinstance(x, Var) and find(x) not in dotted:
            dotted.add(find(x))
            x = moved.get(x)
    return {v: narrowest.get(find(v), v.type.dtype.itemsize) for v in values}, {v for v in values if find(v) in dotted}


def assign_layouts(
    program: Program, num_threads: int | None = None, arch: str = "sm_80", general: bool = False
) -> tuple[dict, int]:
    """Layouts for every tile value of ``program`` and the block's thread count, for the
    target ``arch`` (which tensor cores dots take). ``general``: for the program that takes
    any array (misaligned ones), whose accesses are one element wide: the blocked layouts
    go ``lane_first`` (consecutive lanes on consecutive elements: each access coalesces,
    with no alignment test; each warp holds what it held, so a reduction crosses warps
    where it did), except for values that meet a dot's operands, also through a transpose
    (staged in words, copied ahead in 16-byte vectors)."""
    t = num_threads or default_num_threads(program)
    assigner = _Assigner(program, t, arch, general)
    assigner.forward(program.body)
    assigner.backward(program.body)
    return {v: lay for v, lay in assigner.layouts.items() if lay is not None}, t
