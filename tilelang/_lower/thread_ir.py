"""The thread IR: what one thread of a block does, target-neutral.

A tile value is one register *array*: a ``Reg`` with one slot per element the thread holds
(``slots``; a scalar has one). Every statement applies to each slot of its destination (or
of its widest operand), reading one-slot operands as the same value for all: code does not
grow with the tile, and backends emit a loop over the slots that LLVM unrolls into
registers. Two ops move between slots: ``slot`` (each slot's own number mapped by a
``SlotMap``, where coordinates come from) and ``pick`` (``dst[r] = src[map(r)]``).
Statements: operations, global loads and stores (masked, in vectors of up to 16 bytes whose
fallback lives in the backend's intrinsic), atomics, shared-memory loads and stores,
barriers, asynchronous copies to shared memory (``AsyncCopy``, ``AsyncCommit``,
``AsyncWait``; on sm_90a whole tiles by the tensor memory accelerator, ``TmaLoad``, with the
mbarriers that count their bytes, ``Mbarriers``, ``MbarrierWait``), warp shuffles,
tensor-core loads and multiply-adds (``LdMatrix``, ``Mma``, ``Wgmma``) and structured ``Loop``.
Every backend (numba-cuda, CPU) emits from this form. Each statement names the fields
holding the registers it reads (``USES``) and defines (``DEFS``), so passes and backends
that only follow registers need not dispatch on statement classes.

Registers of 16-bit float type hold float32 values that are exactly representable in
that type: backends compute each operation producing one in float32 and round it once,
as the interpreter does.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar

from ..dtypes import DType
from ..dtypes import int64 as INT64
from ..dtypes import uint64 as UINT64
from ..errors import TileCompilerError


@dataclass(frozen=True)
class Reg:
    name: str
    dtype: DType
    slots: int = 1  # a register array of this many slots

    def __str__(self):
        return self.name


@dataclass(frozen=True)
class Imm:
    value: object
    dtype: DType

    def __str__(self):
        return f"{self.value!r}:{self.dtype.short}"


def slots(x) -> int:
    """How many slots an operand has (an immediate: one, the same for every slot)."""
    return x.slots if isinstance(x, Reg) else 1


@dataclass(frozen=True)
class SlotMap:
    """A map of slot numbers: ``map(r) = (const + sum(((r >> shift) & mask) << left)) ^ flip``
    over ``terms`` — register bits moved, dropped, fixed or complemented (a flip), as layouts
    move index bits."""

    terms: tuple = ()
    const: int = 0
    flip: int = 0

    @staticmethod
    def of_bits(pairs, const: int = 0, flip: int = 0) -> SlotMap:
        """The map sending bit ``a`` of ``r`` to bit ``b`` for each ``(a, b)`` in ``pairs``,
        runs of consecutive bits merged into one term."""
        terms = []
        for a, b in sorted(pairs):
            if (
                terms
                and terms[-1][0] + terms[-1][1].bit_length() == a
                and terms[-1][2] + terms[-1][1].bit_length() == b
            ):
                shift, mask, left = terms[-1]
                terms[-1] = (shift, mask * 2 + 1, left)
            else:
                terms.append((a, 1, b))
        return SlotMap(tuple(terms), const, flip)

    def __call__(self, r: int) -> int:
        return (self.const + sum(((r >> shift) & mask) << left for shift, mask, left in self.terms)) ^ self.flip

    def __str__(self):
        parts = [f"(r>>{s}&{m})<<{left}" for s, m, left in self.terms] + ([str(self.const)] if self.const else [])
        text = "+".join(parts) or "0"
        return f"({text})^{self.flip}" if self.flip else text


@dataclass
class Op:
    """``dst = op(args)`` for an op of ``OPS`` (params such as a dtype in ``attr``; the
    ``SlotMap`` of ``slot`` and ``pick``)."""

    dst: Reg
    op: str
    args: tuple
    attr: object = None
    USES: ClassVar = ("args",)
    DEFS: ClassVar = ("dst",)


@dataclass
class Load:
    """Global memory in groups of ``lanes`` consecutive slots: for group ``g``, slot
    ``g * lanes + i`` of ``dst`` is ``array[offset[g] + i]`` where ``mask[g]`` and (for
    vectors) ``first[g] <= i < last[g]``, else ``pad``. A backend moves a group in one access
    when all its lanes are in and the address is aligned to the group's bytes, else lane by
    lane: the fallback lives in the intrinsic, not in the program. Without ``first`` and
    ``last``, vector groups are whole or empty and aligned (the window's array is among the
    program's ``aligned``): each moves in one access where ``mask[g]``. With ``pack`` 2, each
    ``dst`` slot is a uint32 holding the raw bits of two consecutive 16-bit elements (the
    first in the low half; ``pad`` is the raw bits of one), so nothing reads the loaded
    words until every group's load is issued."""

    dst: Reg
    array: str
    offset: object
    mask: object
    pad: object
    lanes: int = 1
    first: object = None
    last: object = None
    pack: int = 1
    USES: ClassVar = ("offset", "mask", "pad", "first", "last")
    DEFS: ClassVar = ("dst",)


@dataclass
class Store:
    """``values`` to global memory, in groups of ``lanes`` slots as ``Load`` reads them (with
    ``pack`` 2, each ``values`` slot a uint32 of two 16-bit elements' bits, as ``Load``'s)."""

    array: str
    offset: object
    values: object
    mask: object
    lanes: int = 1
    first: object = None
    last: object = None
    pack: int = 1
    USES: ClassVar = ("offset", "values", "mask", "first", "last")
    DEFS: ClassVar = ()


@dataclass
class Print:
    """A line of ``text`` (a printf format) for each slot where ``mask`` holds, with ``args``
    (the block's ids, the slot's coordinates and its value, or with ``bits`` the value's bits
    in memory)."""

    text: str
    args: tuple
    mask: object
    bits: bool = False
    USES: ClassVar = ("args", "mask")
    DEFS: ClassVar = ()


@dataclass
class Atomic:
    """``dst = array[offset]; array[offset] = op(dst, value)`` where ``mask`` (else ``dst`` is
    0), atomically, once for each of the thread's ``count`` elements: an operand of fewer
    slots is the same for every element, and each element still combines (an atomic is not
    idempotent, as a store is). ``cas`` swaps in ``value`` where the element equals
    ``compare``. ``sem`` (docs/language.md) puts a ``fence.acq_rel.gpu`` before the updates
    (release) or after them (acquire); the barriers around are statements of their own."""

    dst: Reg
    array: str
    offset: object
    value: object
    op: str
    mask: object
    count: int = 1
    compare: object = None
    sem: str = "relaxed"
    USES: ClassVar = ("offset", "value", "mask", "compare")
    DEFS: ClassVar = ("dst",)


@dataclass
class SharedLoad:
    """``dst = buffer[index]``; with ``lanes`` > 1, slot ``r`` of ``index`` reads ``lanes``
    consecutive elements into slots ``lanes * r`` onwards of ``dst`` (one vector access: the
    index a multiple of ``lanes``, the buffer aligned to ``lanes`` elements)."""

    dst: Reg
    buffer: str
    index: object
    lanes: int = 1
    USES: ClassVar = ("index",)
    DEFS: ClassVar = ("dst",)


@dataclass
class SharedStore:
    """``buffer[index] = value`` where ``mask``; with ``add``, ``buffer[index] += value``
    atomically (threads hitting one element all count), once for each of the thread's
    ``count`` elements, as :class:`Atomic`. With ``lanes`` > 1, slot ``r`` of ``index`` (and
    of ``mask``) writes slots ``lanes * r`` onwards of ``value`` to ``lanes`` consecutive
    elements (one vector access: the index a multiple of ``lanes``), as :class:`SharedLoad`
    reads them."""

    buffer: str
    index: object
    value: object
    mask: object
    add: bool = False
    count: int = 1
    lanes: int = 1
    USES: ClassVar = ("index", "value", "mask")
    DEFS: ClassVar = ()


@dataclass
class LdMatrix:
    """A warp's ``ldmatrix.x4`` per group ``g`` of ``dst`` (all 32 lanes take part): four
    8 x 8 matrices of 16-bit values, matrix ``q``'s row ``i`` the 8 values (4 words) from word
    ``index[g]`` of ``buffer`` in lane ``8 q + i``. Lane ``l`` gets in word ``4 g + q`` the
    values at row ``l // 4``, columns ``2 (l % 4)`` and ``+ 1`` of matrix ``q`` (with
    ``trans``: rows ``2 (l % 4)`` and ``+ 1`` of column ``l // 4``), the first low."""

    dst: Reg
    buffer: str
    index: object
    trans: bool
    USES: ClassVar = ("index",)
    DEFS: ClassVar = ("dst",)


@dataclass
class AsyncCopy:
    """Per group ``g``, 16 bytes from global to shared memory, asynchronously (``cp.async``):
    the elements ``array[base + offset[g] + i]`` (eight 16-bit ones or four 32-bit ones) where
    ``mask[g]`` and ``first[g] <= i < last[g]`` (zero elsewhere) to words ``index[g]`` to ``+ 3``
    of ``buffer`` (16-bit ones two to a word, the first low). The thread sees them after an
    ``AsyncWait`` that covers the ``AsyncCommit`` group they were issued in; the other
    threads after a barrier after that. ``base`` (the window's corner, one value for all
    groups) is apart from the groups' ``offset`` so the backend adds it to the array's
    address once per window, not per copy. ``aligned`` (one value for all groups) promises
    that every group's offset from the array's first element is a multiple of its lanes and
    the group whole or empty: where the array's pointer is 16-byte aligned too, each group
    is one 16-byte copy (zeros for an empty one), without a branch
    (``Window.groups_aligned``; the CPU backend checks the promise)."""

    buffer: str
    index: object
    array: str
    base: object
    offset: object
    mask: object
    first: object
    last: object
    aligned: object
    USES: ClassVar = ("index", "base", "offset", "mask", "first", "last", "aligned")
    DEFS: ClassVar = ()


@dataclass
class AsyncCommit:
    """Closes this thread's group of the ``AsyncCopy`` statements issued since the last one."""

    USES: ClassVar = ()
    DEFS: ClassVar = ()


@dataclass
class AsyncWait:
    """Waits until at most ``pending`` of this thread's committed groups are still in flight."""

    pending: int
    USES: ClassVar = ()
    DEFS: ClassVar = ()


@dataclass
class Barrier:
    USES: ClassVar = ()
    DEFS: ClassVar = ()


@dataclass
class Shuffle:
    """``dst = src`` of another lane (all 32 lanes take part), by PTX's ``shfl.sync`` modes:
    ``bfly`` the lane ``lane ^ b``; ``up`` ``lane - b`` and ``down`` ``lane + b`` (a lane whose
    partner lies outside the warp keeps its own value); ``idx`` the lane with this lane's
    bits ``keep`` and ``b``'s others."""

    dst: Reg
    src: object
    b: int
    mode: str = "bfly"
    keep: int = 0
    USES: ClassVar = ("src",)
    DEFS: ClassVar = ("dst",)


@dataclass
class Mma:
    """A warp's tensor-core multiply-add (all 32 lanes take part): ``dst = a @ b + c`` over
    ``MI x NI`` result fragments of ``mma.sync.m16n8k16`` and ``KI`` k-steps, fragment ``(i,
    j)`` summed over ``kk`` in order. ``a`` and ``b`` are uint32 words, two ``dtype`` values
    each (the lower element low); for ``dtype`` float32, ``mma.sync.m16n8k8`` on TF32
    words, one value each (op ``tf32``). Their fragment ``(i, kk)`` is words ``4 * (kk + KI * i)``
    to ``+ 3`` of ``a``, ``(kk, j)`` words ``2 * (kk + KI * j)`` to ``+ 1`` of ``b``; result
    fragment ``(i, j)`` is slots ``4 * (j + NI * i)`` to ``+ 3`` of ``c`` and ``dst``
    (float32). Within a fragment, registers are where the PTX ISA puts them."""

    dst: Reg
    a: object
    b: object
    c: object
    shape: tuple  # (MI, NI, KI)
    dtype: DType
    USES: ClassVar = ("a", "b", "c")
    DEFS: ClassVar = ("dst",)


@dataclass
class Wgmma:
    """A warpgroup's tensor-core multiply-add from shared memory (sm_90a; all 128 threads
    of each warpgroup take part): ``dst = a @ b + c``, issued as one group (fence,
    ``wgmma.mma_async`` per instruction and k-step, commit) and complete at the ``WgmmaWait``
    on ``dst`` that follows (place_wgmma_waits.py puts it where ``dst`` is first needed, or,
    for a product a loop carries, on the loop's parameter in the next iteration or its exit
    edge; until then no statement may read ``dst`` or ``c`` or store into the tiles it reads).
    ``a`` (m x k) and ``b`` (k x n) are ``SwizzledTile`` s (swizzled.py) from word ``*_index``
    of ``*_buffer`` (the warpgroup's own rows of ``a``, columns of ``b``), K-major or not as
    ``*_k_major`` says.
    ``shape`` is ``(MB, NB, N, KS)``: instruction ``(mb, nb)`` (``m64nNk16``, ``k32`` for
    8-bit operands: ``dtypes`` are a's and b's) reads rows ``64 mb`` of ``a`` and columns
    ``N nb`` of ``b`` over ``KS`` k-steps of 16 (32) and
    accumulates slots ``N / 2 * (nb + NB * mb)`` onwards of ``c`` (float32), placed as the
    PTX ISA says (layout.py ``wgmma_layout``). With ``pending`` 1 the statement ends with
    ``wgmma.wait_group 1``: ``dst`` (then ``c`` itself, accumulated in place) is complete
    only at a later ``WgmmaWait`` (or the same dot's next ``Wgmma``, chained on it), and the
    tiles it reads must stay until then. With ``a_regs``, ``a`` is not in shared memory but
    in that register array of uint32 words, as ``a_tile`` (a ``RegisterTile``) says. ``c``
    None: no accumulator, ``dst = a @ b`` (each instruction's first k-step does not read
    ``dst``: PTX's scale-d 0, so no zeros are moved into it)."""

    dst: Reg
    c: object
    a_buffer: str
    a_index: object
    a_tile: object
    a_k_major: bool
    b_buffer: str
    b_index: object
    b_tile: object
    b_k_major: bool
    shape: tuple
    dtypes: tuple
    pending: int = 0
    a_regs: object = None
    USES: ClassVar = ("c", "a_index", "b_index", "a_regs")
    DEFS: ClassVar = ("dst",)


def k_step(d: DType) -> int:
    """The k of one wgmma instruction on operands of dtype ``d``: 32 bytes of each row."""
    return 32 // d.itemsize


@dataclass
class WgmmaWait:
    """Waits until at most ``pending`` of this warpgroup's wgmma groups are in flight (those
    committed after ``acc``'s product): the accumulators ``acc`` are then final."""

    acc: Reg
    pending: int
    USES: ClassVar = ("acc",)
    DEFS: ClassVar = ()


@dataclass
class ProxyFence:
    """Orders this thread's earlier shared-memory writes (stores, landed async copies)
    before reads by the tensor cores' async proxy (``fence.proxy.async.shared::cta``)."""

    USES: ClassVar = ()
    DEFS: ClassVar = ()


@dataclass(frozen=True)
class TensorMap:
    """How the tensor memory accelerator sees a 16- or 8-bit array for ``TmaLoad`` (sm_90a): boxes
    of ``box`` elements (one per axis, outermost first; the leading ones 1), rows of the box
    ``swizzle`` bytes apart in shared memory and their 16-byte chunks XOR-swizzled as
    ``SwizzledTile`` lays them out; elements past the array's bounds land as zeros. The
    launcher encodes one per launch from the array's pointer, shape and strides, when they
    allow one (``tensor_map_ok``); else the kernel built without TMA runs."""

    array: str
    box: tuple
    swizzle: int
    itemsize: int = 2


def array_aligned(pointer: int, shape, strides, itemsize: int) -> bool:
    """Whether an array (``strides`` in elements) is as a program's ``aligned`` arrays must be,
    its vectors' groups then whole or empty and aligned wherever a window's corner and extent
    along the last axis are multiples of the group (window.py): a 16-byte aligned pointer, a
    last axis of unit stride whose extent is a multiple of 16 bytes, and each other axis'
    stride a multiple of 16 bytes (where it has more than one element). Where one is not, the
    program lowered for any array runs (tilelang/_launch.c checks the same)."""
    if pointer % 16 or not shape:
        return pointer % 16 == 0
    if shape[-1] * itemsize % 16 or (shape[-1] > 1 and strides[-1] != 1):
        return False
    return all(n <= 1 or s * itemsize % 16 == 0 for n, s in zip(shape[:-1], strides[:-1]))


def takes_arrays(program, facts: dict) -> bool:
    """Whether ``program`` runs on arrays of these ``facts`` (name -> pointer, shape, strides in
    elements, itemsize; names missing: taken as it needs them): every array a ``TensorMap``
    reads one a tensor map can describe, every array it takes to be aligned so. Else the
    program lowered for any array runs (the C launcher decides by the same rules)."""
    rules = [(m.array, tensor_map_ok) for m in program.tensor_maps] + [(a, array_aligned) for a in program.aligned]
    return all(name not in facts or rule(*facts[name]) for name, rule in rules)


def tensor_map_ok(pointer: int, shape, strides, itemsize: int) -> bool:
    """Whether an array (``strides`` in elements) can be seen through a ``TensorMap``: a
    16-byte aligned pointer, sizes from 1 to 2**31 - 1 (box corners are int32) and each
    outer stride a positive multiple of 16 bytes below 2**40 (the driver's rules;
    tilelang/_launch.c checks the same)."""
    if pointer % 16 or not all(1 <= n < 2**31 for n in shape):
        return False
    return all(0 < s * itemsize < 2**40 and s * itemsize % 16 == 0 for s in strides[:-1]) and strides[-1] == 1


@dataclass
class Mbarriers:
    """Thread 0 makes ``count`` mbarriers of ``buffer`` (uint64 words) valid (arrival count 1,
    phase 0) or, with ``valid`` false, invalid again (their memory free for reuse)."""

    buffer: str
    count: int
    valid: bool
    USES: ClassVar = ()
    DEFS: ClassVar = ()


@dataclass
class TmaLoad:
    """Where ``pred`` (one value for all threads), thread 0 arms mbarrier ``stage`` of
    ``barriers`` for ``bytes`` and has the tensor memory accelerator copy boxes: box ``i``
    of ``tensor_maps[maps[i]]`` at the element coordinates that are its share of ``coords``
    (innermost first, as many as the map's rank, ``ranks[i]``) to word ``indices[i]`` of
    ``buffers[i]``. The copies complete the mbarrier's phase when they land
    (``MbarrierWait``)."""

    buffers: tuple
    indices: list
    maps: tuple
    ranks: tuple
    coords: list
    barriers: str
    stage: object
    bytes: int
    pred: object
    refill: bool = False  # in a pipelined loop, into the stage the iteration before read
    USES: ClassVar = ("indices", "coords", "stage", "pred")
    DEFS: ClassVar = ()


def box_coords(s: TmaLoad) -> list:
    """Each box's coordinates of a ``TmaLoad``, innermost first."""
    ends = [sum(s.ranks[: i + 1]) for i in range(len(s.ranks))]
    return [s.coords[end - rank : end] for rank, end in zip(s.ranks, ends)]


@dataclass
class MbarrierWait:
    """Waits until mbarrier ``stage`` of ``barriers`` has completed its phase of ``parity``
    (0 or 1): the copies it counted have landed, visible to this thread."""

    barriers: str
    stage: object
    parity: object
    USES: ClassVar = ("stage", "parity")
    DEFS: ClassVar = ()


@dataclass
class Loop:
    """``for index in range(start, stop, step)`` carrying ``params`` (initialised from
    ``inits``, updated to ``results`` at the end of each iteration; after the loop the
    params hold the final values)."""

    index: Reg
    start: object
    stop: object
    step: object
    params: list
    inits: list
    body: list
    results: list
    loc: object = None  # the user's tl.range line, for errors raised at run time
    USES: ClassVar = ("start", "stop", "step", "inits", "results")
    DEFS: ClassVar = ("index", "params")


@dataclass
class ArrayParam:
    """An array argument, passed as its data pointer, shape and strides (in elements)."""

    name: str
    dtype: DType
    ndim: int

    def reg(self, what: str, axis: int | None = None) -> Reg:
        return array_reg(self.name, what, axis)

    def regs(self) -> list:
        return [self.reg("ptr")] + [self.reg(w, d) for w in ("shape", "stride") for d in range(self.ndim)]


def array_reg(name: str, what: str, axis: int | None = None) -> Reg:
    """The register of an array parameter's pointer, or of its shape or stride along an axis."""
    return Reg(f"{name}__{what}{'' if axis is None else axis}", UINT64 if what == "ptr" else INT64)


@dataclass
class ScalarParam:
    reg: Reg


@dataclass
class ThreadProgram:
    name: str
    params: list
    num_threads: int
    shared: dict  # buffer name -> (dtype, number of elements)
    body: list
    shared_sites: dict = field(default_factory=dict)  # buffer name -> the user's line asking most of it
    tensor_maps: list = field(default_factory=list)  # the TensorMaps TmaLoad statements read, by index
    aligned: tuple = ()  # arrays moved in vectors taken to be aligned (``array_aligned``), by name


# ops and their arity; "round" keeps a 16-bit float register representable
OPS = {
    **dict.fromkeys(["add", "sub", "mul", "div", "div_approx", "floordiv", "mod", "pow", "maximum", "minimum"], 2),
    **dict.fromkeys(["and", "or", "xor", "shl", "shr", "eq", "ne", "lt", "le", "gt", "ge"], 2),
    **dict.fromkeys(["land", "lor", "fmod", "umulhi"], 2),
    **dict.fromkeys(["neg", "invert", "abs", "exp", "exp2", "exp2_ftz", "log", "log2", "sqrt", "rsqrt"], 1),
    **dict.fromkeys(["sin", "cos", "tanh", "erf", "sigmoid", "floor", "ceil", "convert"], 1),
    "select": 3,
    "fma": 3,
    "slot": 0,  # dst[r] = attr(r): the slot's number mapped (an int32)
    "pick": 1,  # dst[r] = arg[attr(r)]
    "from_bits": 1,  # a 16-bit float from its raw bits (a uint16)
    "pack16": 2,  # a uint32 of two 16-bit floats' bits (attr: their dtype), the first low
    "pack8": 4,  # a uint32 of four float8s' bits (attr: their dtype), the first lowest
    "tf32": 1,  # a float32 rounded to TF32 (to nearest, ties away): its bits in a uint32 dst, or the value
    "thread_id": 0,
    "block_id": 0,
    "num_blocks": 0,
}


def shared_alignment(name: str) -> int:
    """Bytes a shared buffer's start is aligned to: 1024 for swizzled tiles (swizzled.py), else 16."""
    return 1024 if name.startswith("swizzled_") else 16


def shared_offsets(shared: dict) -> tuple[dict, int]:
    """Byte offset of each shared buffer laid out one after another at aligned offsets
    (as the CUDA backend places them past the static limit), and the bytes they take in all."""
    offsets, at = {}, 0
    for name, (d, size) in shared.items():
        align = shared_alignment(name)
        at = -(-at // align) * align
        offsets[name] = at
        at += size * d.itemsize
    return offsets, at


def registers(s, fields):
    """The registers (and immediates) in ``s``'s ``fields`` (``USES``, ``DEFS``), flattened."""
    for name in fields:
        x = getattr(s, name)
        yield from (x if isinstance(x, (tuple, list)) else (x,))


def replace_uses(s, rename: dict):
    """``s`` with every register it reads (its ``USES`` fields) replaced as ``rename`` says."""

    def one(x):
        if isinstance(x, (tuple, list)):
            return type(x)(one(y) for y in x)
        return rename.get(x, x) if isinstance(x, Reg) else x

    return replace(s, **{name: one(getattr(s, name)) for name in s.USES})


def walk_statements(stmts):
    """Every statement, those inside ``Loop`` bodies included."""
    for s in stmts:
        yield s
        if isinstance(s, Loop):
            yield from walk_statements(s.body)


def extent(s) -> int:
    """How many times a statement applies: once per slot of what it defines or reads (per
    group of ``lanes`` slots for global loads and stores)."""
    if isinstance(s, Load):
        return s.dst.slots * s.pack // s.lanes
    if isinstance(s, SharedLoad):
        return s.dst.slots // s.lanes
    if isinstance(s, (Op, Shuffle)):
        return s.dst.slots
    if isinstance(s, Store):  # (the values may be one, stored everywhere)
        return max(slots(s.values) * s.pack // s.lanes, *(slots(x) for x in (s.offset, s.mask, s.first, s.last)))
    if isinstance(s, SharedStore) and s.lanes > 1:
        return max(slots(s.index), slots(s.mask), slots(s.value) // s.lanes)
    if isinstance(s, (Atomic, SharedStore)):  # (each element combines, even where its operands are uniform)
        return max(s.count, *(slots(x) for x in registers(s, s.USES)))
    return max((slots(x) for x in registers(s, s.DEFS + s.USES)), default=1)


def _text(x):
    if isinstance(x, (tuple, list)):
        return "(" + ", ".join(map(_text, x)) + ")"
    return "-" if x is None else str(x)


def _typed(r: Reg) -> str:
    return f"{r}:{r.dtype.short}" + (f"x{r.slots}" if r.slots > 1 else "")


def _lanes(s) -> str:
    if s.lanes == 1:
        return ""
    return f" lanes={s.lanes} " + ("whole" if s.first is None else f"in [{_text(s.first)}, {_text(s.last)})")


def _times(s) -> str:
    return "" if s.count == 1 else f" x{s.count}"


def _lines(stmts, indent):
    pad = " " * indent
    for s in stmts:
        if isinstance(s, Op):
            attr = f"[{getattr(s.attr, 'name', s.attr)}]" if s.attr is not None else ""
            yield f"{pad}{_typed(s.dst)} = {s.op}{attr} {' '.join(map(_text, s.args))}".rstrip()
        elif isinstance(s, Load):
            mask = f"mask={_text(s.mask)} pad={_text(s.pad)}{_lanes(s)}{' packed' if s.pack > 1 else ''}"
            yield f"{pad}{_typed(s.dst)} = load {s.array}[{_text(s.offset)}] {mask}"
        elif isinstance(s, Store):
            packed = " packed" if s.pack > 1 else ""
            yield f"{pad}store {s.array}[{_text(s.offset)}] = {_text(s.values)} mask={_text(s.mask)}{_lanes(s)}{packed}"
        elif isinstance(s, Atomic):
            operands = _text(s.value) if s.compare is None else f"{_text(s.compare)} {_text(s.value)}"
            sem = "" if s.sem == "relaxed" else f" {s.sem}"
            yield (
                f"{pad}{_typed(s.dst)} = atomic_{s.op}{sem} {s.array}[{_text(s.offset)}] {operands} "
                f"mask={_text(s.mask)}{_times(s)}"
            )
        elif isinstance(s, SharedLoad):
            lanes = f" lanes={s.lanes}" if s.lanes > 1 else ""
            yield f"{pad}{_typed(s.dst)} = shared {s.buffer}[{_text(s.index)}]{lanes}"
        elif isinstance(s, SharedStore):
            eq = "+=" if s.add else "="
            lanes = f" lanes={s.lanes}" if s.lanes > 1 else ""
            value = f"{_text(s.value)} mask={_text(s.mask)}{_times(s)}{lanes}"
            yield f"{pad}shared {s.buffer}[{_text(s.index)}] {eq} {value}"
        elif isinstance(s, Barrier):
            yield f"{pad}barrier"
        elif isinstance(s, Print):
            yield f"{pad}print {s.text.strip()!r} {' '.join(map(_text, s.args))} mask={_text(s.mask)}"
        elif isinstance(s, AsyncCopy):
            mask = f"mask={_text(s.mask)} 16 bytes in [{_text(s.first)}, {_text(s.last)}) aligned={_text(s.aligned)}"
            source = f"{s.array}[{_text(s.base)} + {_text(s.offset)}]"
            yield f"{pad}async shared {s.buffer}[{_text(s.index)}] = {source} {mask}"
        elif isinstance(s, AsyncCommit):
            yield f"{pad}async_commit"
        elif isinstance(s, AsyncWait):
            yield f"{pad}async_wait {s.pending}"
        elif isinstance(s, Shuffle):
            mode = {"bfly": "xor"}.get(s.mode, s.mode)
            keep = f" keep {s.keep}" if s.mode == "idx" else ""
            yield f"{pad}{_typed(s.dst)} = shuffle_{mode} {_text(s.src)} {s.b}{keep}"
        elif isinstance(s, LdMatrix):
            yield f"{pad}{_typed(s.dst)} = ldmatrix{'.trans' if s.trans else ''} {s.buffer}[{_text(s.index)}]"
        elif isinstance(s, Mma):
            mi, ni, ki = s.shape
            shape = (
                f"{mi}x{ni}x{ki} m16n8k8.tf32"
                if s.dtype.name == "float32"
                else f"{mi}x{ni}x{ki} m16n8k16.{s.dtype.short}"
            )
            yield f"{pad}{_typed(s.dst)} = mma[{shape}] {_text(s.a)} {_text(s.b)} {_text(s.c)}"
        elif isinstance(s, Wgmma):
            mb, nb, n, ks = s.shape
            kinds = ".".join(d.short for d in dict.fromkeys(s.dtypes))
            shape = f"{mb}x{nb}x{ks} m64n{n}k{k_step(s.dtypes[0])}.{kinds}"
            a = f"{s.a_buffer}[{_text(s.a_index)}]{'' if s.a_k_major else '.mn'}" if s.a_regs is None else s.a_regs
            b = f"{s.b_buffer}[{_text(s.b_index)}]{'' if s.b_k_major else '.mn'}"
            flight = f" in_flight={s.pending}" if s.pending else ""
            yield f"{pad}{_typed(s.dst)} = wgmma[{shape}] {a} {b} {_text(s.c)}{flight}"
        elif isinstance(s, ProxyFence):
            yield f"{pad}proxy_fence"
        elif isinstance(s, Mbarriers):
            yield f"{pad}mbarriers {s.buffer}[{s.count}] {'init' if s.valid else 'inval'}"
        elif isinstance(s, TmaLoad):
            boxes = ", ".join(
                f"{b}[{_text(at)}] = map{m}{_text(xs)}"
                for b, at, m, xs in zip(s.buffers, s.indices, s.maps, box_coords(s))
            )
            refill = "refill " if s.refill else ""
            yield f"{pad}tma {refill}{boxes} barrier={s.barriers}[{_text(s.stage)}] bytes={s.bytes} if {_text(s.pred)}"
        elif isinstance(s, MbarrierWait):
            yield f"{pad}mbarrier_wait {s.barriers}[{_text(s.stage)}] parity={_text(s.parity)}"
        elif isinstance(s, WgmmaWait):
            yield f"{pad}wgmma_wait {s.pending} {s.acc}"
        elif isinstance(s, Loop):
            carried = ", ".join(f"{_typed(p)}={_text(i)}" for p, i in zip(s.params, s.inits))
            yield f"{pad}for {s.index} in range({_text(s.start)}, {_text(s.stop)}, {_text(s.step)}) carry({carried}):"
            yield from _lines(s.body, indent + 4)
            yield f"{pad}    next {_text(s.results)}"
        else:
            raise TileCompilerError(f"unknown thread IR statement {s!r}")


def format_thread_program(prog: ThreadProgram) -> str:
    params = ", ".join(
        f"{p.name}:{p.dtype.short}[{','.join('?' * p.ndim)}]*"
        if isinstance(p, ArrayParam)
        else f"{p.reg}:{p.reg.dtype.short}"
        for p in prog.params
    )
    shared = " ".join(f"{n}:{d.short}[{size}]" for n, (d, size) in prog.shared.items())
    head = f"thread_program {prog.name}({params}) threads={prog.num_threads}" + (f" shared {shared}" if shared else "")
    maps = [
        f"    map{i} = tensor map of {m.array}, box {m.box}, {m.swizzle}-byte swizzle"
        for i, m in enumerate(prog.tensor_maps)
    ]
    if prog.aligned:  # (what array_aligned asks; the launch checks it)
        maps.append(f"    aligned {', '.join(prog.aligned)} (else the program for any array runs)")
    return "\n".join([head, *maps, *_lines(prog.body, 4)])


def verify_thread_program(prog: ThreadProgram) -> None:
    """Every register is assigned before it is read; ops are known with the right arity;
    operands have one slot or as many as the statement applies to."""
    defined = {p.reg for p in prog.params if isinstance(p, ScalarParam)}
    defined.update(r for p in prog.params if isinstance(p, ArrayParam) for r in p.regs())
    arrays = {p.name for p in prog.params if isinstance(p, ArrayParam)}

    def walk(stmts):
        for s in stmts:
            kind = type(s).__name__
            if isinstance(s, Op) and OPS.get(s.op) != len(s.args):
                raise TileCompilerError(f"thread IR: bad op {s.op} with {len(s.args)} operands")
            if isinstance(s, (Load, Store, Atomic, AsyncCopy)) and s.array not in arrays:
                raise TileCompilerError(f"thread IR: {kind} of unknown array {s.array}")
            n = extent(s)
            group = ("values",) if isinstance(s, Store) else ("value",) if isinstance(s, SharedStore) else ()
            for part in s.USES + s.DEFS:
                for x in registers(s, (part,)):
                    if isinstance(x, Reg) and part in s.USES and x not in defined and not isinstance(s, Loop):
                        raise TileCompilerError(f"thread IR: register {x} read before it is assigned ({kind})")
                    wide = n * getattr(s, "lanes", 1) // getattr(s, "pack", 1) if part in group + ("dst",) else n
                    whole = isinstance(s, (Loop, Mma, LdMatrix, Wgmma, WgmmaWait))  # (statements on whole arrays)
                    exempt = whole or (isinstance(s, Op) and s.op == "pick")
                    if slots(x) not in (1, wide) and not exempt:
                        raise TileCompilerError(f"thread IR: {x} has {slots(x)} slots in a {kind} over {wide}")
            if isinstance(s, Loop):
                for x in (s.start, s.stop, s.step, *s.inits):
                    if isinstance(x, Reg) and x not in defined:
                        raise TileCompilerError(f"thread IR: register {x} read before it is assigned (loop)")
                defined.add(s.index)
                defined.update(s.params)
                walk(s.body)
                for r in s.results:
                    if isinstance(r, Reg) and r not in defined:
                        raise TileCompilerError(f"thread IR: loop result {r} read before it is assigned")
            else:
                defined.update(x for x in registers(s, s.DEFS) if isinstance(x, Reg))

    walk(prog.body)
