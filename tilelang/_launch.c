/* tilelang._launch: the launch hot path in C.

   A small kernel is launch-bound. On the H200 host the driver's cuLaunchKernel alone costs
   ~4-5 us and torch.add ~5.5-9 in all; the same checks, reads and packing in Python (a
   generated function, struct, cuda.bindings) added ~6 us, here they add ~2.5 for three
   torch tensors (benchmarks/launch_breakdown.py, docs/runtime.md). Three types:

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

   FastPath(launcher, plan, keyword_plan, backend, device, current_stream, stream_handle,
            constant_key)
       the launch of calls alike one that went the full way (tilelang/_fastpath.py builds
       the plan). fast_path(grid, args, kwargs, backend, stream) checks the call is alike,
       reads its parameter values straight into the buffer and launches: True; any
       difference, False (nothing launched; the caller takes the full path).

   CallSite(fast_paths, grid, full)
       what kernel[grid] returns: its call tries the kernel's fast paths (a list the full
       path adds to), then full(*args, **kwargs).

   The parameter buffer lives on the stack (the driver copies it at the call), so Python
   code run while a call is read (a tensor's methods, say) cannot clobber another's. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <math.h>
#include <string.h>

typedef int (*LaunchFn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                        void **, void **);
typedef int (*ContextGetFn)(void **);
typedef int (*ContextSetFn)(void *);
typedef int (*EncodeFn)(void *, int, unsigned, void *, const uint64_t *, const uint64_t *, const uint32_t *,
                        const uint32_t *, int, int, int, int);

#define MAX_MAPS 8
#define MAX_RANK 5
#define MAX_ALIGNED (MAX_PARAMS / 3) /* an array is three parameters or more: never the limit */

typedef struct {
    Py_ssize_t param; /* the array's pointer parameter; its shape and strides follow */
    unsigned rank, itemsize;
} AlignedSpec;

typedef struct {
    Py_ssize_t param; /* the array's pointer parameter; its shape and strides follow */
    unsigned rank, swizzle;
    uint32_t box[MAX_RANK]; /* innermost first */
} MapSpec;

#define MAX_PARAMS 1024
#define MAX_BYTES 4096 /* the driver's limit on a kernel's parameters before CUDA 12.1 */

typedef struct {
    PyObject_HEAD
    LaunchFn launch;
    ContextGetFn context_get;
    ContextSetFn context_set;
    void *function, *context;
    unsigned threads, shared;
    Py_ssize_t count;
    char codes[MAX_PARAMS];
    uint16_t offsets[MAX_PARAMS];
    PyObject *failed, *kernel;
    Py_ssize_t map_count;
    MapSpec maps[MAX_MAPS];
    EncodeFn encode;
    Py_ssize_t aligned_count;
    AlignedSpec aligned[MAX_ALIGNED];
    PyObject *general; /* a callable returning a Launcher, until called; then that Launcher */
    vectorcallfunc vectorcall;
} Launcher;

/* The common part of the three types: called through vectorcall (no argument tuple). */
#define CALLABLE_TYPE(name)                                                                      \
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tilelang._launch." #name, .tp_basicsize = sizeof(name), \
    .tp_vectorcall_offset = offsetof(name, vectorcall), .tp_call = PyVectorcall_Call

typedef struct {
    _Alignas(16) char bytes[MAX_BYTES];
    Py_ssize_t filled; /* parameters written so far */
} Params;

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

