/* tilelang._launch: the launch hot path in C.

   A small kernel is launch-bound. On the H200 host the driver's cuLaunchKernel alone costs
   ~4-5 us and torch.add ~5.5-9 in all; the same checks, reads and packing in Python (a
   generated function, struct, cuda.bindings) added ~6 us, here they add ~2.5 for three
   torch tensors (benchmarks/launch_breakdown.py, docs/runtime.md). Three types, the
   Launcher here, FastPath and CallSite in tilelang/_fast_path.c:

   Launcher(function, threads, shared, codes, context, entry_points, failed, kernel,
            maps=(), encode=0, aligned=(), general=None)
       one kernel loaded on one GPU. launcher(grid, stream, flat) packs ``flat`` (one value
       per parameter, converted by its struct code in ``codes``) into a buffer on the stack
       and calls cuLaunchKernel with ``context`` current (restoring the caller's after).
       ``entry_points`` are the addresses of cuLaunchKernel, cuCtxGetCurrent and
       cuCtxSetCurrent (tests pass fakes); a failed launch calls failed(result) to raise.
       ``kernel`` (what holds the loaded code) is kept alive as long as the launcher.
       A kernel that copies with TMA takes tensor maps after its parameters: ``maps`` says
       each one's array (the index of its pointer parameter, shape and strides following),
       box (innermost first) and swizzle mode; each launch encodes them with ``encode``
       (cuTensorMapEncodeTiled) from the values packed. A kernel may also take arrays to be
       aligned (thread_ir.array_aligned): ``aligned`` says each one's pointer parameter, rank
       and itemsize. Where an array breaks the rules (thread_ir.tensor_map_ok, array_aligned,
       checked here too) the launch is that of the kernel built for any array instead: the
       Launcher ``general()`` returns, once.

   The parameter buffer lives on the stack (the driver copies it at the call), so Python
   code run while a call is read (a tensor's methods, say) cannot clobber another's. */

#include "_launch.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------ packing */

static int in_range(long long v, long long lo, long long hi) {
    if (v < lo || v > hi) {
        PyErr_SetString(PyExc_OverflowError, "kernel parameter out of range");
        return 0;
    }
    return 1;
}

/* ``value`` converted by struct code ``code`` into ``slot``, as struct.pack would
   (16-bit floats and Python floats travel as float32). 0 and an exception on failure. */
static int put(char code, PyObject *value, char *slot) {
    long long s;
    unsigned long long u;
    double d;
    switch (code) {
    case '?': {
        int truth = PyObject_IsTrue(value);
        if (truth < 0) return 0;
        *(unsigned char *)slot = (unsigned char)truth;
        return 1;
    }
    case 'b': case 'h': case 'i': case 'q':
        s = PyLong_AsLongLong(value);
        if (s == -1 && PyErr_Occurred()) return 0;
        if (code == 'b') return in_range(s, INT8_MIN, INT8_MAX) && (*(int8_t *)slot = (int8_t)s, 1);
        if (code == 'h') return in_range(s, INT16_MIN, INT16_MAX) && (*(int16_t *)slot = (int16_t)s, 1);
        if (code == 'i') return in_range(s, INT32_MIN, INT32_MAX) && (*(int32_t *)slot = (int32_t)s, 1);
        memcpy(slot, &s, 8);
        return 1;
    case 'B': case 'H': case 'I': case 'Q': {
        PyObject *index = PyNumber_Index(value);
        if (index == NULL) return 0;
        u = PyLong_AsUnsignedLongLong(index);
        Py_DECREF(index);
        if (u == (unsigned long long)-1 && PyErr_Occurred()) return 0;
        if ((code == 'B' && u > UINT8_MAX) || (code == 'H' && u > UINT16_MAX) || (code == 'I' && u > UINT32_MAX)) {
            PyErr_SetString(PyExc_OverflowError, "kernel parameter out of range");
            return 0;
        }
        if (code == 'B') *(uint8_t *)slot = (uint8_t)u;
        else if (code == 'H') *(uint16_t *)slot = (uint16_t)u;
        else if (code == 'I') *(uint32_t *)slot = (uint32_t)u;
        else memcpy(slot, &u, 8);
        return 1;
    }
    case 'f': case 'd':
        d = PyFloat_AsDouble(value);
        if (d == -1.0 && PyErr_Occurred()) return 0;
        if (code == 'f') {
            float f = (float)d; /* IEEE rounding */
            if (isinf(f) && !isinf(d)) { /* NumPy's float32 says so (a warning): the full path's call */
                PyErr_SetString(PyExc_OverflowError, "a float beyond float32's range");
                return 0;
            }
            memcpy(slot, &f, 4);
        } else {
            memcpy(slot, &d, 8);
        }
        return 1;
    }
    PyErr_Format(PyExc_ValueError, "unknown parameter code %c", code);
    return 0;
}

