"""The host CPU as a target of the LLVM expression table, and a JIT for it.

:class:`HostTarget` gives ``llvm_values.op_value`` what it asks of a target on the host:
math functions through LLVM's intrinsics and libm (``tanhf``, ``erff``), ``fmod`` as
``frem``; rounding to a 16-bit float and float32 rounded to odd in integer arithmetic, bit
for bit what the GPU's ``cvt.rn`` / ``cvt.rz`` instructions do (round to nearest even,
subnormals, infinities and NaN kept), as no host instruction does them everywhere; Python's
integer floor division as the CUDA backend writes it (``cuda_arith.floor_divmod``, plain
LLVM). :func:`jit` compiles a module to machine code with llvmlite's MCJIT and returns a
function's address. The building blocks of a CPU backend that builds LLVM IR as the CUDA
one does; tests/test_llvm_values.py runs the expression table through them.
"""

from __future__ import annotations

import itertools
import threading
import weakref

from llvmlite import binding as llvm
from llvmlite import ir

from ..dtypes import DType
from .cuda_arith import floor_divmod

I1, I8, I16, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
F32, F64 = ir.FloatType(), ir.DoubleType()
_INTRINSIC = {"exp", "exp2", "log", "log2", "sqrt", "sin", "cos", "floor", "ceil", "fabs", "pow", "fma"}
_LIBM = {"tanh", "erf"}
# float8 formats: (mantissa bits, exponent bias, largest finite code, the code past it: NaN or infinity)
_FLOAT8 = {"float8_e4m3fn": (3, 7, 0x7E, 0x7F), "float8_e5m2": (2, 15, 0x7B, 0x7C)}


def _const(t, v):
    return ir.Constant(t, v)


