"""Where the host time of one launch goes: the pieces of tilelang's launch path measured
one by one in one process, against torch.add (uses tilelang internals; GPU and torch needed).

    python benchmarks/launch_breakdown.py

- full: ``add[1](x, y, out, TILE=1024)``, what a user calls;
- fast path: the fast path alone (C: its checks, reads and the launch);
- launcher: packing the parameters and ``cuLaunchKernel`` (C);
- driver: ``cuLaunchKernel`` called from numba-compiled code (no Python wrapper; minus
  "numba dispatch", the driver's own cost);
- numba dispatch: calling a numba-compiled function that does nothing.
"""

from __future__ import annotations

import ctypes
import struct
import sys

import numba
import torch
from launch import add, per_launch_us


def main():
    x, y, out = (torch.rand(1024, device="cuda") for _ in range(3))
    add[1](x, y, out, TILE=1024)  # the full path, which makes the fast path
    add[1](x, y, out, TILE=1024)
    torch.testing.assert_close(out, x + y)
    fast_path = add._fast_paths[0]
    launcher = fast_path.launcher
    flat = (x.data_ptr(), 1024, 1, y.data_ptr(), 1024, 1, out.data_ptr(), 1024, 1)
    buffer = ctypes.create_string_buffer(struct.pack("@" + launcher.codes, *flat))  # for the bare driver call
    pointers = (ctypes.c_void_p * len(flat))(*(ctypes.addressof(buffer) + o for o in launcher.offsets))

    u64, u32 = ctypes.c_uint64, ctypes.c_uint
    cu_launch = ctypes.CDLL("libcuda.so.1").cuLaunchKernel
    cu_launch.argtypes = [u64, u32, u32, u32, u32, u32, u32, u32, u64, u64, u64]
    cu_launch.restype = ctypes.c_int

    @numba.njit
    def driver_launch(function, gx, gy, gz, threads, shared, stream, params):
        return cu_launch(function, gx, gy, gz, threads, 1, 1, shared, stream, params, 0)

    @numba.njit
    def nothing(function, gx, gy, gz, threads, shared, stream, params):
        return 0

    function, params, threads = int(launcher.kernel.handle), ctypes.addressof(pointers), 128
    assert driver_launch(function, 1, 1, 1, threads, 0, 0, params) == 0  # compiled, and it launches
    sync = torch.cuda.synchronize
    kwargs = {"TILE": 1024}
    rows = {
        "full": lambda: add[1](x, y, out, TILE=1024),
        "fast path": lambda: fast_path((1, 1, 1), (x, y, out), kwargs, None, None),
        "launcher": lambda: launcher((1, 1, 1), 0, flat),
        "driver": lambda: driver_launch(function, 1, 1, 1, threads, 0, 0, params),
        "numba dispatch": lambda: nothing(function, 1, 1, 1, threads, 0, 0, params),
        "torch.add": lambda: torch.add(x, y, out=out),
    }
    for _ in range(2):  # the host is shared: twice, to see the noise
        print("  ".join(f"{name} {per_launch_us(fn, sync):.2f}" for name, fn in rows.items()), "(us)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