int push(Launcher *self, Params *params, PyObject *value) {
    if (params->filled >= self->count) {
        PyErr_SetString(PyExc_ValueError, "more values than the kernel has parameters");
        return 0;
    }
    Py_ssize_t i = params->filled++;
    return put(self->codes[i], value, params->bytes + self->offsets[i]);
}

/* Tensor map ``j`` of the launcher, encoded from the array parameters packed in ``params``;
   0 where the array breaks thread_ir.tensor_map_ok's rules or the driver refuses it. */
static int encode_map(Launcher *self, Params *params, Py_ssize_t j, void *map) {
    const MapSpec *m = &self->maps[j];
    uint64_t pointer, dims[MAX_RANK], strides[MAX_RANK];
    uint32_t ones[MAX_RANK] = {1, 1, 1, 1, 1};
    memcpy(&pointer, params->bytes + self->offsets[m->param], 8);
    if (pointer % 16) return 0;
    for (unsigned d = 0; d < m->rank; d++) { /* the array's axis rank - 1 - d: innermost first */
        int64_t size, stride;
        memcpy(&size, params->bytes + self->offsets[m->param + m->rank - d], 8);
        memcpy(&stride, params->bytes + self->offsets[m->param + 2 * m->rank - d], 8);
        if (size < 1 || size >= ((int64_t)1 << 31)) return 0;
        int64_t bytes = stride * (int64_t)m->itemsize;
        if (d == 0 ? stride != 1 : (stride <= 0 || bytes >= ((int64_t)1 << 40) || bytes % 16)) return 0;
        dims[d] = (uint64_t)size;
        if (d) strides[d - 1] = (uint64_t)bytes;
    }
    /* 8- or 16-bit elements (UINT8 = 0, UINT16 = 1), no interleave, the swizzle, L2 promotion of 256 bytes,
       zeros out of bounds */
    return self->encode(map, m->itemsize == 1 ? 0 : 1, m->rank, (void *)(uintptr_t)pointer, dims, strides, m->box, ones, 0, m->swizzle, 3,
                        0) == 0;
}

/* Whether aligned array ``a`` of the launcher is as thread_ir.array_aligned says, in ``params``. */
static int array_aligned(Launcher *self, Params *params, const AlignedSpec *a) {
    int64_t pointer, size, stride;
    memcpy(&pointer, params->bytes + self->offsets[a->param], 8);
    if (pointer % 16) return 0;
    for (unsigned d = 0; d < a->rank; d++) {
        memcpy(&size, params->bytes + self->offsets[a->param + 1 + d], 8);
        memcpy(&stride, params->bytes + self->offsets[a->param + 1 + a->rank + d], 8);
        if (d + 1 < a->rank ? size > 1 && (stride * (int64_t)a->itemsize) % 16
                            : (size * (int64_t)a->itemsize) % 16 || (size > 1 && stride != 1))
            return 0;
    }
    return 1;
}

/* The launch of the kernel built for any array, with the parameters packed (the same ones). */
static PyObject *launch_general(Launcher *self, const unsigned grid[3], void *stream, Params *params) {
    if (!PyObject_TypeCheck(self->general, Py_TYPE(self))) {
        PyObject *made = PyObject_CallNoArgs(self->general);
        if (made == NULL) return NULL;
        if (!PyObject_TypeCheck(made, Py_TYPE(self)) || ((Launcher *)made)->map_count ||
            ((Launcher *)made)->aligned_count) {
            Py_DECREF(made);
            PyErr_SetString(PyExc_TypeError, "general() must return a Launcher taking no tensor maps or aligned arrays");
            return NULL;
        }
        Py_SETREF(self->general, made);
    }
    return launch((Launcher *)self->general, grid, stream, params);
}

/* cuLaunchKernel in the launcher's context (made current if it is not, the caller's
   restored after; a thread with none keeps it, as the runtime API does). */