/* The next parameter; 0 and an exception when there is none or it does not convert. */
static int push(Launcher *self, Params *params, PyObject *value) {
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
        if (d == 0 ? stride != 1 : (stride <= 0 || stride >= ((int64_t)1 << 39) || (stride * 2) % 16)) return 0;
        dims[d] = (uint64_t)size;
        if (d) strides[d - 1] = (uint64_t)stride * 2;
    }
    /* 16-bit elements (UINT16), no interleave, the swizzle, L2 promotion of 256 bytes, zeros out of bounds */
    return self->encode(map, 1, m->rank, (void *)(uintptr_t)pointer, dims, strides, m->box, ones, 0, m->swizzle, 3,
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

static PyObject *launch(Launcher *self, const unsigned grid[3], void *stream, Params *params);

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
static PyObject *launch(Launcher *self, const unsigned grid[3], void *stream, Params *params) {
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

static int read_grid(PyObject *grid, unsigned out[3]) {
    if (!PyTuple_Check(grid) || PyTuple_GET_SIZE(grid) != 3) {
        PyErr_SetString(PyExc_TypeError, "the grid is a tuple of three sizes");
        return 0;
    }
    for (int i = 0; i < 3; i++) {
        unsigned long size = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(grid, i));
        if (size == (unsigned long)-1 && PyErr_Occurred()) return 0;
        if (size > UINT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "a grid size past 32 bits");
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
    for (Py_ssize_t j = 0; j < map_count; j++) { /* (param, rank, box (innermost first), swizzle) */
        MapSpec *m = &self->maps[j];
        PyObject *box = NULL;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(maps, j), "nIO!I", &m->param, &m->rank, &PyTuple_Type, &box,
                              &m->swizzle) ||
            m->rank < 1 || m->rank > MAX_RANK || PyTuple_GET_SIZE(box) != m->rank || m->param < 0 ||
            m->param + 2 * (Py_ssize_t)m->rank >= count) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a tensor map is (param, rank, box, swizzle)");
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

static PyTypeObject LauncherType = {
    CALLABLE_TYPE(Launcher),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = launcher_new,
    .tp_dealloc = (destructor)launcher_dealloc,
    .tp_getset = launcher_getset,
    .tp_members = launcher_members,
    .tp_doc = "A kernel loaded on one GPU: launcher(grid, stream, flat).",
};

/* ------------------------------------------------------------------ fast path */

enum Kind {
    TENSOR,     /* (TENSOR, type, dtype, ndim, unit): a torch tensor, read by its methods */
    ARRAY,      /* (ARRAY, type, dtype, ndim, unit, itemsize, pointer attributes, device_of): read by
                   .dtype, .shape, .strides (bytes), the pointer down a chain of attributes, and its GPU
                   by device_of(value) (None: the only GPU) */
    READER,     /* (READER, type, reader, signature): reader(value, values) == signature */
    INT,        /* (INT, dtype class): a Python int: 0 int32, 1 int64, 2 uint64 by magnitude */
    TYPED,      /* (TYPED, type): a bool, float or NumPy scalar: its type is its dtype */
    CONST_INT,  /* (CONST_INT, value): a Constant int */
    CONST,      /* (CONST, key): a Constant: constant_key(value) == key */
};

typedef struct {
    int kind;
    /* borrowed from the plan, which the fast path keeps */
    PyObject *type, *object, *signature, *pointer, *device_of;
    long number, unit, itemsize;
} Entry;

typedef struct {
    PyObject_HEAD
    Launcher *launcher;
    PyObject *plan, *keyword_plan, *backend, *current_stream, *stream_handle, *constant_key, *device;
    Py_ssize_t nargs, nkw;
    Entry *entries; /* nargs positional, then nkw keywords */
    PyObject **keywords;
    vectorcallfunc vectorcall;
} FastPath;

static PyObject *S_get_device, *S_shape, *S_stride, *S_strides, *S_is_contiguous, *S_data_ptr, *S_dtype;

static PyObject *call_method(PyObject *name, PyObject *object) {
    return PyObject_VectorcallMethod(name, &object, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

static int push_new(Launcher *launcher, Params *params, PyObject *value) { /* consumes ``value`` */
    int done = value != NULL && push(launcher, params, value);
    Py_XDECREF(value);
    return done;
}

/* A strided device array read by its attributes (a torch tensor by its methods): 1 alike
   (pointer, shape and strides in elements pushed), 0 not, -1 an error (not alike either). */
static int strided(FastPath *self, Entry *e, PyObject *value, Params *params) {
    int torch = e->kind == TENSOR;
    PyObject *dtype = PyObject_GetAttr(value, S_dtype);
    if (dtype == NULL) return -1;
    int same = torch ? dtype == e->object : PyObject_RichCompareBool(dtype, e->object, Py_EQ);
    Py_DECREF(dtype); /* torch's dtypes are singletons: identity is enough */
    if (same != 1) return same;
    PyObject *device = torch ? call_method(S_get_device, value)
                     : e->device_of != Py_None ? PyObject_CallOneArg(e->device_of, value) : Py_NewRef(self->device);
    if (device == NULL) return -1;
    same = PyObject_RichCompareBool(device, self->device, Py_EQ);
    Py_DECREF(device);
    if (same != 1) return same;
    PyObject *shape = PyObject_GetAttr(value, S_shape), *strides = NULL, *pointer = NULL;
    int alike = -1;
    if (shape == NULL || !PyTuple_Check(shape) || PyTuple_GET_SIZE(shape) != e->number || e->number > 64) {
        alike = shape == NULL ? -1 : 0;
        goto done;
    }
    long long steps[64]; /* strides in elements (NumPy-like arrays give bytes) */
    if (torch) { /* contiguous (torch's rule: size-1 axes' strides do not count): C strides, as _torch_info */
        PyObject *contiguous = call_method(S_is_contiguous, value);
        if (contiguous == NULL) goto done;
        Py_DECREF(contiguous);
        if (contiguous == Py_True) {
            long long step = 1;
            for (Py_ssize_t i = e->number - 1; i >= 0; i--) {
                steps[i] = step;
                long long size = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
                if (size == -1 && PyErr_Occurred()) goto done;
                step *= size;
            }
            goto read_strides_done;
        }
    }
    strides = torch ? call_method(S_stride, value) : PyObject_GetAttr(value, S_strides);
    if (strides == NULL || !PyTuple_Check(strides) || PyTuple_GET_SIZE(strides) != e->number) {
        alike = strides == NULL ? -1 : 0;
        goto done;
    }
    for (Py_ssize_t i = 0; i < e->number; i++) {
        long long step = PyLong_AsLongLong(PyTuple_GET_ITEM(strides, i));
        if (step == -1 && PyErr_Occurred()) goto done;
        long long q = step / e->itemsize; /* floor division, as the full path's // */
        steps[i] = (step % e->itemsize != 0 && (step < 0) != (e->itemsize < 0)) ? q - 1 : q;
    }
read_strides_done:;
    long unit = 1; /* the last axis' stride is 1, or does not matter (at most one element) */
    if (e->number > 0) {
        long size = PyLong_AsLong(PyTuple_GET_ITEM(shape, e->number - 1));
        if (size == -1 && PyErr_Occurred()) goto done;
        unit = steps[e->number - 1] == 1 || size <= 1;
    }
    if (unit != e->unit) {
        alike = 0;
        goto done;
    }
    if (torch) {
        pointer = call_method(S_data_ptr, value);
    } else { /* e.g. .gpu_data.device_pointer (numba), .data.ptr (CuPy) */
        pointer = Py_NewRef(value);
        for (Py_ssize_t i = 0; pointer != NULL && i < PyTuple_GET_SIZE(e->pointer); i++)
            Py_SETREF(pointer, PyObject_GetAttr(pointer, PyTuple_GET_ITEM(e->pointer, i)));
    }
    if (pointer == NULL || !push_new(self->launcher, params, PyNumber_Long(pointer))) goto done;
    for (Py_ssize_t i = 0; i < e->number; i++)
        if (!push(self->launcher, params, PyTuple_GET_ITEM(shape, i))) goto done;
    for (Py_ssize_t i = 0; i < e->number; i++)
        if (!push_new(self->launcher, params, PyLong_FromLongLong(steps[i]))) goto done;
    alike = 1;
done:
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    Py_XDECREF(pointer);
    return alike;
}

static int reader(FastPath *self, Entry *e, PyObject *value, Params *params) {
    PyObject *values = PyList_New(0);
    if (values == NULL) return -1;
    PyObject *signature = PyObject_CallFunctionObjArgs(e->object, value, values, NULL);
    int alike = signature == NULL ? -1 : PyObject_RichCompareBool(signature, e->signature, Py_EQ);
    Py_XDECREF(signature);
    for (Py_ssize_t i = 0; alike == 1 && i < PyList_GET_SIZE(values); i++)
        if (!push(self->launcher, params, PyList_GET_ITEM(values, i))) alike = -1;
    Py_DECREF(values);
    return alike;
}

static int int_class(PyObject *value) { /* tilelang.dtypes.scalar_dtype's rule for Python ints */
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (overflow == 0) return (v >= INT32_MIN && v <= INT32_MAX) ? 0 : 1;
    if (overflow < 0) return -1;
    unsigned long long u = PyLong_AsUnsignedLongLong(value);
    if (u == (unsigned long long)-1 && PyErr_Occurred()) return -1; /* past uint64: the full path says why */
    return 2;
}

/* Whether ``value`` is alike the entry; its values pushed. 1, 0, or -1 on an error. */
static int alike(FastPath *self, Entry *e, PyObject *value, Params *params) {
    switch (e->kind) {
    case TENSOR: case ARRAY:
        return Py_TYPE(value) == (PyTypeObject *)e->type ? strided(self, e, value, params) : 0;
    case READER:
        return Py_TYPE(value) == (PyTypeObject *)e->type ? reader(self, e, value, params) : 0;
    case INT:
        if (!PyLong_CheckExact(value) || int_class(value) != e->number) return 0;
        return push(self->launcher, params, value) ? 1 : -1;
    case TYPED:
        if (Py_TYPE(value) != (PyTypeObject *)e->type) return 0;
        return push(self->launcher, params, value) ? 1 : -1;
    case CONST_INT:
        return PyLong_CheckExact(value) ? PyObject_RichCompareBool(value, e->object, Py_EQ) : 0;
    case CONST: {
        PyObject *key = PyObject_CallOneArg(self->constant_key, value);
        if (key == NULL) return -1;
        int same = PyObject_RichCompareBool(key, e->object, Py_EQ);
        Py_DECREF(key);
        return same;
    }
    }
    return 0;
}

static PyObject *fast_path_call(FastPath *self, PyObject *const *argv, size_t nargsf, PyObject *kwnames) {
    if (PyVectorcall_NARGS(nargsf) != 5 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "fast_path(grid, args, kwargs, backend, stream)");
        return NULL;
    }
    PyObject *grid = argv[0], *args = argv[1], *kwargs = argv[2], *backend = argv[3], *stream = argv[4];
    if (self->plan == NULL) Py_RETURN_FALSE; /* cleared by the collector */
    if (!PyTuple_Check(args) || PyTuple_GET_SIZE(args) != self->nargs || !PyDict_Check(kwargs) ||
        PyDict_GET_SIZE(kwargs) != self->nkw)
        Py_RETURN_FALSE;
    if (backend != self->backend) {
        int same = PyObject_RichCompareBool(backend, self->backend, Py_EQ);
        if (same != 1) goto decline;
    }
    Params params = {.filled = 0};
    for (Py_ssize_t i = 0; i < self->nargs + self->nkw; i++) {
        PyObject *value = i < self->nargs ? PyTuple_GET_ITEM(args, i)
                                          : PyDict_GetItemWithError(kwargs, self->keywords[i - self->nargs]);
        if (value == NULL) goto decline;
        Py_INCREF(value); /* held: checking it runs its Python code, which may drop it from kwargs */
        int same = alike(self, &self->entries[i], value, &params);
        Py_DECREF(value);
        if (same != 1) goto decline;
    }
    unsigned sizes[3];
    if (!read_grid(grid, sizes)) goto decline;
    if (sizes[0] == 0 || sizes[1] == 0 || sizes[2] == 0) Py_RETURN_TRUE; /* nothing to run */
    PyObject *handle = stream == Py_None ? PyObject_CallOneArg(self->current_stream, self->device)
                                         : PyObject_CallOneArg(self->stream_handle, stream);
    if (handle == NULL) return NULL; /* a bad stream= is the caller's error, not a decline */
    void *raw = PyLong_AsVoidPtr(handle);
    Py_DECREF(handle);
    if (raw == NULL && PyErr_Occurred()) return NULL;
    PyObject *done = launch(self->launcher, sizes, raw, &params);
    if (done == NULL) return NULL;
    Py_DECREF(done);
    Py_RETURN_TRUE;
decline: /* not alike (or it could not be read here): the full path decides, and names any error */
    if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_Exception)) return NULL; /* KeyboardInterrupt, say */
    PyErr_Clear();
    Py_RETURN_FALSE;
}

static int read_entry(PyObject *item, Entry *e) {
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) < 2) {
        PyErr_SetString(PyExc_TypeError, "a plan entry is a tuple (kind, ...)");
        return 0;
    }
    long kind = PyLong_AsLong(PyTuple_GET_ITEM(item, 0));
    e->kind = kind < TENSOR || kind > CONST ? -1 : (int)kind; /* -1: malformed, below */
    Py_ssize_t n = PyTuple_GET_SIZE(item);
    PyObject *second = PyTuple_GET_ITEM(item, 1);
    switch (e->kind) {
    case TENSOR:
        if (n != 5) break;
        e->type = second;
        e->object = PyTuple_GET_ITEM(item, 2);
        e->number = PyLong_AsLong(PyTuple_GET_ITEM(item, 3));
        e->unit = PyObject_IsTrue(PyTuple_GET_ITEM(item, 4));
        e->itemsize = 1; /* torch's strides are in elements */
        return !PyErr_Occurred();
    case ARRAY:
        if (n != 8 || !PyTuple_Check(PyTuple_GET_ITEM(item, 6))) break;
        e->type = second;
        e->object = PyTuple_GET_ITEM(item, 2);
        e->number = PyLong_AsLong(PyTuple_GET_ITEM(item, 3));
        e->unit = PyObject_IsTrue(PyTuple_GET_ITEM(item, 4));
        e->itemsize = PyLong_AsLong(PyTuple_GET_ITEM(item, 5));
        e->pointer = PyTuple_GET_ITEM(item, 6); /* the pointer's attribute chain */
        e->device_of = PyTuple_GET_ITEM(item, 7);
        if (e->itemsize <= 0 && !PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "itemsize must be positive");
        return !PyErr_Occurred();
    case READER:
        if (n != 4) break;
        e->type = second;
        e->object = PyTuple_GET_ITEM(item, 2);
        e->signature = PyTuple_GET_ITEM(item, 3);
        return 1;
    case INT:
        if (n != 2) break;
        e->number = PyLong_AsLong(second);
        return !PyErr_Occurred();
    case TYPED:
        if (n != 2) break;
        e->type = second;
        return 1;
    case CONST_INT: case CONST:
        if (n != 2) break;
        e->object = second;
        return 1;
    }
    PyErr_SetString(PyExc_ValueError, "a malformed plan entry");
    return 0;
}

