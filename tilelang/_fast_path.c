/* tilelang._launch, the fast path and the module (the Launcher and the packing: tilelang/_launch.c):

   FastPath(launcher, plan, keyword_plan, backend, device, current_stream, stream_handle,
            constant_key, guards)
       the launch of calls alike one that went the full way (tilelang/_fastpath.py builds
       the plan). fast_path(grid, args, kwargs, backend, stream) checks the call is alike,
       and that each guard (holder, name, value) still holds that value (a dict's item
       ``name``, or a cell's contents where name is None: the globals and closure variables
       the kernel read when it was compiled; the same object, or an equal int, float or
       str), reads its parameter values straight into the buffer and launches: True; any
       difference, False (nothing launched; the caller takes the full path).

   CallSite(fast_paths, grid, full)
       what kernel[grid] returns: its call tries the kernel's fast paths (a list the full
       path adds to), then full(*args, **kwargs). */

#include "_launch.h"

enum Kind {
    TENSOR,     /* (TENSOR, type, dtype, ndim, flags): a torch tensor, read by its methods; flags: bit 0 a unit
                   last-axis stride, bit 1 written (no zero stride then: elements sharing memory race) */
    ARRAY,      /* (ARRAY, type, dtype, ndim, flags, itemsize, pointer attributes, device_of): read by
                   .dtype, .shape, .strides (bytes), the pointer down a chain of attributes, and its GPU
                   by device_of(value) (None: the only GPU) */
    READER,     /* (READER, type, reader, signature): reader(value, values) == signature */
    INT,        /* (INT, dtype class[, (low, high)]): a Python int: 0 int32, 1 int64, 2 uint64 by magnitude;
                   with bounds, one in [low, high] (what the dtypes it meets hold: runtime_checks.py) */
    TYPED,      /* (TYPED, type): a bool, float or NumPy scalar: its type is its dtype */
    CONST_INT,  /* (CONST_INT, value): a Constant int */
    CONST,      /* (CONST, key): a Constant: constant_key(value) == key */
};

typedef struct {
    int kind;
    /* borrowed from the plan, which the fast path keeps */
    PyObject *type, *object, *signature, *pointer, *device_of;
    long number, flags, itemsize;
} Entry;

typedef struct {
    PyObject_HEAD
    Launcher *launcher;
    PyObject *plan, *keyword_plan, *backend, *current_stream, *stream_handle, *constant_key, *device, *guards;
    Py_ssize_t nargs, nkw;
    Entry *entries; /* nargs positional, then nkw keywords */
    PyObject **keywords;
    vectorcallfunc vectorcall;
} FastPath;

static PyObject *S_get_device, *S_shape, *S_stride, *S_strides, *S_is_contiguous, *S_is_neg, *S_data_ptr, *S_dtype;