PyObject *launch(Launcher *self, const unsigned grid[3], void *stream, Params *params) {
    if (params->filled != self->count) {
        PyErr_Format(PyExc_ValueError, "%zd values for %zd kernel parameters", params->filled, self->count);
        return NULL;
    }
    for (Py_ssize_t j = 0; j < self->aligned_count; j++)
        if (!array_aligned(self, params, &self->aligned[j])) return launch_general(self, grid, stream, params);
    void *pointers[MAX_PARAMS + MAX_MAPS];
    for (Py_ssize_t i = 0; i < self->count; i++) pointers[i] = params->bytes + self->offsets[i];
    _Alignas(64) char maps[MAX_MAPS][128];
    for (Py_ssize_t j = 0; j < self->map_count; j++) {
        if (!encode_map(self, params, j, maps[j])) return launch_general(self, grid, stream, params);
        pointers[self->count + j] = maps[j];
    }
    void *previous = NULL;
    int result = self->context_get(&previous);
    if (result == 0 && previous != self->context) result = self->context_set(self->context);
    if (result == 0)
        result = self->launch(self->function, grid[0], grid[1], grid[2], self->threads, 1, 1, self->shared, stream,
                              pointers, NULL);
    if (previous != NULL && previous != self->context) {
        int restored = self->context_set(previous);
        if (result == 0) result = restored;
    }
    if (result != 0) { /* failed(result) raises the error, named */
        PyObject *code = PyLong_FromLong(result);
        PyObject *none = code ? PyObject_CallOneArg(self->failed, code) : NULL;
        Py_XDECREF(code);
        Py_XDECREF(none);
        if (!PyErr_Occurred()) PyErr_Format(PyExc_RuntimeError, "cuLaunchKernel failed (%d)", result);
        return NULL;
    }
    Py_RETURN_NONE;
}

int read_grid(PyObject *grid, unsigned out[3]) {
    if (!PyTuple_Check(grid) || PyTuple_GET_SIZE(grid) != 3) {
        PyErr_SetString(PyExc_TypeError, "the grid is a tuple of three sizes");
        return 0;
    }
    for (int i = 0; i < 3; i++) {
        unsigned long size = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(grid, i));
        if (size == (unsigned long)-1 && PyErr_Occurred()) return 0;
        if (size > (i == 0 ? 0x7fffffffUL : 65535UL)) { /* CUDA's limits: a fast path declines, the full path names it */
            PyErr_SetString(PyExc_OverflowError, "a grid size past CUDA's limits");
            return 0;
        }
        out[i] = (unsigned)size;
    }
    return 1;
}

static PyObject *launcher_call(Launcher *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (PyVectorcall_NARGS(nargsf) != 3 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "launcher(grid, stream, flat)");
        return NULL;
    }
    unsigned grid[3];
    if (!read_grid(args[0], grid)) return NULL;
    void *stream = PyLong_AsVoidPtr(args[1]);
    if (stream == NULL && PyErr_Occurred()) return NULL;
    PyObject *flat = PySequence_Tuple(args[2]); /* owned: items stay while their conversions run Python */
    if (flat == NULL) return NULL;
    Params params = {.filled = 0};
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(flat); i++) {
        if (!push(self, &params, PyTuple_GET_ITEM(flat, i))) {
            Py_DECREF(flat);
            return NULL;
        }
    }
    Py_DECREF(flat);
    return launch(self, grid, stream, &params);
}