/* The collector's: a Constant can be any object, one that refers to the kernel too. The
   entries borrow from the plans: once cleared, the fast path declines every call. */
static int fast_path_traverse(FastPath *self, visitproc visit, void *arg) {
    Py_VISIT(self->launcher);
    Py_VISIT(self->plan);
    Py_VISIT(self->keyword_plan);
    Py_VISIT(self->backend);
    Py_VISIT(self->current_stream);
    Py_VISIT(self->stream_handle);
    Py_VISIT(self->constant_key);
    Py_VISIT(self->device);
    return 0;
}

static int fast_path_clear(FastPath *self) {
    Py_CLEAR(self->launcher);
    Py_CLEAR(self->plan);
    Py_CLEAR(self->keyword_plan);
    Py_CLEAR(self->backend);
    Py_CLEAR(self->current_stream);
    Py_CLEAR(self->stream_handle);
    Py_CLEAR(self->constant_key);
    Py_CLEAR(self->device);
    return 0;
}

static void fast_path_dealloc(FastPath *self) {
    PyObject_GC_UnTrack(self);
    fast_path_clear(self);
    PyMem_Free(self->entries);
    PyMem_Free(self->keywords);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *fast_path_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *launcher, *plan, *keyword_plan, *backend, *device, *current_stream, *stream_handle, *constant_key;
    static char *names[] = {"launcher", "plan", "keyword_plan", "backend", "device", "current_stream",
                            "stream_handle", "constant_key", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!O!OOOOO", names, &LauncherType, &launcher, &PyTuple_Type,
                                     &plan, &PyTuple_Type, &keyword_plan, &backend, &device, &current_stream,
                                     &stream_handle, &constant_key))
        return NULL;
    FastPath *self = (FastPath *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->launcher = (Launcher *)Py_NewRef(launcher);
    self->plan = Py_NewRef(plan);
    self->keyword_plan = Py_NewRef(keyword_plan);
    self->backend = Py_NewRef(backend);
    self->device = Py_NewRef(device);
    self->current_stream = Py_NewRef(current_stream);
    self->stream_handle = Py_NewRef(stream_handle);
    self->constant_key = Py_NewRef(constant_key);
    self->vectorcall = (vectorcallfunc)fast_path_call;
    self->nargs = PyTuple_GET_SIZE(plan);
    self->nkw = PyTuple_GET_SIZE(keyword_plan);
    self->entries = PyMem_Calloc(self->nargs + self->nkw + 1, sizeof(Entry));
    self->keywords = PyMem_Calloc(self->nkw + 1, sizeof(PyObject *));
    if (self->entries == NULL || self->keywords == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < self->nargs; i++)
        if (!read_entry(PyTuple_GET_ITEM(plan, i), &self->entries[i])) goto fail;
    for (Py_ssize_t j = 0; j < self->nkw; j++) { /* (name, entry) */
        PyObject *pair = PyTuple_GET_ITEM(keyword_plan, j);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "a keyword plan entry is (name, entry)");
            goto fail;
        }
        self->keywords[j] = PyTuple_GET_ITEM(pair, 0);
        if (!read_entry(PyTuple_GET_ITEM(pair, 1), &self->entries[self->nargs + j])) goto fail;
    }
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

