"""A DLPack producer for tests: any pointer, shape, strides, dtype and device, as a
``dltensor`` capsule (built with ctypes; the memory is never touched by the consumer)."""

import ctypes

KDL_CPU, KDL_CUDA = 1, 2
DTYPE_CODES = {"int": 0, "uint": 1, "float": 2, "bfloat": 4}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_capsule = ctypes.pythonapi.PyCapsule_New
_capsule.restype = ctypes.py_object
_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


_ALIVE = []  # the capsules point into their producers' structures: producers live to the end


class DLPackArray:
    """An array known only through ``__dlpack__`` / ``__dlpack_device__``."""

    def __init__(self, shape, strides=None, dtype=("float", 32), ptr=0x7F0000000000, device=(KDL_CUDA, 0)):
        self.device = device
        self._shape = (ctypes.c_int64 * len(shape))(*shape)
        self._strides = None if strides is None else (ctypes.c_int64 * len(strides))(*strides)
        self._managed = DLManagedTensor()
        tensor = self._managed.dl_tensor
        tensor.data, tensor.device, tensor.ndim = ptr, DLDevice(*device), len(shape)
        tensor.dtype = DLDataType(DTYPE_CODES[dtype[0]], dtype[1], 1)
        tensor.shape = self._shape
        if self._strides is not None:
            tensor.strides = self._strides

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        _ALIVE.append(self)  # a consumer's view may outlive this object
        return _capsule(ctypes.addressof(self._managed), b"dltensor", None)

    def __dlpack_device__(self):
        return self.device


def host_dlpack(array):
    """A NumPy array seen through DLPack only (its memory, its device: the host)."""
    itemsize = array.itemsize
    kind = {"i": "int", "u": "uint", "f": "float"}[array.dtype.kind]
    strides = [s // itemsize for s in array.strides]
    view = DLPackArray(array.shape, strides, (kind, itemsize * 8), array.__array_interface__["data"][0], (KDL_CPU, 0))
    view.owner = array  # keeps the memory alive
    return view