static PyObject *launcher_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    unsigned long long function, context, entry[3];
    unsigned threads, shared;
    const char *codes;
    Py_ssize_t count;
    PyObject *failed, *kernel, *maps = NULL, *aligned = NULL, *general = Py_None;
    unsigned long long encode = 0;
    static char *names[] = {"function", "threads", "shared", "codes", "context", "entry_points", "failed", "kernel",
                            "maps", "encode", "aligned", "general", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "KIIs#K(KKK)OO|O!KO!O", names, &function, &threads, &shared,
                                     &codes, &count, &context, &entry[0], &entry[1], &entry[2], &failed, &kernel,
                                     &PyTuple_Type, &maps, &encode, &PyTuple_Type, &aligned, &general))
        return NULL;
    Py_ssize_t map_count = maps ? PyTuple_GET_SIZE(maps) : 0;
    Py_ssize_t aligned_count = aligned ? PyTuple_GET_SIZE(aligned) : 0;
    if (map_count > MAX_MAPS) return PyErr_Format(PyExc_ValueError, "more than %d tensor maps", MAX_MAPS);
    if (aligned_count > MAX_ALIGNED) return PyErr_Format(PyExc_ValueError, "more than %d aligned arrays", MAX_ALIGNED);
    if (map_count && (!encode || general == Py_None))
        return PyErr_Format(PyExc_ValueError, "tensor maps need encode and general");
    if (aligned_count && general == Py_None) return PyErr_Format(PyExc_ValueError, "aligned arrays need general");
    if (count > MAX_PARAMS) return PyErr_Format(PyExc_ValueError, "more than %d kernel parameters", MAX_PARAMS);
    if (!entry[0] || !entry[1] || !entry[2]) return PyErr_Format(PyExc_ValueError, "a driver entry point is NULL");
    Launcher *self = (Launcher *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->function = (void *)(uintptr_t)function;
    self->context = (void *)(uintptr_t)context;
    self->launch = (LaunchFn)(uintptr_t)entry[0];
    self->context_get = (ContextGetFn)(uintptr_t)entry[1];
    self->context_set = (ContextSetFn)(uintptr_t)entry[2];
    self->threads = threads;
    self->shared = shared;
    self->count = count;
    memcpy(self->codes, codes, count);
    Py_ssize_t offset = 0; /* C's layout of the parameter list: each at its own alignment */
    for (Py_ssize_t i = 0; i < count; i++) {
        char c = codes[i];
        Py_ssize_t size = !c ? 0 : strchr("?bB", c) ? 1 : strchr("hH", c) ? 2 : strchr("iIf", c) ? 4 : strchr("qQd", c) ? 8 : 0;
        if (size == 0) {
            Py_DECREF(self);
            return PyErr_Format(PyExc_ValueError, "unknown parameter code %c", c);
        }
        offset = (offset + size - 1) / size * size;
        self->offsets[i] = (uint16_t)offset;
        offset += size;
    }
    if (offset > MAX_BYTES) {
        Py_DECREF(self);
        return PyErr_Format(PyExc_ValueError, "kernel parameters of %zd bytes (at most %d)", offset, MAX_BYTES);
    }
    self->map_count = map_count;
    for (Py_ssize_t j = 0; j < map_count; j++) { /* (param, rank, box (innermost first), swizzle, itemsize) */
        MapSpec *m = &self->maps[j];
        PyObject *box = NULL;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(maps, j), "nIO!II", &m->param, &m->rank, &PyTuple_Type, &box,
                              &m->swizzle, &m->itemsize) ||
            m->rank < 1 || m->rank > MAX_RANK || PyTuple_GET_SIZE(box) != m->rank || m->param < 0 ||
            m->param + 2 * (Py_ssize_t)m->rank >= count || (m->itemsize != 1 && m->itemsize != 2)) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "a tensor map is (param, rank, box, swizzle, itemsize 1 or 2)");
            Py_DECREF(self);
            return NULL;
        }
        for (unsigned d = 0; d < m->rank; d++) m->box[d] = (uint32_t)PyLong_AsUnsignedLong(PyTuple_GET_ITEM(box, d));
        if (PyErr_Occurred()) {
            Py_DECREF(self);
            return NULL;
        }
    }
    self->aligned_count = aligned_count;
    for (Py_ssize_t j = 0; j < aligned_count; j++) { /* (param, rank, itemsize) */
        AlignedSpec *a = &self->aligned[j];
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(aligned, j), "nII", &a->param, &a->rank, &a->itemsize) ||
            a->param < 0 || a->param + 2 * (Py_ssize_t)a->rank >= count) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "an aligned array is (param, rank, itemsize)");
            Py_DECREF(self);
            return NULL;
        }
    }
    self->encode = (EncodeFn)(uintptr_t)encode;
    self->general = Py_NewRef(general);
    self->failed = Py_NewRef(failed);
    self->kernel = Py_NewRef(kernel);
    self->vectorcall = (vectorcallfunc)launcher_call;
    return (PyObject *)self;
}

static void launcher_dealloc(Launcher *self) {
    Py_XDECREF(self->general);
    Py_XDECREF(self->failed);
    Py_XDECREF(self->kernel);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *launcher_offsets(Launcher *self, void *closure) {
    PyObject *offsets = PyTuple_New(self->count);
    for (Py_ssize_t i = 0; offsets && i < self->count; i++) {
        PyObject *offset = PyLong_FromLong(self->offsets[i]);
        if (offset == NULL) Py_CLEAR(offsets);
        else PyTuple_SET_ITEM(offsets, i, offset);
    }
    return offsets;
}

static PyObject *launcher_codes(Launcher *self, void *closure) {
    return PyUnicode_FromStringAndSize(self->codes, self->count);
}

static PyGetSetDef launcher_getset[] = {
    {"offsets", (getter)launcher_offsets, NULL, "each parameter's byte offset in the buffer", NULL},
    {"codes", (getter)launcher_codes, NULL, "each parameter's struct code", NULL},
    {NULL},
};

static PyMemberDef launcher_members[] = {
    {"kernel", T_OBJECT, offsetof(Launcher, kernel), READONLY, "what holds the loaded code"},
    {NULL},
};

PyTypeObject LauncherType = {
    CALLABLE_TYPE(Launcher),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = launcher_new,
    .tp_dealloc = (destructor)launcher_dealloc,
    .tp_getset = launcher_getset,
    .tp_members = launcher_members,
    .tp_doc = "A kernel loaded on one GPU: launcher(grid, stream, flat).",
};