static PyMemberDef fast_path_members[] = {
    {"launcher", T_OBJECT, offsetof(FastPath, launcher), READONLY, "the kernel it launches"},
    {"plan", T_OBJECT, offsetof(FastPath, plan), READONLY, "what each positional argument must be"},
    {"keyword_plan", T_OBJECT, offsetof(FastPath, keyword_plan), READONLY, "(name, entry) per keyword"},
    {"device", T_OBJECT, offsetof(FastPath, device), READONLY, "the GPU it launches on"},
    {NULL},
};

static PyTypeObject FastPathType = {
    CALLABLE_TYPE(FastPath),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)fast_path_traverse,
    .tp_clear = (inquiry)fast_path_clear,
    .tp_new = fast_path_new,
    .tp_dealloc = (destructor)fast_path_dealloc,
    .tp_members = fast_path_members,
    .tp_doc = "The launch of calls alike one: fast_path(grid, args, kwargs, backend, stream) -> bool.",
};

/* ------------------------------------------------------------------ call site */

typedef struct {
    PyObject_HEAD
    PyObject *fast_paths, *grid, *full; /* a list of FastPath, the padded grid (or None), the full path */
    vectorcallfunc vectorcall;
} CallSite;

static PyObject *S_backend, *S_stream;

/* kernel[grid](*args, backend=None, stream=None, **constants): the first fast path that
   takes the call launches it; else full(*args, **kwargs), the way every first call goes. */