static PyObject *call_method(PyObject *name, PyObject *object) {
    return PyObject_VectorcallMethod(name, &object, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

static int push_new(Launcher *launcher, Params *params, PyObject *value) { /* consumes ``value`` */
    int done = value != NULL && push(launcher, params, value);
    Py_XDECREF(value);
    return done;
}

/* Whether a torch tensor is a lazily negated view (neg bit, z.conj().imag): its memory holds -x, and
   the full path refuses it. 1 yes, 0 no, -1 an error. */
static int negated(PyObject *value) {
    PyObject *result = call_method(S_is_neg, value);
    if (result == NULL) return -1;
    Py_DECREF(result);
    return result != Py_False;
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
        long long elements = 1;
        for (Py_ssize_t i = e->number - 1; contiguous == Py_True && i >= 0; i--) {
            steps[i] = elements;
            long long size = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
            if (size == -1 && PyErr_Occurred()) goto done;
            elements *= size;
        }
        /* a view may be negated (z.conj().imag): a strided one, or a contiguous one of one element
           (tensor([1+2j]).conj().imag); larger contiguous ones come only from the private torch._neg_view
           (not asked: the common case stays fast) */
        int neg = contiguous != Py_True || elements <= 1 ? negated(value) : 0;
        if (neg != 0) {
            alike = neg < 0 ? -1 : 0;
            goto done;
        }
        if (contiguous == Py_True) goto read_strides_done;
    }
    strides = torch ? call_method(S_stride, value) : PyObject_GetAttr(value, S_strides);
    if (strides == NULL || !PyTuple_Check(strides) || PyTuple_GET_SIZE(strides) != e->number) {
        alike = strides == NULL ? -1 : 0;
        goto done;
    }
    for (Py_ssize_t i = 0; i < e->number; i++) {
        long long step = PyLong_AsLongLong(PyTuple_GET_ITEM(strides, i));
        if (step == -1 && PyErr_Occurred()) goto done;
        if (step % e->itemsize != 0) { /* not whole elements: the full path refuses the array */
            alike = 0;
            goto done;
        }
        steps[i] = step / e->itemsize;
    }
read_strides_done:;
    long unit = 1; /* the last axis' stride is 1, or does not matter (at most one element) */
    if (e->number > 0) {
        long size = PyLong_AsLong(PyTuple_GET_ITEM(shape, e->number - 1));
        if (size == -1 && PyErr_Occurred()) goto done;
        unit = steps[e->number - 1] == 1 || size <= 1;
    }
    if (unit != (e->flags & 1)) {
        alike = 0;
        goto done;
    }
    if (e->flags & 2) { /* written: elements sharing memory (a zero stride) race; the full path refuses them */
        int shared = 0, empty = 0;
        for (Py_ssize_t i = 0; i < e->number; i++) {
            long size = PyLong_AsLong(PyTuple_GET_ITEM(shape, i));
            if (size == -1 && PyErr_Occurred()) goto done;
            shared |= steps[i] == 0 && size > 1;
            empty |= size == 0;
        }
        if (shared && !empty) {
            alike = 0;
            goto done;
        }
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
        if (e->object != NULL) { /* out of bounds: the full path refuses it */
            int low = PyObject_RichCompareBool(value, PyTuple_GET_ITEM(e->object, 0), Py_GE);
            if (low != 1) return low;
            int high = PyObject_RichCompareBool(value, PyTuple_GET_ITEM(e->object, 1), Py_LE);
            if (high != 1) return high;
        }
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
    for (Py_ssize_t g = 0; g < PyTuple_GET_SIZE(self->guards); g++) { /* (holder, name, value), checked when made */
        PyObject *guard = PyTuple_GET_ITEM(self->guards, g), *holder = PyTuple_GET_ITEM(guard, 0);
        PyObject *was = PyTuple_GET_ITEM(guard, 2);
        PyObject *now = PyCell_Check(holder) ? PyCell_GET(holder)
                                             : PyDict_GetItemWithError(holder, PyTuple_GET_ITEM(guard, 1));
        if (now == was) continue;
        /* an equal int, float or str in a new object (`N = 1000` again) is no change; anything else: the full path */
        if (now == NULL || Py_TYPE(now) != Py_TYPE(was) ||
            !(PyLong_CheckExact(now) || PyFloat_CheckExact(now) || PyUnicode_CheckExact(now)) ||
            PyObject_RichCompareBool(now, was, Py_EQ) != 1)
            goto decline;
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
        e->flags = PyLong_AsLong(PyTuple_GET_ITEM(item, 4));
        e->itemsize = 1; /* torch's strides are in elements */
        return !PyErr_Occurred();
    case ARRAY:
        if (n != 8 || !PyTuple_Check(PyTuple_GET_ITEM(item, 6))) break;
        e->type = second;
        e->object = PyTuple_GET_ITEM(item, 2);
        e->number = PyLong_AsLong(PyTuple_GET_ITEM(item, 3));
        e->flags = PyLong_AsLong(PyTuple_GET_ITEM(item, 4));
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
        if (n != 2 && n != 3) break;
        e->number = PyLong_AsLong(second);
        e->object = n == 3 ? PyTuple_GET_ITEM(item, 2) : NULL;
        if (e->object != NULL && (!PyTuple_Check(e->object) || PyTuple_GET_SIZE(e->object) != 2)) break;
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
    Py_VISIT(self->guards);
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
    Py_CLEAR(self->guards);
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
    PyObject *guards;
    static char *names[] = {"launcher", "plan", "keyword_plan", "backend", "device", "current_stream",
                            "stream_handle", "constant_key", "guards", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!O!OOOOOO!", names, &LauncherType, &launcher, &PyTuple_Type,
                                     &plan, &PyTuple_Type, &keyword_plan, &backend, &device, &current_stream,
                                     &stream_handle, &constant_key, &PyTuple_Type, &guards))
        return NULL;
    for (Py_ssize_t g = 0; g < PyTuple_GET_SIZE(guards); g++) {
        PyObject *guard = PyTuple_GET_ITEM(guards, g);
        if (!PyTuple_Check(guard) || PyTuple_GET_SIZE(guard) != 3 ||
            !(PyCell_Check(PyTuple_GET_ITEM(guard, 0)) || PyDict_Check(PyTuple_GET_ITEM(guard, 0)))) {
            PyErr_SetString(PyExc_TypeError, "a guard is (a dict or a cell, name, value)");
            return NULL;
        }
    }
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
    self->guards = Py_NewRef(guards);
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
    S_is_neg = PyUnicode_InternFromString("is_neg");
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