class HostTarget:
    """What ``llvm_values.op_value`` needs of a target, building with ``builder`` on the host."""

    def __init__(self, builder: ir.IRBuilder):
        self.builder = builder

    def math(self, name: str, *args):
        b, t = self.builder, args[0].type
        if name == "fmod":
            return b.frem(*args)
        if name in _INTRINSIC:
            fn = b.module.declare_intrinsic(f"llvm.{name}", [t], ir.FunctionType(t, [t] * len(args)))
            return b.call(fn, list(args))
        symbol = name + ("f" if t == F32 else "")
        fn = b.module.globals.get(symbol) or ir.Function(b.module, ir.FunctionType(t, [t] * len(args)), symbol)
        return b.call(fn, list(args))

    def rounded(self, x, d: DType):
        """float32 → nearest ``d`` → float32."""
        return self.from_bits(self.bits(x, d), d)

    def bits(self, x, d: DType):
        """The bits (an i16, or i8) of float32 ``x`` rounded to the nearest 16- or 8-bit float
        ``d`` (ties to even)."""
        if d.bits == 8:
            return self._bits8(x, d)
        b = self.builder
        u = b.bitcast(x, I32)
        magnitude = b.and_(u, _const(I32, 0x7FFFFFFF))
        nan = b.icmp_unsigned(">", magnitude, _const(I32, 0x7F800000))
        if d.name == "bfloat16":
            quiet = b.or_(b.lshr(u, _const(I32, 16)), _const(I32, 0x40))
            even = b.and_(b.lshr(u, _const(I32, 16)), _const(I32, 1))
            up = b.lshr(b.add(b.add(u, _const(I32, 0x7FFF)), even), _const(I32, 16))
            return b.trunc(b.select(nan, quiet, up), I16)
        sign = b.and_(b.lshr(u, _const(I32, 16)), _const(I32, 0x8000))
        inf_or_nan = b.select(nan, _const(I32, 0x7E00), _const(I32, 0x7C00))
        huge = b.icmp_unsigned(">=", magnitude, _const(I32, 0x477FF000))  # 65520 and up: infinity
        special = b.select(b.icmp_unsigned(">=", magnitude, _const(I32, 0x7F800000)), inf_or_nan, _const(I32, 0x7C00))
        # below the smallest normal float16: a subnormal, magnitude * 2^24 rounded to an integer
        scaled = b.fmul(b.bitcast(magnitude, F32), _const(F32, 16777216.0))
        rint = b.call(b.module.declare_intrinsic("llvm.rint", [F32]), [scaled])
        subnormal = b.fptoui(rint, I32)
        even = b.and_(b.lshr(magnitude, _const(I32, 13)), _const(I32, 1))
        rounded = b.add(b.add(magnitude, _const(I32, 0xFFF)), even)
        normal = b.lshr(b.sub(rounded, _const(I32, 0x38000000)), _const(I32, 13))
        small = b.icmp_unsigned("<", magnitude, _const(I32, 0x38800000))
        out = b.select(huge, special, b.select(small, subnormal, normal))
        return b.trunc(b.or_(sign, out), I16)

    def _bits8(self, x, d: DType):
        """:meth:`bits` for a float8 ``d`` of ``m`` mantissa bits and exponent bias ``bias``: the
        magnitude's float32 bits rounded at mantissa bit ``m`` and rebiased (normals), or the
        magnitude in units of the smallest subnormal rounded to an integer (below the smallest
        normal). Past the largest finite value: NaN for float8_e4m3fn (it has no infinity),
        infinity for float8_e5m2 (as ml_dtypes and torch convert; the GPU's cvt saturates)."""
        b = self.builder
        m, bias, largest, over = _FLOAT8[d.name]
        u = b.bitcast(x, I32)
        sign = b.trunc(b.and_(b.lshr(u, _const(I32, 24)), _const(I32, 0x80)), I8)
        magnitude = b.and_(u, _const(I32, 0x7FFFFFFF))
        cut = 23 - m
        even = b.and_(b.lshr(magnitude, _const(I32, cut)), _const(I32, 1))
        up = b.add(b.add(magnitude, _const(I32, (1 << (cut - 1)) - 1)), even)
        normal = b.sub(b.lshr(up, _const(I32, cut)), _const(I32, (127 - bias) << m))
        scaled = b.fmul(b.bitcast(magnitude, F32), _const(F32, 2.0 ** (bias - 1 + m)))
        subnormal = b.fptoui(b.call(b.module.declare_intrinsic("llvm.rint", [F32]), [scaled]), I32)
        small = b.icmp_unsigned("<", magnitude, _const(I32, (128 - bias) << 23))
        code = b.select(small, subnormal, normal)
        code = b.select(b.icmp_unsigned(">", code, _const(I32, largest)), _const(I32, over), code)
        code = b.select(b.icmp_unsigned(">", magnitude, _const(I32, 0x7F800000)), _const(I32, 0x7F), code)  # NaN
        return b.or_(b.trunc(code, I8), sign)

    def _from_bits8(self, h, d: DType):
        b = self.builder
        m, bias, largest, _ = _FLOAT8[d.name]
        h = b.zext(h, I32)
        sign = b.shl(b.and_(h, _const(I32, 0x80)), _const(I32, 24))
        e, mantissa = b.lshr(b.and_(h, _const(I32, 0x7F)), _const(I32, m)), b.and_(h, _const(I32, (1 << m) - 1))
        tiny = b.fmul(b.uitofp(mantissa, F32), _const(F32, 2.0 ** (1 - bias - m)))  # exact
        tiny = b.bitcast(b.or_(b.bitcast(tiny, I32), sign), F32)
        normal = b.or_(sign, b.or_(b.shl(b.add(e, _const(I32, 127 - bias)), _const(I32, 23)),
                                   b.shl(mantissa, _const(I32, 23 - m))))  # fmt: skip
        quiet = b.select(b.icmp_unsigned("==", mantissa, _const(I32, 0)), _const(I32, 0), _const(I32, 0x400000))
        top = b.or_(b.or_(sign, _const(I32, 0x7F800000)), quiet)  # infinity, or a quiet NaN (as cvt gives)
        wide = b.select(b.icmp_unsigned(">", b.and_(h, _const(I32, 0x7F)), _const(I32, largest)), top, normal)
        return b.select(b.icmp_unsigned("==", e, _const(I32, 0)), tiny, b.bitcast(wide, F32))

    def from_bits(self, h, d: DType):
        """The float32 value of a 16- or 8-bit float's bits ``h`` (an i16, or i8)."""
        if d.bits == 8:
            return self._from_bits8(h, d)
        b = self.builder
        h = b.zext(h, I32)
        if d.name == "bfloat16":
            return b.bitcast(b.shl(h, _const(I32, 16)), F32)
        sign = b.shl(b.and_(h, _const(I32, 0x8000)), _const(I32, 16))
        e, m = b.and_(b.lshr(h, _const(I32, 10)), _const(I32, 0x1F)), b.and_(h, _const(I32, 0x3FF))
        subnormal = b.fmul(b.uitofp(m, F32), _const(F32, 2.0**-24))  # exact
        subnormal = b.bitcast(b.or_(b.bitcast(subnormal, I32), sign), F32)
        top = b.or_(b.or_(sign, _const(I32, 0x7F800000)), b.shl(m, _const(I32, 13)))
        normal = b.or_(b.or_(sign, b.shl(b.add(e, _const(I32, 112)), _const(I32, 23))), b.shl(m, _const(I32, 13)))
        wide = b.bitcast(b.select(b.icmp_unsigned("==", e, _const(I32, 31)), top, normal), F32)
        return b.select(b.icmp_unsigned("==", e, _const(I32, 0)), subnormal, wide)

    def pack16(self, d: DType, lo, hi):
        """Two float32s holding 16-bit ``d`` values → a uint32 of their bits, ``lo`` low."""
        b = self.builder
        words = [b.zext(self.bits(x, d), I32) for x in (lo, hi)]
        return b.or_(words[0], b.shl(words[1], _const(I32, 16)))

    def tf32_bits(self, x):
        """A float32 rounded to TF32 as ``cvt.rna.tf32.f32`` does (ties away; NaN kept): its bits."""
        b = self.builder
        u = b.bitcast(x, I32)
        rounded = b.and_(b.add(u, _const(I32, 0x1000)), _const(I32, 0xFFFFE000 - (1 << 32)))
        return b.select(b.fcmp_unordered("uno", x, x), u, rounded)

    def float32_odd(self, x, d: DType):
        """A float64 or a 32- or 64-bit integer → float32 rounded to odd (toward zero, the last
        bit set where inexact; a NaN stays NaN)."""
        b = self.builder
        if d.is_float:
            r = b.fptrunc(x, F32)
            back = b.fpext(r, F64)
            inexact = b.fcmp_ordered("!=", back, x)  # (false for a NaN)
            away = b.fcmp_ordered(">", self.math("fabs", back), self.math("fabs", x))
        else:  # x = hi + lo, both exact in float64, so r - x is exact
            signed = d.kind == "i"
            wide = (b.sext if signed else b.zext)(x, I64)
            r = (b.sitofp if signed else b.uitofp)(x, F32)
            shift = _const(I64, 11)
            hi = b.shl(b.ashr(wide, shift) if signed else b.lshr(wide, shift), shift)
            lo = b.sub(wide, hi)
            to_f64 = b.sitofp if signed else b.uitofp
            diff = b.fsub(b.fsub(b.fpext(r, F64), to_f64(hi, F64)), b.sitofp(lo, F64))
            inexact = b.fcmp_ordered("!=", diff, _const(F64, 0.0))
            zero = _const(F64, 0.0)
            away = b.icmp_unsigned("==", b.fcmp_ordered(">", diff, zero), b.fcmp_ordered(">", b.fpext(r, F64), zero))
        u = b.bitcast(r, I32)
        stepped = b.select(away, b.sub(u, _const(I32, 1)), u)
        return b.select(inexact, b.bitcast(b.or_(stepped, _const(I32, 1)), F32), r)

    def floor_divmod(self, x, y, signed: bool):
        return floor_divmod(self.builder, x, y, signed)

    def fast(self, op, args):
        return None