static PyObject *call_site_call(CallSite *self, PyObject *const *argv, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (self->full == NULL) { /* cleared by the collector */
        PyErr_SetString(PyExc_RuntimeError, "a cleared call site");
        return NULL;
    }
    if (self->grid == Py_None || PyList_GET_SIZE(self->fast_paths) == 0)
        return PyObject_Vectorcall(self->full, argv, nargsf, kwnames);
    PyObject *args = PyTuple_New(nargs), *kwargs = PyDict_New(), *backend = Py_None, *stream = Py_None;
    PyObject *result = NULL;
    if (args == NULL || kwargs == NULL) goto done;
    for (Py_ssize_t i = 0; i < nargs; i++) PyTuple_SET_ITEM(args, i, Py_NewRef(argv[i]));
    for (Py_ssize_t j = 0; j < nkw; j++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, j), *value = argv[nargs + j];
        if (PyUnicode_Compare(name, S_backend) == 0) backend = value;
        else if (PyUnicode_Compare(name, S_stream) == 0) stream = value;
        else if (PyDict_SetItem(kwargs, name, value) < 0) goto done;
    }
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(self->fast_paths); k++) {
        PyObject *fast_path = Py_NewRef(PyList_GET_ITEM(self->fast_paths, k)); /* the list may change meanwhile */
        PyObject *call[5] = {self->grid, args, kwargs, backend, stream};
        PyObject *taken = Py_IS_TYPE(fast_path, &FastPathType)
                              ? fast_path_call((FastPath *)fast_path, call, 5, NULL)
                              : PyObject_Vectorcall(fast_path, call, 5, NULL);
        Py_DECREF(fast_path);
        if (taken == NULL) goto done;
        int launched = taken == Py_True;
        Py_DECREF(taken);
        if (launched) {
            result = Py_NewRef(Py_None);
            goto done;
        }
    }
    result = PyObject_Vectorcall(self->full, argv, nargsf, kwnames);
