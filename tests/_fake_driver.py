"""A CUDA driver made of ctypes callbacks, so the C launcher (tilelang._launch) runs for
real with no GPU: cuLaunchKernel records each launch's grid, block, stream and parameters
(read back from the buffer the launcher packed, by their struct codes, and ``map_count``
tensor maps of 128 bytes after them); cuCtxGetCurrent and cuCtxSetCurrent keep a current
context."""

from __future__ import annotations

import ctypes
import struct

from tilelang._backends.cuda_driver import launcher_module

_LAUNCH = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
    ctypes.c_void_p,
)  # fmt: skip
_GET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))
_SET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)

CONTEXT = 0xC0


class FakeDriver:
    def __init__(self, codes: str, threads: int = 128, shared: int = 0, current: int | None = CONTEXT, map_count=0):
        self.codes, self.current, self.threads, self.shared = codes, current, threads, shared
        self.launches, self.switches, self.result, self.map_count, self.maps = [], [], 0, map_count, []
        self.errors = []
        self._callbacks = (_LAUNCH(self._launch), _GET(self._get), _SET(self._set))  # alive as long as we are
        self.launcher_entry_points = tuple(ctypes.cast(c, ctypes.c_void_p).value for c in self._callbacks)
        Launcher = launcher_module().Launcher
        self.launcher = Launcher(0xF00, threads, shared, codes, CONTEXT, self.launcher_entry_points, self._failed, None)

    def _launch(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        values = tuple(
            struct.unpack(code, ctypes.string_at(params[i], struct.calcsize(code)))[0]
            for i, code in enumerate(self.codes)
        )
        self.launches.append(((gx, gy, gz), stream or 0, values, self.current))
        self.maps = [ctypes.string_at(params[len(self.codes) + j], 128) for j in range(self.map_count)]
        assert (function, bx, by, bz, shared, extra) == (0xF00, self.threads, 1, 1, self.shared, None)
        return self.result

    def _get(self, out):
        out[0] = self.current
        return 0

    def _set(self, context):
        self.switches.append(context)
        self.current = context
        return 0

    def _failed(self, result):
        self.errors.append(result)
        raise RuntimeError(f"launch failed: {result}")

    @property
    def values(self):
        """The parameters of the last launch."""
        return self.launches[-1][2]