_JIT_LOCK = threading.RLock()  # LLVM's global context and the one engine: one thread at a time
_ENGINE: list = []


def _engine():
    """The process's one MCJIT engine and its target machine (made once, under the lock:
    functions compiled by an engine made twice would dangle)."""
    with _JIT_LOCK:
        if not _ENGINE:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            machine = llvm.Target.from_default_triple().create_target_machine(opt=2)
            _ENGINE.append((llvm.create_mcjit_compiler(llvm.parse_assembly(""), machine), machine))
        return _ENGINE[0]


_NAMES = itertools.count()


def unique_name(prefix: str) -> str:
    """A symbol no other module of the process defines (MCJIT resolves names process-wide)."""
    return f"{prefix}_{next(_NAMES)}"


def host_module(name: str) -> ir.Module:
    """An empty module for the host (its triple and data layout)."""
    module = ir.Module(name=name)
    module.triple = llvm.get_process_triple()
    module.data_layout = str(_engine()[1].target_data)
    return module


_RELEASED: list = []  # modules whose owners are gone, taken out of the engine by the next jit


def jit(module: ir.Module, function: str, owner=None) -> int:
    """The address of ``function`` of ``module``, compiled for the host: kept while ``owner``
    lives (the whole process without one), then taken out of the engine at the next compile.
    The engine would otherwise keep every module it was given (~1 MB for a fuzzer's program:
    six fuzz workers on 23 GB thrashed after ~3000 programs each). No IR optimization
    pipeline runs before the machine code (-O2): on the unrolled kernels of the test suites it
    cost more than it saved (the elementwise and reduction suites, 2 cores: 35 s without,
    over 180 s with LLVM's O1 pipeline, 2026-12-03)."""
    text = str(module)
    with _JIT_LOCK:
        engine, _ = _engine()
        while _RELEASED:  # (here, not in the finalizer: a collection may run in the middle of a compile)
            engine.remove_module(_RELEASED.pop())
        parsed = llvm.parse_assembly(text)
        parsed.verify()
        engine.add_module(parsed)
        engine.finalize_object()
        if owner is not None:
            weakref.finalize(owner, _RELEASED.append, parsed)
        return engine.get_function_address(function)