done:
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    return result;
}

static PyObject *call_site_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *fast_paths, *grid, *full;
    static char *names[] = {"fast_paths", "grid", "full", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!OO", names, &PyList_Type, &fast_paths, &grid, &full))
        return NULL;
    CallSite *self = (CallSite *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->fast_paths = Py_NewRef(fast_paths);
    self->grid = Py_NewRef(grid);
    self->full = Py_NewRef(full);
    self->vectorcall = (vectorcallfunc)call_site_call;
    return (PyObject *)self;
}

/* A call site and its kernel refer to each other (through ``full``): the collector's. */
static int call_site_traverse(CallSite *self, visitproc visit, void *arg) {
    Py_VISIT(self->fast_paths);
    Py_VISIT(self->grid);
    Py_VISIT(self->full);
    return 0;
}

static int call_site_clear(CallSite *self) {
    Py_CLEAR(self->fast_paths);
    Py_CLEAR(self->grid);
    Py_CLEAR(self->full);
    return 0;
}

static void call_site_dealloc(CallSite *self) {
    PyObject_GC_UnTrack(self);
    call_site_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef call_site_members[] = {
    {"grid", T_OBJECT, offsetof(CallSite, grid), READONLY, "the grid as the driver takes it (None: per call)"},
    {NULL},
};

static PyTypeObject CallSiteType = {
    CALLABLE_TYPE(CallSite),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)call_site_traverse,
    .tp_clear = (inquiry)call_site_clear,
    .tp_new = call_site_new,
    .tp_dealloc = (destructor)call_site_dealloc,
    .tp_members = call_site_members,
    .tp_doc = "kernel[grid]: call_site(*args, **kwargs) launches by a fast path, else by the full path.",
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "tilelang._launch", "The launch hot path.", -1, NULL};

PyMODINIT_FUNC PyInit__launch(void) {
    if (PyType_Ready(&LauncherType) < 0 || PyType_Ready(&FastPathType) < 0 || PyType_Ready(&CallSiteType) < 0)
        return NULL;
    S_backend = PyUnicode_InternFromString("backend");
    S_stream = PyUnicode_InternFromString("stream");
    S_get_device = PyUnicode_InternFromString("get_device");
    S_shape = PyUnicode_InternFromString("shape");
    S_stride = PyUnicode_InternFromString("stride");
    S_strides = PyUnicode_InternFromString("strides");
    S_is_contiguous = PyUnicode_InternFromString("is_contiguous");
    S_data_ptr = PyUnicode_InternFromString("data_ptr");
    S_dtype = PyUnicode_InternFromString("dtype");
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "Launcher", (PyObject *)&LauncherType) < 0 ||
        PyModule_AddObjectRef(m, "FastPath", (PyObject *)&FastPathType) < 0 ||
        PyModule_AddObjectRef(m, "CallSite", (PyObject *)&CallSiteType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
#define KIND(name) PyModule_AddIntConstant(m, #name, name)
    if (KIND(TENSOR) || KIND(ARRAY) || KIND(READER) || KIND(INT) || KIND(TYPED) || KIND(CONST_INT) || KIND(CONST)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
